#include "scheduler/rescale_layout.h"

#include <algorithm>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "common/test_seed.h"
#include "gtest/gtest.h"
#include "scheduler/member.h"

namespace kestrel {
namespace {

// `n` registered ranks of `role` (id = rank), alive.
std::vector<Member> Ranks(Role role, int n) {
  std::vector<Member> out(n);
  for (int r = 0; r < n; ++r) {
    out[r].role = role;
    out[r].rank = r;
    out[r].id = r;
    out[r].alive = true;
  }
  return out;
}

// Registers id `id` at a joining place of `layout` (alive), numbering the joining ranks after `job_count`.
Member* Join(RescaleLayout& layout, Role role, int id, int job_count) {
  Member* m = layout.Place(role, id);
  if (m == nullptr) return nullptr;
  m->role = role;
  m->id = id;
  m->alive = true;
  layout.RankJoining(role, job_count, m);
  return m;
}

std::vector<int> Ids(const std::vector<Member>& ranks) {
  std::vector<int> out;
  for (const Member& m : ranks) out.push_back(m.id);
  return out;
}

TEST(MapRanksTest, KeepsTheOrderOfWhatRemainsThenAddsJoiningRanks) {
  EXPECT_EQ(MapRanks(3, 2, {1}), (std::vector<int>{0, 2}));
  EXPECT_EQ(MapRanks(3, 1, {0}), (std::vector<int>{1}));
  EXPECT_EQ(MapRanks(3, 4, {}), (std::vector<int>{0, 1, 2, -1}));
  EXPECT_EQ(MapRanks(4, 2, {}), (std::vector<int>{0, 1}));
  EXPECT_EQ(MapRanks(4, 1, {0, 2}), (std::vector<int>{1}));
}

// For any old count, removals and target: `target` ranks, the kept ones first (increasing, none removed, as many
// as remain up to the target), then joining ones (-1).
TEST(MapRanksTest, RandomLayoutsKeepTheRanksLeftInOrderThenJoin) {
  const TestSeed seed;
  std::mt19937 rng(seed.value());
  for (int trial = 0; trial < 1000; ++trial) {
    const int old_count = std::uniform_int_distribution<int>(1, 12)(rng);
    const int target = std::uniform_int_distribution<int>(1, 16)(rng);
    std::vector<int> removed;
    for (int r = 0; r < old_count; ++r) {
      if (std::uniform_int_distribution<int>(0, 3)(rng) == 0) removed.push_back(r);
    }
    const std::vector<int> map = MapRanks(old_count, target, removed);
    ASSERT_EQ(static_cast<int>(map.size()), target);
    const int kept = std::min(target, old_count - static_cast<int>(removed.size()));
    for (int r = 0; r < target; ++r) {
      if (r >= kept) {
        EXPECT_EQ(map[r], -1) << "rank " << r;
        continue;
      }
      EXPECT_TRUE(map[r] >= 0 && map[r] < old_count);
      EXPECT_TRUE(std::find(removed.begin(), removed.end(), map[r]) == removed.end()) << "a removed rank kept";
      if (r > 0) {
        EXPECT_LT(map[r - 1], map[r]) << "the kept ranks keep their order";
      }
    }
  }
}

TEST(RescaleLayoutTest, CheckRefusesTargetsTheLayoutCannotTake) {
  RescaleLayout layout("p", 0);
  std::vector<Member> servers = Ranks(Role::kServer, 3);
  const std::vector<Member> workers = Ranks(Role::kWorker, 2);
  servers[1].alive = false;
  EXPECT_TRUE(absl::IsInvalidArgument(layout.Check({0, 2}, servers, workers)));
  EXPECT_TRUE(absl::IsInvalidArgument(layout.Check({3, 2}, servers, workers))) << "nothing to change";
  EXPECT_TRUE(absl::IsInvalidArgument(layout.Check({2, 2, {1, 1}}, servers, workers))) << "must increase";
  EXPECT_TRUE(absl::IsInvalidArgument(layout.Check({2, 2, {3}}, servers, workers))) << "outside the job";
  EXPECT_TRUE(absl::IsFailedPrecondition(layout.Check({2, 2, {0}}, servers, workers))) << "rank 0 is alive";
  EXPECT_TRUE(absl::IsInvalidArgument(layout.Check({3, 2, {1}}, servers, workers))) << "a removal cannot add";
  EXPECT_TRUE(layout.Check({2, 2, {1}}, servers, workers).ok());
  EXPECT_FALSE(RescaleLayout::Grows({2, 2, {1}}, 3, 2));
  EXPECT_TRUE(RescaleLayout::Grows({3, 3}, 3, 2));
  layout.Begin({4, 2}, 3, 2);
  EXPECT_TRUE(absl::IsFailedPrecondition(layout.Check({5, 2}, servers, workers))) << "one at a time";
}

TEST(RescaleLayoutTest, JoiningMembersTakeTheNewRanksByIdAndCommitAfterTheJobsRanks) {
  RescaleLayout layout("p1", 0);
  std::vector<Member> servers = Ranks(Role::kServer, 1);
  std::vector<Member> workers = Ranks(Role::kWorker, 1);
  EXPECT_FALSE(layout.Ready()) << "none pending";
  EXPECT_FALSE(layout.HasFreePlace(Role::kWorker));
  layout.Begin({1, 3}, 1, 1);
  ASSERT_TRUE(layout.pending().has_value());
  EXPECT_EQ(layout.joining(Role::kWorker).size(), 2u);
  EXPECT_TRUE(layout.joining(Role::kServer).empty());
  EXPECT_FALSE(layout.Ready());
  EXPECT_EQ(layout.LowestFreeId(Role::kWorker, workers), 1);

  Member* five = Join(layout, Role::kWorker, 5, 1);
  ASSERT_NE(five, nullptr);
  EXPECT_EQ(five->rank, 1);
  Member* two = Join(layout, Role::kWorker, 2, 1);
  ASSERT_NE(two, nullptr);
  EXPECT_EQ(two->rank, 1) << "a lower id takes the lower rank";
  EXPECT_EQ(layout.FindJoining(Role::kWorker, 5)->rank, 2);
  EXPECT_EQ(layout.Place(Role::kWorker, 5), layout.FindJoining(Role::kWorker, 5)) << "its place, again";
  EXPECT_EQ(layout.Place(Role::kWorker, 7), nullptr) << "no place left";
  EXPECT_FALSE(layout.HasFreePlace(Role::kWorker));
  EXPECT_TRUE(layout.Ready());

  std::vector<int> target_ids;
  for (const Member* m : layout.Target(Role::kWorker, workers)) target_ids.push_back(m->id);
  EXPECT_EQ(target_ids, (std::vector<int>{0, 2, 5}));

  EXPECT_EQ(layout.Commit(servers, workers, "p3"), (std::vector<int>{0, -1, -1}));
  EXPECT_EQ(Ids(workers), (std::vector<int>{0, 2, 5}));
  EXPECT_EQ(workers[2].rank, 2);
  EXPECT_EQ(layout.partition(), "p3");
  EXPECT_EQ(layout.generation(), 1u);
  EXPECT_FALSE(layout.pending().has_value());
  EXPECT_TRUE(layout.joining(Role::kWorker).empty());
  EXPECT_TRUE(layout.removed().empty());
}

// A removal renumbers the ranks above the removed one; the removed member is remembered (its heartbeats are
// answered OutOfRange) and its id refused; a shrink's leavers are remembered, their ids not refused.
TEST(RescaleLayoutTest, CommitRemembersTheRemovedAndCancelTheJoining) {
  RescaleLayout layout("p", 3);
  std::vector<Member> servers = Ranks(Role::kServer, 3);
  std::vector<Member> workers = Ranks(Role::kWorker, 3);
  workers[1].alive = false;
  ASSERT_TRUE(layout.Check({2, 2, {}, {1}}, servers, workers).ok());
  layout.Begin({2, 2, {}, {1}}, 3, 3);
  EXPECT_TRUE(layout.Removing(Role::kWorker, 1));
  EXPECT_FALSE(layout.Removing(Role::kServer, 1));
  EXPECT_TRUE(layout.Ready()) << "nobody to wait for";
  EXPECT_EQ(layout.Commit(servers, workers, "p2"), (std::vector<int>{0, 2}));
  EXPECT_EQ(Ids(servers), (std::vector<int>{0, 1}));
  EXPECT_EQ(Ids(workers), (std::vector<int>{0, 2}));
  EXPECT_EQ(workers[1].rank, 1);
  EXPECT_EQ(layout.generation(), 4u);
  ASSERT_EQ(layout.removed().size(), 2u);  // server 2 (the shrink), worker 1 (the removal)
  EXPECT_FALSE(layout.removed()[0].alive);
  EXPECT_TRUE(layout.RemovedId(Role::kWorker, 1));
  EXPECT_FALSE(layout.RemovedId(Role::kServer, 2)) << "a shrink's leaver may come back";

  layout.Begin({3, 2}, 2, 2);
  Member* joining = Join(layout, Role::kServer, 9, 2);
  ASSERT_NE(joining, nullptr);
  EXPECT_EQ(joining->rank, 2);
  layout.Cancel();
  EXPECT_FALSE(layout.pending().has_value());
  EXPECT_TRUE(layout.joining(Role::kServer).empty());
  ASSERT_EQ(layout.removed().size(), 3u);
  EXPECT_EQ(layout.removed().back().id, 9);
  EXPECT_EQ(layout.generation(), 4u) << "a cancelled rescale is no rescale";
}

}  // namespace
}  // namespace kestrel
