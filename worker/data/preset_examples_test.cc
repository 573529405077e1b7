#include "worker/data/preset_examples.h"

#include <cmath>

#include "gtest/gtest.h"
#include "worker/data/feature_map.h"

namespace kestrel {
namespace {

TEST(PresetExamplesTest, CriteoExampleFillsAllSlotsAndDenseInputs) {
  CriteoExample e;
  e.label = 1;
  e.integers[0] = 5;
  e.integer_missing[1] = true;
  e.categories[0] = 0xabc;
  e.categories[1] = kMissingValue;
  Batch b;
  b.Reset(kCriteoFields, kCriteoIntegerFields);
  AppendCriteo(e, &b);
  ASSERT_EQ(b.size, 1);
  ASSERT_EQ(b.keys.size(), 39u);
  EXPECT_EQ(b.keys[0], IntegerKey(0, false, 5));
  EXPECT_EQ(b.keys[1], IntegerKey(1, true, 0));
  EXPECT_EQ(b.keys[13], CategoricalKey(0, 0xabc));
  EXPECT_EQ(b.keys[14], CategoricalKey(1, kMissingValue));
  EXPECT_EQ(b.values, std::vector<float>(39, 1.0f));
  ASSERT_EQ(b.dense.size(), 13u);
  EXPECT_FLOAT_EQ(b.dense[0], std::log1p(5.0f));
  EXPECT_EQ(b.dense[1], 0.0f);
  EXPECT_EQ(b.labels, std::vector<float>{1.0f});
}

TEST(PresetExamplesTest, LibsvmLeavesTheFieldsAfterItsFeaturesEmptyAndRefusesTooManyFeatures) {
  Batch b;
  b.Reset(3, 0);
  LibsvmExample e;
  e.label = 0;
  e.indices = {7, 0};  // index 0 is a feature like any other
  e.values = {0.5f, 2.0f};
  ASSERT_TRUE(AppendLibsvm(e, &b).ok());
  EXPECT_EQ(b.keys, (std::vector<uint64_t>{LibsvmKey(7), LibsvmKey(0)}));
  EXPECT_EQ(b.values, (std::vector<float>{0.5f, 2.0f}));
  EXPECT_EQ(b.bag_offsets, (std::vector<uint32_t>{0, 1, 2, 2})) << "the third field is an empty bag";
  e.indices = {1, 2, 3, 4};
  e.values = {1, 1, 1, 1};
  absl::Status s = AppendLibsvm(e, &b);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("libsvm_slots"), absl::string_view::npos) << s;
  EXPECT_EQ(b.size, 1) << "a refused example leaves the batch unchanged";
  EXPECT_EQ(b.keys.size(), 2u);
  EXPECT_EQ(b.bag_offsets.size(), 4u);
}

}  // namespace
}  // namespace kestrel
