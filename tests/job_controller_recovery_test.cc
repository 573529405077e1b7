// Recovery (scheduler/recovery.h) through the job controller: rollback and restore, failover and
// re-replication, and servers lost after the job finished.
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "tests/job_controller_testing.h"

namespace kestrel {
namespace {

TEST_F(JobControllerTest, ServerDeathRollsEveryServerBackToTheLatestCheckpoint) {
  CheckpointOptions options;
  options.every_clocks = 3;
  ASSERT_TRUE(StartScheduler(options).ok());
  ASSERT_TRUE(RunAll(0, 5).ok());
  ASSERT_TRUE(WaitFor([&] { return controller_->status().latest_clock == 3; }));
  const uint64_t old_generation = membership_->generation();

  // Server 1 stops heartbeating and is declared dead; a replacement (empty) registers with its rank.
  now_ += absl::Seconds(1);
  ASSERT_TRUE(membership_->Heartbeat(Role::kServer, 0, membership_->Members()[0].incarnation, now_).ok());
  for (int w = 0; w < kWorkers; ++w) {
    ASSERT_TRUE(membership_->Heartbeat(Role::kWorker, w, membership_->Members()[kServers + w].incarnation, now_).ok());
  }
  ASSERT_EQ(membership_->ExpireSilent(now_ + absl::Milliseconds(600)).size(), 1u);
  controller_->Wake();
  ASSERT_TRUE(WaitFor([&] { return membership_->rolling_back(); }));
  EXPECT_EQ(membership_->state(), JobState::kRecovering);
  EXPECT_EQ(clocks_->hold(), 0) << "nothing may start during the rollback";
  servers_->Replace(1);
  ASSERT_TRUE(membership_->Register(Role::kServer, servers_->Address(1), 1, now_).ok());
  controller_->Wake();
  ASSERT_TRUE(WaitFor([&] { return !membership_->rolling_back(); })) << fatal_;
  EXPECT_EQ(membership_->state(), JobState::kRunning);
  EXPECT_EQ(controller_->status().rollbacks, 1u);
  EXPECT_TRUE(clocks_->AllAt(3));
  EXPECT_EQ(servers_->Fingerprint(), ReferenceFingerprint(3)) << "both servers hold exactly the cut at clock 3";
  EXPECT_EQ(controller_->StateFor(1, 3)->reader().global_line(), 301u);
  // The survivor refuses the old timeline; the new generation works and the job finishes.
  EXPECT_EQ(servers_->Push(0, 5, old_generation).code(), absl::StatusCode::kAborted);
  ASSERT_TRUE(RunAll(3, 8).ok());
  EXPECT_EQ(servers_->Fingerprint(), ReferenceFingerprint(8));
}

// Replicated (2 copies of every range): a dead server is failed over. No rollback, no generation of a worker
// moves, no wait is cancelled and the clocks go on; scheduled checkpoints are skipped (not held) while a server
// is out of service. Its replacement is re-replicated and put back, and checkpoints resume. (Losing every copy
// rolls back: tests/recovery_test.cc.)
TEST_F(JobControllerTest, ReplicatedServerDeathFailsOverAndTheReplacementIsReReplicated) {
  CheckpointOptions options;
  options.every_clocks = 3;
  ASSERT_TRUE(StartScheduler(options, /*replicas=*/2).ok());
  ASSERT_TRUE(RunAll(0, 5).ok());
  ASSERT_TRUE(WaitFor([&] { return controller_->status().latest_clock == 3; }));
  const std::vector<uint64_t> worker_generations = membership_->WorkerGenerations();
  const uint64_t epoch = clocks_->epoch();

  now_ += absl::Seconds(1);
  for (const Member& m : membership_->Members()) {
    if (!(m.role == Role::kServer && m.rank == 1)) {
      ASSERT_TRUE(membership_->Heartbeat(m.role, m.rank, m.incarnation, now_).ok());
    }
  }
  ASSERT_EQ(membership_->ExpireSilent(now_ + absl::Milliseconds(600)).size(), 1u);
  controller_->Wake();
  ASSERT_TRUE(WaitFor([&] { return membership_->routing().generation == 1; }));
  EXPECT_EQ(membership_->routing().out_of_service, std::vector<int>{1});
  EXPECT_EQ(membership_->routing().failovers, 1u);
  EXPECT_FALSE(membership_->rolling_back());
  EXPECT_EQ(membership_->state(), JobState::kRunning) << "running on the backups";
  EXPECT_EQ(membership_->WorkerGenerations(), worker_generations);
  EXPECT_EQ(clocks_->epoch(), epoch) << "no wait was cancelled";
  EXPECT_EQ(controller_->status().rollbacks, 0u);

  // The job goes on past the next scheduled cut (6), which is skipped rather than held.
  ASSERT_TRUE(RunAll(5, 8).ok());
  EXPECT_EQ(controller_->status().latest_clock, 3);
  EXPECT_EQ(servers_->Fingerprint(), ReferenceFingerprint(8));

  // The replacement registers: every worker is held at the earliest boundary (8), the primary of each range
  // group it should hold (server 0, for both) copies the group to it, it is put back in service, and the hold
  // is released only once every live server acts on that routing.
  ASSERT_TRUE(membership_->Register(Role::kServer, servers_->Address(1), 1, now_).ok());
  controller_->Wake();
  ASSERT_TRUE(WaitFor([&] { return membership_->routing().generation == 2; })) << "put back in service";
  EXPECT_TRUE(membership_->routing().out_of_service.empty());
  EXPECT_EQ(servers_->copies(), (std::vector<std::vector<int>>{{0, 1, 1}, {0, 0, 1}}));  // (source, owner, target)
  EXPECT_EQ(clocks_->hold(), 8);
  const uint64_t steps = controller_->steps();
  controller_->Wake();
  ASSERT_TRUE(WaitFor([&] { return controller_->steps() >= steps + 2; })) << "the controller steps";
  EXPECT_EQ(clocks_->hold(), 8) << "server 0 has not acted on the new routing yet";
  for (const Member& m : membership_->Members()) {
    ASSERT_TRUE(membership_->Heartbeat(m.role, m.rank, m.incarnation, now_, /*routing_generation=*/2).ok());
  }
  controller_->Wake();
  ASSERT_TRUE(RunAll(8, 10).ok());
  EXPECT_EQ(controller_->status().rollbacks, 0u);
  ASSERT_TRUE(WaitFor([&] { return controller_->status().latest_clock == 9; })) << "checkpoints resume";
}

// Every worker reports its last iteration; the job is finished.
void MarkAllDone(Membership& membership) {
  for (int w = 0; w < kWorkers; ++w) ASSERT_TRUE(membership.MarkWorkerDone(w).ok());
  ASSERT_EQ(membership.state(), JobState::kFinished);
}

// Server 1 falls silent (everyone else heartbeats) and is declared dead at `now`.
void DeclareServer1Dead(Membership& membership, absl::Time& now) {
  now += absl::Seconds(1);
  for (const Member& m : membership.Members()) {
    if (m.alive && !(m.role == Role::kServer && m.rank == 1)) {
      ASSERT_TRUE(membership.Heartbeat(m.role, m.rank, m.incarnation, now).ok());
    }
  }
  ASSERT_EQ(membership.ExpireSilent(now + absl::Milliseconds(600)).size(), 1u);
}

// After the last iteration the final checkpoint is committed before the model counts as settled (workers wait
// for that to leave). A server lost while a worker still evaluates: its replacement restores the final
// checkpoint, nothing is redone, and the job is finished again with the same tables.
TEST_F(JobControllerTest, ServerLostAfterTheFinalCheckpointRestoresIt) {
  CheckpointOptions options;
  options.every_clocks = 3;
  ASSERT_TRUE(StartScheduler(options).ok());
  ASSERT_TRUE(RunAll(0, 5).ok());
  EXPECT_FALSE(controller_->status().final_model_settled);
  ASSERT_NO_FATAL_FAILURE(MarkAllDone(*membership_));
  controller_->Wake();
  ASSERT_TRUE(WaitFor([&] { return controller_->status().final_model_settled; }));
  EXPECT_EQ(controller_->status().latest_clock, 5) << "settled only with the final checkpoint committed";
  ASSERT_TRUE(membership_->MarkWorkerLeft(1).ok());  // worker 0 still evaluates

  ASSERT_NO_FATAL_FAILURE(DeclareServer1Dead(*membership_, now_));
  controller_->Wake();
  ASSERT_TRUE(WaitFor([&] { return membership_->rolling_back(); }));
  EXPECT_EQ(membership_->state(), JobState::kRecovering);
  servers_->Replace(1);
  ASSERT_TRUE(membership_->Register(Role::kServer, servers_->Address(1), 1, now_).ok());
  controller_->Wake();
  ASSERT_TRUE(WaitFor([&] { return !membership_->rolling_back(); })) << fatal_;
  EXPECT_EQ(membership_->state(), JobState::kFinished) << "the final checkpoint: every worker is done at it";
  EXPECT_TRUE(controller_->status().final_model_settled);
  EXPECT_TRUE(clocks_->AllAt(5));
  EXPECT_EQ(servers_->Fingerprint(), ReferenceFingerprint(5));
  EXPECT_TRUE(fatal_.ok()) << fatal_;
}

// Once every worker has left, nobody reads the servers: a server that goes is not recovered.
TEST_F(JobControllerTest, ServerLeavingAfterEveryWorkerLeftIsNoFailure) {
  CheckpointOptions options;
  options.every_clocks = 3;
  ASSERT_TRUE(StartScheduler(options).ok());
  ASSERT_TRUE(RunAll(0, 4).ok());
  ASSERT_NO_FATAL_FAILURE(MarkAllDone(*membership_));
  controller_->Wake();
  ASSERT_TRUE(WaitFor([&] { return controller_->status().final_model_settled; }));
  for (int w = 0; w < kWorkers; ++w) ASSERT_TRUE(membership_->MarkWorkerLeft(w).ok());
  EXPECT_FALSE(membership_->AnyWorkerAlive());
  ASSERT_NO_FATAL_FAILURE(DeclareServer1Dead(*membership_, now_));
  const uint64_t steps = controller_->steps();
  controller_->Wake();
  ASSERT_TRUE(WaitFor([&] { return controller_->steps() >= steps + 3; })) << "several controller steps";
  EXPECT_FALSE(membership_->rolling_back());
  EXPECT_EQ(membership_->state(), JobState::kFinished);
  EXPECT_EQ(controller_->status().rollbacks, 0u);
  EXPECT_TRUE(fatal_.ok()) << fatal_;
}

// The final checkpoint keeps failing: after a few attempts the workers are let go without it, and a server
// lost after that (a worker still evaluating) cannot be recovered: DATA_LOSS, not a silently empty server.
TEST_F(JobControllerTest, ServerLostWithTheFinalModelInNoCheckpointIsFatal) {
  CheckpointOptions options;
  options.every_clocks = 3;
  ASSERT_TRUE(StartScheduler(options).ok());
  ASSERT_TRUE(RunAll(0, 5).ok());
  // The checkpoint cut at clock 3 is written behind the workers: let it commit before shard 0 starts failing.
  ASSERT_TRUE(WaitFor([&] { return controller_->status().latest_clock == 3; }));
  servers_->fail_shard_ = 0;
  ASSERT_NO_FATAL_FAILURE(MarkAllDone(*membership_));
  controller_->Wake();
  ASSERT_TRUE(WaitFor([&] { return controller_->status().final_model_settled; }));
  EXPECT_EQ(controller_->status().latest_clock, 3) << "no final checkpoint";
  ASSERT_NO_FATAL_FAILURE(DeclareServer1Dead(*membership_, now_));
  controller_->Wake();
  ASSERT_TRUE(fatal_seen_.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(fatal_.code(), absl::StatusCode::kDataLoss) << fatal_;
  EXPECT_FALSE(membership_->rolling_back());
}

}  // namespace
}  // namespace kestrel
