// AdmissionSketch (server/admission_sketch.h): sizing, counting, halving and the saved state.
#include "server/admission_sketch.h"

#include <cstdint>

#include "common/hash.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

TEST(AdmissionSketchTest, WidthFitsTheBudgetAndIsOffWithoutAdmission) {
  CapacityPolicy policy;
  policy.set_admit_after(1);
  EXPECT_EQ(AdmissionSketch::WidthFor(policy, 64), 0u);
  policy.set_admit_after(2);
  policy.set_sketch_bytes(64 << 10);
  const uint32_t width = AdmissionSketch::WidthFor(policy, 64);
  EXPECT_EQ(width & (width - 1), 0u);
  EXPECT_LE(uint64_t{width} * AdmissionSketch::kDepth * 64, uint64_t{64} << 10);
  EXPECT_GT(uint64_t{width} * 2 * AdmissionSketch::kDepth * 64, uint64_t{64} << 10);
  policy.set_sketch_bytes(0);
  EXPECT_EQ(uint64_t{AdmissionSketch::WidthFor(policy, 64)} * AdmissionSketch::kDepth * 64,
            AdmissionSketch::kDefaultBytes);
}

TEST(AdmissionSketchTest, CountsRecurringKeysAndSaturates) {
  AdmissionSketch sketch(1 << 12);
  EXPECT_FALSE(sketch.dirty());
  const uint64_t hash = Mix64(42);
  for (uint32_t n = 1; n <= 10; ++n) EXPECT_EQ(sketch.Count(hash), n);
  EXPECT_TRUE(sketch.dirty());
  EXPECT_EQ(sketch.Count(Mix64(43)), 1u);
  AdmissionSketch tiny(16);
  uint32_t last = 0;
  for (int n = 0; n < 1000; ++n) last = tiny.Count(hash);
  EXPECT_LE(last, AdmissionSketch::kMaxCount);
}

TEST(AdmissionSketchTest, CountsAreHalvedEveryWidthCounts) {
  AdmissionSketch sketch(16);
  const uint64_t hash = Mix64(7);
  for (int n = 0; n < 15; ++n) sketch.Count(hash);  // 15 counts: no halving yet
  EXPECT_EQ(sketch.Count(hash), 16u);               // the 16th count halves every counter afterwards
  EXPECT_EQ(sketch.Count(hash), 9u);
}

TEST(AdmissionSketchTest, SaveAndLoadRoundTrip) {
  AdmissionSketch a(64);
  for (uint64_t k = 0; k < 40; ++k) a.Count(Mix64(k % 5));
  AdmissionSketchState::Stripe state;
  a.Save(&state);
  EXPECT_TRUE(AdmissionSketch::Fits(state, 64));
  EXPECT_FALSE(AdmissionSketch::Fits(state, 32));
  AdmissionSketch b(64);
  b.Load(state);
  EXPECT_TRUE(b.dirty());
  for (uint64_t k = 0; k < 5; ++k) EXPECT_EQ(b.Count(Mix64(k)), a.Count(Mix64(k)));
  b.Reset();
  EXPECT_FALSE(b.dirty());
  EXPECT_EQ(b.Count(Mix64(0)), 1u);
  state.set_increments(64);
  EXPECT_FALSE(AdmissionSketch::Fits(state, 64));
}

}  // namespace
}  // namespace kestrel
