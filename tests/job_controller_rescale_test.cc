// Rescales and elastic removals (scheduler/rescaler.h) through the job controller: the phases asked of the
// servers, and the job after.
#include <algorithm>
#include <functional>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/job_controller_testing.h"

namespace kestrel {
namespace {

// A Scale() call's answer, once it comes.
struct PendingScale {
  absl::Notification done;
  absl::StatusOr<ScaleResult> result = absl::UnknownError("not answered");
  std::function<void(absl::StatusOr<ScaleResult>)> Callback() {
    return [this](absl::StatusOr<ScaleResult> r) {
      result = std::move(r);
      done.Notify();
    };
  }
};

// The rows' moves are tested with real servers (server/rescale_test.cc); here, the order of the phases and what
// the job looks like after a rescale and after a failed one.
TEST_F(JobControllerTest, RescaleRunsEveryPhaseOnTheRightServersAndMovesTheLayout) {
  CheckpointOptions options;
  ASSERT_TRUE(StartScheduler(options).ok());
  ASSERT_TRUE(RunAll(0, 3).ok());
  PendingScale scale;
  ASSERT_TRUE(controller_->Scale({kServers + 1, kWorkers}, absl::Minutes(1), scale.Callback()).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(controller_->Scale({kServers + 1, kWorkers}, absl::Minutes(1), nullptr)))
      << "one rescale at a time";
  // The new server registers as a joining rank; only then does the rescale hold the workers.
  const uint64_t steps = controller_->steps();
  controller_->Wake();
  ASSERT_TRUE(WaitFor([&] { return controller_->steps() >= steps + 2; })) << "the controller steps";
  EXPECT_TRUE(servers_->rescales().empty());
  auto joined = membership_->Register(Role::kServer, "server-2", kServers, now_);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_TRUE(joined->joining);
  controller_->Wake();
  ASSERT_TRUE(scale.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(scale.result.ok()) << scale.result.status();
  EXPECT_EQ(scale.result->clock, 3);
  EXPECT_EQ(scale.result->layout_generation, 1u);
  // SEND on the old servers, then INSTALL and SWITCH on every server, each phase done before the next.
  const std::vector<std::vector<int>> calls = servers_->rescales();
  ASSERT_EQ(calls.size(), 2u + 3u + 3u);
  for (size_t i = 0; i < calls.size(); ++i) {
    const int phase = i < 2 ? RescaleShardRequest::SEND : i < 5 ? RescaleShardRequest::INSTALL : RescaleShardRequest::SWITCH;
    EXPECT_EQ(calls[i][0], phase) << "call " << i;
  }
  const JobLayout layout = membership_->layout();
  EXPECT_EQ(layout.num_servers, kServers + 1);
  EXPECT_EQ(layout.generation, 1u);
  EXPECT_EQ(layout.partition, Partition::Uniform(kServers + 1)->ToString());
  EXPECT_EQ(membership_->state(), JobState::kRunning);
  EXPECT_FALSE(membership_->pending_scale().has_value());
  EXPECT_EQ(clocks_->hold(), ClockTable::kNoHold) << "the hold is released";
}

TEST_F(JobControllerTest, FailedRescaleAbortsEveryServerAndTheJobGoesOnUnchanged) {
  CheckpointOptions options;
  ASSERT_TRUE(StartScheduler(options).ok());
  ASSERT_TRUE(RunAll(0, 2).ok());
  servers_->fail_phase_ = RescaleShardRequest::INSTALL;
  PendingScale scale;
  ASSERT_TRUE(controller_->Scale({kServers + 1, kWorkers}, absl::Minutes(1), scale.Callback()).ok());
  auto joined = membership_->Register(Role::kServer, "server-2", kServers, now_);
  ASSERT_TRUE(joined.ok()) << joined.status();
  controller_->Wake();
  ASSERT_TRUE(scale.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(absl::IsUnavailable(scale.result.status())) << scale.result.status();
  std::vector<std::vector<int>> calls = servers_->rescales();
  ASSERT_GE(calls.size(), 3u);
  EXPECT_EQ(calls.back()[0], RescaleShardRequest::ABORT);
  const JobLayout layout = membership_->layout();
  EXPECT_EQ(layout.num_servers, kServers);
  EXPECT_EQ(layout.generation, 0u);
  // The joining server was let go: its heartbeat says so (it exits), and the job runs on.
  EXPECT_TRUE(absl::IsOutOfRange(membership_->Heartbeat(Role::kServer, kServers, joined->incarnation, now_).status()));
  EXPECT_EQ(clocks_->hold(), ClockTable::kNoHold);
  ASSERT_TRUE(RunAll(2, 4).ok());
}

TEST_F(JobControllerTest, RescaleWaitsForTheNewRanksOnlyUntilItsTimeout) {
  CheckpointOptions options;
  ASSERT_TRUE(StartScheduler(options).ok());
  ASSERT_TRUE(RunAll(0, 1).ok());
  PendingScale scale;
  ASSERT_TRUE(controller_->Scale({kServers + 1, kWorkers}, absl::Milliseconds(200), scale.Callback()).ok());
  ASSERT_TRUE(RunAll(1, 3).ok()) << "the job runs on while the new ranks start";
  ASSERT_TRUE(scale.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(absl::IsDeadlineExceeded(scale.result.status())) << scale.result.status();
  EXPECT_TRUE(servers_->rescales().empty());
  EXPECT_FALSE(membership_->pending_scale().has_value());
  EXPECT_TRUE(absl::IsUnavailable(membership_->Register(Role::kServer, "late", kServers, now_).status()));
}

// Elastic removal of a BSP worker that died in clock 6, after worker 0 finished it. The phases asked of the
// servers decide: its clock is completed without it (no rollback), or, when a server applied it with its pushes
// already, the job rolls back to the checkpoint at clock 4 and the worker is removed from there.
class ElasticRemovalTest : public JobControllerTest {
 protected:
  void RunUntilWorker1Dies() {
    CheckpointOptions options;
    options.every_clocks = 4;
    options.elastic_timeout = absl::Milliseconds(50);
    ASSERT_TRUE(StartScheduler(options, /*replicas=*/1, /*bsp=*/true).ok());
    ASSERT_TRUE(RunAll(0, 6).ok());
    ASSERT_TRUE(WaitFor([&] { return controller_->status().latest_clock == 4; }));
    // Worker 0 finishes clock 6; worker 1 died in it. Membership's times here are far before the monotonic
    // clock the controller reads: the death is older than the elastic timeout at once.
    ASSERT_TRUE(RunWorker(0, 6, 7, membership_->generation()).ok());
    KeepAliveAllBut(1, now_ + absl::Seconds(10));
    controller_->Wake();
  }
  std::vector<int> Phases() {
    std::vector<int> phases;
    for (const auto& call : servers_->rescales()) {
      if (phases.empty() || phases.back() != call[0]) phases.push_back(call[0]);
    }
    return phases;
  }
};

TEST_F(ElasticRemovalTest, AWorkerDeadMidClockIsRemovedAndItsClockCompletedWithoutIt) {
  ASSERT_NO_FATAL_FAILURE(RunUntilWorker1Dies());
  ASSERT_TRUE(WaitFor([&] { return controller_->status().elastic_removals == 1; }));
  // The servers keep their rows (the partition stays): they switch to the new worker count in place.
  EXPECT_EQ(Phases(), (std::vector<int>{RescaleShardRequest::FENCE, RescaleShardRequest::COMPLETE,
                                        RescaleShardRequest::SWITCH}));
  EXPECT_EQ(controller_->status().rollbacks, 0u);
  const JobLayout layout = membership_->layout();
  EXPECT_EQ(layout.num_workers, 1);
  EXPECT_EQ(layout.worker_ids, std::vector<int>{0});
  EXPECT_EQ(clocks_->num_workers(), 1);
  EXPECT_EQ(clocks_->ClockOf(0), 7) << "worker 0 goes on from where it was";
  EXPECT_EQ(membership_->state(), JobState::kRunning);
  // Its shares: everything worker 1 had not read is worker 0's now, from the state the checkpoint at 7 keeps.
  auto state = controller_->StateFor(0, 7);
  ASSERT_TRUE(state.has_value());
  ASSERT_EQ(state->plan().shares_size(), 1);
  EXPECT_GT(state->plan().shares(0).leftovers_size(), 0) << "worker 1's unread lines";
  ASSERT_TRUE(WaitFor([&] { return controller_->status().latest_clock == 7; })) << "cut at the removal";
}

TEST_F(JobControllerTest, AnAspWorkerDeadBehindTheOthersIsRemovedWithNothingToComplete) {
  CheckpointOptions options;
  options.elastic_timeout = absl::Milliseconds(50);
  ASSERT_TRUE(StartScheduler(options).ok());  // ASP: workers run apart, pushes are applied on arrival
  ASSERT_TRUE(RunAll(0, 3).ok());
  ASSERT_TRUE(RunWorker(0, 3, 8, membership_->generation()).ok());  // worker 1 died at clock 3, far behind
  KeepAliveAllBut(1, now_ + absl::Seconds(10));
  controller_->Wake();
  ASSERT_TRUE(WaitFor([&] { return controller_->status().elastic_removals == 1; }));
  std::vector<int> phases;
  for (const auto& call : servers_->rescales()) phases.push_back(call[0]);
  EXPECT_EQ(phases, (std::vector<int>{RescaleShardRequest::SWITCH, RescaleShardRequest::SWITCH}))
      << "no clock to complete, no row to move: both servers switch in place";
  EXPECT_EQ(controller_->status().rollbacks, 0u);
  EXPECT_EQ(membership_->layout().num_workers, 1);
  EXPECT_EQ(clocks_->ClockOf(0), 8);
  // Worker 1's lines from clock 3 on are worker 0's now (leftovers below the watermark).
  auto state = controller_->StateFor(0, 8);
  ASSERT_TRUE(state.has_value());
  ASSERT_EQ(state->plan().shares_size(), 1);
  EXPECT_GT(state->plan().shares(0).leftovers_size(), 0);
  EXPECT_EQ(state->reader().global_line(), 3u * 100 + 1) << "read from worker 1's last position";
}

TEST_F(ElasticRemovalTest, AWorkerWhosePushWasAppliedSomewhereIsRemovedAfterARollback) {
  servers_->fence_applied_ = 1;
  ASSERT_NO_FATAL_FAILURE(RunUntilWorker1Dies());
  ASSERT_TRUE(WaitFor([&] { return controller_->status().elastic_removals == 1; }));
  EXPECT_EQ(controller_->status().rollbacks, 1u);
  const std::vector<int> phases = Phases();
  ASSERT_FALSE(phases.empty());
  EXPECT_EQ(phases.front(), RescaleShardRequest::FENCE);
  EXPECT_EQ(std::count(phases.begin(), phases.end(), RescaleShardRequest::COMPLETE), 0)
      << "nothing is completed without it once a server applied its pushes";
  EXPECT_EQ(membership_->layout().num_workers, 1);
  EXPECT_EQ(clocks_->ClockOf(0), 4) << "removed at the checkpoint the job rolled back to";
}

}  // namespace
}  // namespace kestrel
