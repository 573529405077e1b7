// PlanEpoch: every line of an epoch read exactly once across a worker-count change.
#include "scheduler/epoch_plan.h"

#include <cstdint>
#include <vector>

#include "common/line_assignment.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

// A worker's reported state after reading its first `read` lines of the first epoch (plain sharding of `count`).
WorkerState ReadOf(int w, int count, uint64_t read, int64_t clock) {
  const LineAssignment share = PlainAssignment(w, count);
  WorkerState s;
  s.set_clock(clock);
  s.set_epoch(0);
  s.set_epoch_start(0);
  s.set_epoch_end(1000);
  *s.mutable_share() = LineShareOf(share);
  s.mutable_reader()->set_global_line(read == 0 ? 0 : share.Line(read - 1) + 1);
  return s;
}

TEST(PlanEpochTest, ARemovedWorkersUnreadLinesGoToTheOthersExactlyOnce) {
  // Batches of 4 lines: workers 0 and 2 finished clock 5 (24 lines each); worker 1 died in clock 5 (20 lines).
  const std::vector<WorkerState> states = {ReadOf(0, 3, 24, 6), ReadOf(1, 3, 20, 5), ReadOf(2, 3, 24, 6)};
  absl::StatusOr<std::vector<WorkerState>> planned = PlanEpoch(states, 6, /*old_of_new=*/{0, 2}, /*removed=*/{1});
  ASSERT_TRUE(planned.ok()) << planned.status();
  ASSERT_EQ(planned->size(), 2u);
  const EpochPlan& plan = (*planned)[0].plan();
  EXPECT_EQ(plan.start_clock(), 6);
  ASSERT_EQ(plan.shares_size(), 2);
  // Every line of the epoch (1000 lines) is read exactly once: before the cut, or by one new share after it.
  std::vector<int> reads(1000, 0);
  for (int w = 0; w < 3; ++w) {
    const LineAssignment a = PlainAssignment(w, 3);
    for (uint64_t n = 0; n < (w == 1 ? 20u : 24u); ++n) ++reads[a.Line(n)];
  }
  for (const LineShare& share : plan.shares()) {
    const LineAssignment a = AssignmentOf(share);
    for (uint64_t n = 0; a.Line(n) < 1000; ++n) ++reads[a.Line(n)];
  }
  for (int line = 0; line < 1000; ++line) ASSERT_EQ(reads[line], 1) << "line " << line;
  // They read from the slowest position: worker 1's.
  EXPECT_EQ((*planned)[1].reader().global_line(), states[1].reader().global_line());
  EXPECT_EQ((*planned)[1].clock(), 6);
}

TEST(PlanEpochTest, PlannedStatesCanBePlannedFromAgainAtTheSameClock) {
  // A rollback to the checkpoint cut at a removal restores the planned states; another worker is then removed
  // at that same clock: every line is still read exactly once.
  const std::vector<WorkerState> states = {ReadOf(0, 3, 24, 6), ReadOf(1, 3, 20, 5), ReadOf(2, 3, 24, 6)};
  absl::StatusOr<std::vector<WorkerState>> first = PlanEpoch(states, 6, {0, 2}, {1});
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::vector<WorkerState>> second = PlanEpoch(*first, 6, {0}, {1});
  ASSERT_TRUE(second.ok()) << second.status();
  std::vector<int> reads(1000, 0);
  for (int w = 0; w < 3; ++w) {
    const LineAssignment a = PlainAssignment(w, 3);
    for (uint64_t n = 0; n < (w == 1 ? 20u : 24u); ++n) ++reads[a.Line(n)];
  }
  const LineAssignment last = AssignmentOf((*second)[0].plan().shares(0));
  for (uint64_t n = 0; last.Line(n) < 1000; ++n) ++reads[last.Line(n)];
  for (int line = 0; line < 1000; ++line) ASSERT_EQ(reads[line], 1) << "line " << line;
}

TEST(PlanEpochTest, AtAnEpochsStartTheEpochStartsAfreshAndAWorkerThatNeverReportedReadNothing) {
  std::vector<WorkerState> states = {ReadOf(0, 3, 0, 0), WorkerState(), ReadOf(2, 3, 0, 0)};
  absl::StatusOr<std::vector<WorkerState>> fresh = PlanEpoch(states, 0, {0, 2}, {1});
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ((*fresh)[0].plan().shares_size(), 0) << "sharded by the new count from the start";
  // Mid-epoch, a worker removed before its first report: its whole plain share is handed on.
  states = {ReadOf(0, 3, 8, 2), WorkerState(), ReadOf(2, 3, 8, 2)};
  absl::StatusOr<std::vector<WorkerState>> planned = PlanEpoch(states, 2, {0, 2}, {1});
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_EQ((*planned)[0].reader().global_line(), 0u) << "read from the epoch's start";
  std::vector<int> reads(300, 0);
  for (int w : {0, 2}) {
    for (uint64_t n = 0; n < 8; ++n) ++reads[PlainAssignment(w, 3).Line(n)];
  }
  for (const LineShare& share : (*planned)[0].plan().shares()) {
    const LineAssignment a = AssignmentOf(share);
    for (uint64_t n = 0; a.Line(n) < 300; ++n) ++reads[a.Line(n)];
  }
  for (int line = 0; line < 300; ++line) ASSERT_EQ(reads[line], 1) << "line " << line;
}

TEST(PlanEpochTest, RefusesStatesThatCannotBeHandedOn) {
  // A staying worker not at the cut; a removed one in another epoch mid-epoch.
  EXPECT_TRUE(absl::IsFailedPrecondition(
      PlanEpoch({ReadOf(0, 2, 8, 2), ReadOf(1, 2, 4, 1)}, 2, {0, 1}, {}).status()));
  WorkerState older = ReadOf(1, 3, 4, 1);
  older.set_epoch(-1);
  EXPECT_TRUE(absl::IsFailedPrecondition(
      PlanEpoch({ReadOf(0, 3, 8, 2), older, ReadOf(2, 3, 8, 2)}, 2, {0, 2}, {1}).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(PlanEpoch({ReadOf(0, 1, 8, 2)}, 2, {-1}, {0}).status()))
      << "nobody stays";
}

// Of 1000 lines dealt plainly to 3 workers, workers 0 and 2 read their first 24 and worker 1 its first 20: with
// `plan`'s shares, every line is read exactly once.
void ExpectEveryLineOnce(const EpochPlan& plan) {
  std::vector<int> reads(1000, 0);
  for (int w = 0; w < 3; ++w) {
    for (uint64_t n = 0; n < (w == 1 ? 20u : 24u); ++n) ++reads[PlainAssignment(w, 3).Line(n)];
  }
  for (const LineShare& share : plan.shares()) {
    const LineAssignment a = AssignmentOf(share);
    for (uint64_t n = 0; a.Line(n) < 1000; ++n) ++reads[a.Line(n)];
  }
  for (int line = 0; line < 1000; ++line) ASSERT_EQ(reads[line], 1) << "line " << line;
}

TEST(PlanEpochTest, ARemovedWorkerLastReportedALeaseAgoStandsWhereItsPushesEnd) {
  // Leases: worker 1 reported at clock 2 (8 lines read, batches of 4) and its pushes end at clock 5 (20 lines
  // read): the lines of clocks 2..4 are not handed on again, and every line is read exactly once.
  WorkerState reported = ReadOf(1, 3, 8, 2);
  reported.set_batch_lines(4);
  const std::vector<WorkerState> states = {ReadOf(0, 3, 24, 6), reported, ReadOf(2, 3, 24, 6)};
  absl::StatusOr<std::vector<WorkerState>> planned = PlanEpoch(states, 6, {0, 2}, {1}, /*removed_at=*/{5});
  ASSERT_TRUE(planned.ok()) << planned.status();
  ExpectEveryLineOnce((*planned)[0].plan());
  // They read from its reported position: at or before every unread line.
  EXPECT_EQ((*planned)[0].reader().global_line(), reported.reader().global_line());

  // A worker that never reported, removed at clock 5 of the first epoch: its first 20 lines were trained.
  WorkerState staying = ReadOf(0, 3, 24, 6);
  staying.set_batch_lines(4);
  planned = PlanEpoch({staying, WorkerState(), ReadOf(2, 3, 24, 6)}, 6, {0, 2}, {1}, {5});
  ASSERT_TRUE(planned.ok()) << planned.status();
  ExpectEveryLineOnce((*planned)[0].plan());
}

TEST(StandingAtTest, MovesAReportForwardWithinItsEpochAndIntoTheNext) {
  WorkerState s = ReadOf(1, 3, 8, 2);
  s.set_epoch_end(10);
  // Without the batch size a report cannot be moved.
  EXPECT_TRUE(absl::IsFailedPrecondition(StandingAt(s, 4, 1, 3).status()));
  s.set_batch_lines(4);
  absl::StatusOr<Standing> same = StandingAt(s, 2, 1, 3);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->consumed, 8u);
  absl::StatusOr<Standing> later = StandingAt(s, 9, 1, 3);
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ(later->consumed, 36u);
  EXPECT_EQ(later->epoch, 0);
  EXPECT_EQ(later->reader.global_line(), s.reader().global_line()) << "the reported position: never past a line";
  absl::StatusOr<Standing> next = StandingAt(s, 12, 1, 3);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->epoch, 1);
  EXPECT_EQ(next->epoch_start, 10);
  EXPECT_EQ(next->consumed, 8u);
  EXPECT_EQ(next->reader.global_line(), 0u);
  EXPECT_TRUE(absl::IsFailedPrecondition(StandingAt(s, 1, 1, 3).status())) << "before its report";
}

}  // namespace
}  // namespace kestrel
