#include "server/bsp_aggregator.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <random>

#include "gtest/gtest.h"

namespace kestrel {
namespace {

constexpr int kDim = 3;

struct OwnedPart {
  int worker, index, count;
  std::vector<uint64_t> keys;
  std::vector<float> grads;
};

BspAggregator::Part View(const OwnedPart& p, int64_t clock) {
  BspAggregator::Part part;
  part.worker = p.worker;
  part.clock = clock;
  part.index = p.index;
  part.count = p.count;
  part.keys = p.keys;
  part.grads = p.grads;
  return part;
}

// Each worker pushes random keys (overlapping between workers) with awkward float gradients, split in
// 1..3 parts; some workers send an empty part.
std::vector<OwnedPart> RandomPush(int workers, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<OwnedPart> parts;
  for (int w = 0; w < workers; ++w) {
    std::vector<uint64_t> keys;
    const int n = (w == 1) ? 0 : 20 + static_cast<int>(rng() % 30);
    for (int i = 0; i < n; ++i) keys.push_back(rng() % 64);
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    const int count = 1 + static_cast<int>(rng() % 3);
    for (int p = 0; p < count; ++p) {
      OwnedPart part{w, p, count, {}, {}};
      for (size_t i = keys.size() * p / count; i < keys.size() * (p + 1) / count; ++i) {
        part.keys.push_back(keys[i]);
        for (int j = 0; j < kDim; ++j) {
          part.grads.push_back(std::uniform_real_distribution<float>(-1, 1)(rng) * std::pow(10.0f, j - 3.0f));
        }
      }
      parts.push_back(std::move(part));
    }
  }
  return parts;
}

// Feeds `parts` in the given order; returns the one completed batch.
BspAggregator::Batch Feed(BspAggregator& agg, const std::vector<OwnedPart>& parts, int64_t clock) {
  std::optional<BspAggregator::Batch> out;
  for (size_t i = 0; i < parts.size(); ++i) {
    auto result = agg.Add(View(parts[i], clock));
    EXPECT_TRUE(result.ok()) << result.status();
    if (result->has_value()) {
      EXPECT_EQ(i, parts.size() - 1) << "completed before the last part";
      out = std::move(*result);
    }
  }
  EXPECT_TRUE(out.has_value());
  return out.value_or(BspAggregator::Batch{});
}

TEST(BspAggregatorTest, ResultIsBitwiseIndependentOfArrivalOrder) {
  constexpr int kWorkers = 4;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const std::vector<OwnedPart> parts = RandomPush(kWorkers, seed);
    // Reference: for every key, sum the workers' gradients in rank order, then scale by 1/N.
    std::map<uint64_t, std::vector<float>> expected;
    for (int w = 0; w < kWorkers; ++w) {
      for (const auto& p : parts) {
        if (p.worker != w) continue;
        for (size_t i = 0; i < p.keys.size(); ++i) {
          auto& row = expected[p.keys[i]];
          row.resize(kDim, 0.0f);
          for (int j = 0; j < kDim; ++j) row[j] += p.grads[i * kDim + j];
        }
      }
    }
    std::mt19937 shuffle_rng(static_cast<unsigned>(seed));
    std::vector<OwnedPart> order = parts;
    for (int trial = 0; trial < 5; ++trial) {
      std::shuffle(order.begin(), order.end(), shuffle_rng);
      BspAggregator agg(kWorkers, kDim);
      const BspAggregator::Batch batch = Feed(agg, order, /*clock=*/7);
      ASSERT_EQ(batch.keys.size(), expected.size());
      size_t u = 0;
      for (const auto& [key, row] : expected) {
        ASSERT_EQ(batch.keys[u], key);
        for (int j = 0; j < kDim; ++j) {
          const float want = row[j] * (1.0f / kWorkers);
          ASSERT_EQ(std::memcmp(&batch.grads[u * kDim + j], &want, sizeof(float)), 0)
              << "seed " << seed << " trial " << trial << " key " << key << " element " << j;
        }
        ++u;
      }
      EXPECT_EQ(agg.applied_through(), 7);
      EXPECT_EQ(agg.pending_clocks(), 0u);
    }
  }
}

TEST(BspAggregatorTest, DuplicatesAreAppliedOnce) {
  BspAggregator agg(2, kDim);
  OwnedPart w0{0, 0, 1, {1, 2}, std::vector<float>(2 * kDim, 1.0f)};
  OwnedPart w1{1, 0, 1, {2, 3}, std::vector<float>(2 * kDim, 2.0f)};
  ASSERT_FALSE(agg.Add(View(w0, 0))->has_value());
  ASSERT_FALSE(agg.Add(View(w0, 0))->has_value()) << "a retried part is ignored";
  EXPECT_EQ(agg.pending_clocks(), 1u);
  auto done = agg.Add(View(w1, 0));
  ASSERT_TRUE(done.ok() && done->has_value());
  EXPECT_EQ((*done)->keys, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ((*done)->grads[0], 0.5f);         // key 1: (1) / 2
  EXPECT_EQ((*done)->grads[kDim], 1.5f);      // key 2: (1 + 2) / 2, worker 0's part counted once
  EXPECT_EQ((*done)->grads[2 * kDim], 1.0f);  // key 3: (2) / 2
  // A repeat while clock 0 is being applied is told to retry (not acknowledged before the apply)...
  EXPECT_EQ(agg.Add(View(w1, 0)).status().code(), absl::StatusCode::kUnavailable);
  agg.Applied(0);
  // ...and once applied, a restarted worker re-sending clock 0 changes nothing.
  ASSERT_FALSE(agg.Add(View(w1, 0))->has_value());
  EXPECT_EQ(agg.pending_clocks(), 0u);
  EXPECT_EQ(agg.applied_through(), 0);
  // A late part that differs from what was applied is refused, not silently dropped.
  OwnedPart changed = w1;
  changed.grads[0] = 9.0f;
  EXPECT_EQ(agg.Add(View(changed, 0)).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(BspAggregatorTest, DifferentContentsForTheSamePartAreRefused) {
  BspAggregator agg(2, kDim);
  OwnedPart first{0, 0, 1, {1, 2}, std::vector<float>(2 * kDim, 1.0f)};
  OwnedPart second = first;
  second.grads[3] = 2.0f;  // a second, different push of the same table in the same clock
  ASSERT_TRUE(agg.Add(View(first, 0)).ok());
  auto refused = agg.Add(View(second, 0));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(refused.status().message()).find("once per clock"), std::string::npos);
}

TEST(BspAggregatorTest, ASkippedClockIsReportedNotLost) {
  BspAggregator agg(3, kDim);
  OwnedPart w0{0, 0, 1, {1}, std::vector<float>(kDim, 1.0f)};
  OwnedPart w2{2, 0, 1, {1}, std::vector<float>(kDim, 1.0f)};
  ASSERT_TRUE(agg.Add(View(w0, 0)).ok());  // workers 1 and 2 never push clock 0
  auto refused = agg.Add(View(w2, 1));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(refused.status().message()).find("workers 1, 2"), std::string::npos)
      << refused.status();
}

// Only the clock being collected is buffered: pushes of other clocks (descending, or skipping ahead) are
// refused, so nobody can make a server hold many clocks.
TEST(BspAggregatorTest, OnlyTheClockBeingCollectedIsBuffered) {
  BspAggregator agg(2, kDim);
  OwnedPart w0{0, 0, 1, {1}, std::vector<float>(kDim, 1.0f)};
  OwnedPart w1{1, 0, 1, {2}, std::vector<float>(kDim, 1.0f)};
  ASSERT_TRUE(agg.Add(View(w0, 1000)).ok());  // the first clock this server sees may be any (a restore)
  for (int64_t clock : {999, 998, 1001, 5000}) {
    EXPECT_EQ(agg.Add(View(w1, clock)).status().code(), absl::StatusCode::kFailedPrecondition) << clock;
  }
  EXPECT_EQ(agg.pending_clocks(), 1u);
  absl::StatusOr<std::optional<BspAggregator::Batch>> done = agg.Add(View(w1, 1000));
  ASSERT_TRUE(done.ok() && done->has_value()) << done.status();
  agg.Applied(1000);
  EXPECT_EQ(agg.Add(View(w0, 1002)).status().code(), absl::StatusCode::kFailedPrecondition) << "skips 1001";
  EXPECT_TRUE(agg.Add(View(w0, 1001)).ok());
}

TEST(BspAggregatorTest, RejectsMalformedParts) {
  BspAggregator agg(2, kDim);
  OwnedPart bad_worker{2, 0, 1, {1}, std::vector<float>(kDim)};
  EXPECT_EQ(agg.Add(View(bad_worker, 0)).status().code(), absl::StatusCode::kInvalidArgument);
  OwnedPart bad_index{0, 2, 2, {1}, std::vector<float>(kDim)};
  EXPECT_EQ(agg.Add(View(bad_index, 0)).status().code(), absl::StatusCode::kInvalidArgument);
  OwnedPart bad_grads{0, 0, 1, {1}, std::vector<float>(kDim + 1)};
  EXPECT_EQ(agg.Add(View(bad_grads, 0)).status().code(), absl::StatusCode::kInvalidArgument);
  OwnedPart first{0, 0, 2, {1}, std::vector<float>(kDim)};
  ASSERT_TRUE(agg.Add(View(first, 0)).ok());
  OwnedPart changed{0, 1, 3, {2}, std::vector<float>(kDim)};
  EXPECT_EQ(agg.Add(View(changed, 0)).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BspAggregatorTest, FencedWorkersAreLeftOutOfTheirHalfDoneClockAndAveragedOverTheOthers) {
  BspAggregator agg(3, 1);
  const std::vector<uint64_t> k = {7};
  const std::vector<float> g0 = {3.0f}, g1 = {100.0f}, g2 = {5.0f};
  auto part = [&](int worker, int index, int count, const std::vector<float>& grads) {
    BspAggregator::Part p;
    p.worker = worker;
    p.clock = 4;
    p.index = index;
    p.count = count;
    p.keys = k;
    p.grads = grads;
    return p;
  };
  // Workers 0 and 2 pushed clock 4 whole; worker 1 only one of its two parts, then died.
  ASSERT_FALSE(agg.Add(part(0, 0, 1, g0))->has_value());
  ASSERT_FALSE(agg.Add(part(1, 0, 2, g1))->has_value());
  ASSERT_FALSE(agg.Add(part(2, 0, 1, g2))->has_value());
  EXPECT_TRUE(absl::IsFailedPrecondition(agg.CompleteWithout(4).status())) << "not fenced";
  EXPECT_TRUE(absl::IsInvalidArgument(agg.Fence({0, 1, 2}, 4).status())) << "nobody would be left";
  EXPECT_TRUE(absl::IsInvalidArgument(agg.Fence({3}, 4).status()));
  absl::StatusOr<BspAggregator::Fenced> fenced = agg.Fence({1}, 4);
  ASSERT_TRUE(fenced.ok());
  EXPECT_EQ(*fenced, BspAggregator::Fenced::kNotApplied);
  // Its late part is refused now, and would not have completed the clock anyway.
  EXPECT_TRUE(absl::IsFailedPrecondition(agg.Add(part(1, 1, 2, g1)).status()));
  absl::StatusOr<std::optional<BspAggregator::Batch>> batch = agg.CompleteWithout(4);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_TRUE(batch->has_value());
  EXPECT_EQ((*batch)->keys, k);
  EXPECT_EQ((*batch)->grads, std::vector<float>{4.0f}) << "(3 + 5) / 2: worker 1's part is not in it";
  agg.Applied(4);
  EXPECT_EQ(agg.applied_through(), 4);
  // Asked again (a retried removal): nothing more to apply, and the fence says it was completed without them.
  EXPECT_FALSE(agg.CompleteWithout(4)->has_value());
  EXPECT_EQ(*agg.Fence({1}, 4), BspAggregator::Fenced::kCompletedWithout);
}

TEST(BspAggregatorTest, AClockAppliedWithAFencedWorkerIsReportedAsSuch) {
  BspAggregator agg(2, 1);
  const std::vector<uint64_t> k = {1};
  const std::vector<float> g = {1.0f};
  for (int w = 0; w < 2; ++w) {
    BspAggregator::Part p;
    p.worker = w;
    p.clock = 0;
    p.keys = k;
    p.grads = g;
    auto out = agg.Add(p);
    ASSERT_TRUE(out.ok());
    if (out->has_value()) agg.Applied(0);
  }
  EXPECT_EQ(*agg.Fence({1}, 0), BspAggregator::Fenced::kApplied);
  EXPECT_FALSE(agg.CompleteWithout(0)->has_value());
}

TEST(BspAggregatorTest, SumKeepsTheOneWritersValuesBitForBitAndAddsSeveral) {
  BspAggregator agg(3, kDim, BspAggregator::Combine::kSum);
  // 0.1f * (1/3) * 3 is not 0.1f, and 0 + -0 is +0: only an unscaled copy keeps these.
  const OwnedPart writer{0, 0, 1, {2, 5}, {0.1f, -0.0f, 1e-40f, 1e15f, -1e15f, 3.14159274f}};
  const OwnedPart empty1{1, 0, 1, {}, {}}, empty2{2, 0, 1, {}, {}};
  BspAggregator::Batch batch = Feed(agg, {empty1, writer, empty2}, /*clock=*/0);
  agg.Applied(0);
  EXPECT_EQ(batch.keys, writer.keys);
  ASSERT_EQ(batch.grads.size(), writer.grads.size());
  EXPECT_EQ(std::memcmp(batch.grads.data(), writer.grads.data(), sizeof(float) * writer.grads.size()), 0);

  // Two writers of one key: their sum, unscaled.
  const OwnedPart a{0, 0, 1, {5}, {1.0f, 2.0f, 3.0f}}, b{2, 0, 1, {5}, {0.5f, 0.5f, 0.5f}};
  batch = Feed(agg, {a, empty1, b}, /*clock=*/1);
  agg.Applied(1);
  EXPECT_EQ(batch.grads, (std::vector<float>{1.5f, 2.5f, 3.5f}));

  // A clock completed without a removed worker is summed too.
  ASSERT_FALSE(agg.Add(View(writer, 2))->has_value());
  ASSERT_FALSE(agg.Add(View(empty2, 2))->has_value());
  ASSERT_EQ(*agg.Fence({1}, 2), BspAggregator::Fenced::kNotApplied);
  absl::StatusOr<std::optional<BspAggregator::Batch>> without = agg.CompleteWithout(2);
  ASSERT_TRUE(without.ok() && without->has_value()) << without.status();
  EXPECT_EQ(std::memcmp((*without)->grads.data(), writer.grads.data(), sizeof(float) * writer.grads.size()), 0);
}

}  // namespace
}  // namespace kestrel
