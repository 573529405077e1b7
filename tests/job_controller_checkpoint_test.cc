// Checkpoints (scheduler/checkpointer.h) through the job controller: scheduled, requested and timed cuts, failed
// ones, resume.
#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "common/checkpoint_layout.h"
#include "gtest/gtest.h"
#include "tests/job_controller_testing.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

TEST_F(JobControllerTest, EveryNClocksCutsExactGlobalCheckpoints) {
  CheckpointOptions options;
  options.every_clocks = 4;
  options.keep = 2;
  ASSERT_TRUE(StartScheduler(options).ok());
  // ASP lets workers run apart, but the hold stops both at clock 4, 8, 12: each checkpoint is an exact cut.
  ASSERT_TRUE(RunAll(0, 10).ok());
  ASSERT_TRUE(WaitFor([&] { return controller_->status().latest_clock == 8; }));
  EXPECT_EQ(controller_->status().committed, 2u);
  auto latest = layout_->ReadLatest();
  ASSERT_TRUE(latest.ok() && latest->has_value()) << latest.status();
  const CheckpointManifest& m = **latest;
  EXPECT_EQ(m.clock(), 8);
  EXPECT_EQ(m.num_workers(), kWorkers);
  EXPECT_EQ(m.reason(), "every 4 clocks");
  ASSERT_EQ(m.workers_size(), kWorkers);
  for (int w = 0; w < kWorkers; ++w) {
    EXPECT_EQ(m.workers(w).state().clock(), 8);
    EXPECT_EQ(m.workers(w).state().reader().global_line(), 800u + w) << "the reader position at the cut";
  }
  // Its rows are exactly those of iterations < 8 of every worker.
  EXPECT_EQ(clocks_->hold(), 12);
  controller_.reset();
  for (int s = 0; s < kServers; ++s) {
    servers_->Replace(s);
    ASSERT_TRUE(servers_->Restore(s, "", CheckpointLayout::CheckpointName(m.sequence()), 1).ok());
  }
  EXPECT_EQ(servers_->Fingerprint(), ReferenceFingerprint(8));
}

TEST_F(JobControllerTest, ListedClocksAreCutBesideEveryNAndKeptPastKeep) {
  CheckpointOptions options;
  options.every_clocks = 4;
  options.at_clocks = {3, 4, 7};  // 4 is both
  options.keep = 1;
  ASSERT_TRUE(StartScheduler(options).ok());
  EXPECT_EQ(clocks_->hold(), 3);
  ASSERT_TRUE(RunAll(0, 10).ok());
  ASSERT_TRUE(WaitFor([&] { return controller_->status().latest_clock == 8; }));
  EXPECT_EQ(controller_->status().committed, 4u) << "3, 4, 7, 8";
  EXPECT_EQ(clocks_->hold(), 12);
  // keep 1: the newest (8) and the listed ones (3, 4, 7) stay, each an exact cut at its clock.
  std::vector<int64_t> kept;
  for (uint64_t sequence = 1; sequence <= 4; ++sequence) {
    absl::StatusOr<CheckpointManifest> m = layout_->ReadManifest(CheckpointLayout::CheckpointName(sequence));
    ASSERT_TRUE(m.ok()) << m.status();
    kept.push_back(m->clock());
    EXPECT_EQ(m->reason(), m->clock() == 8 ? "every 4 clocks" : "a listed clock");
  }
  EXPECT_EQ(kept, (std::vector<int64_t>{3, 4, 7, 8}));
  const CheckpointManifest third = *layout_->ReadManifest(CheckpointLayout::CheckpointName(3));
  controller_.reset();
  for (int s = 0; s < kServers; ++s) {
    servers_->Replace(s);
    ASSERT_TRUE(servers_->Restore(s, "", CheckpointLayout::CheckpointName(third.sequence()), 1).ok());
  }
  EXPECT_EQ(servers_->Fingerprint(), ReferenceFingerprint(7));
}

TEST_F(JobControllerTest, ListedClocksOutOfOrderAreRefused) {
  CheckpointOptions options;
  options.at_clocks = {5, 5};
  EXPECT_EQ(StartScheduler(options).code(), absl::StatusCode::kInvalidArgument);
  options.at_clocks = {0};
  EXPECT_EQ(StartScheduler(options).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(JobControllerTest, RequestedCheckpointCutsAtTheNextBoundary) {
  ASSERT_TRUE(StartScheduler(CheckpointOptions()).ok());
  ASSERT_TRUE(RunAll(0, 3).ok());
  auto clock = controller_->Request();
  ASSERT_TRUE(clock.ok()) << clock.status();
  EXPECT_EQ(*clock, 3);
  ASSERT_TRUE(RunAll(3, 5).ok());
  ASSERT_TRUE(WaitFor([&] { return controller_->status().committed == 1; }));
  EXPECT_EQ(controller_->status().latest_clock, 3);
  EXPECT_EQ((*layout_->ReadLatest())->reason(), "requested");
}

TEST_F(JobControllerTest, TimedCheckpointCutsAtTheNextBoundaryAfterTheInterval) {
  CheckpointOptions options;
  options.every = absl::Milliseconds(100);
  ASSERT_TRUE(StartScheduler(options).ok());
  ASSERT_TRUE(RunAll(0, 3).ok());
  // The workers pause at clock 3 longer than the interval: the cut lands there.
  ASSERT_TRUE(WaitFor([&] { return controller_->status().committed == 1; }));
  EXPECT_EQ(controller_->status().latest_clock, 3);
  EXPECT_EQ((*layout_->ReadLatest())->reason(), "every 100ms");
  ASSERT_TRUE(RunAll(3, 6).ok());
  controller_.reset();
  for (int s = 0; s < kServers; ++s) {
    servers_->Replace(s);
    ASSERT_TRUE(servers_->Restore(s, "", "ckpt-00000001", 1).ok());
  }
  EXPECT_EQ(servers_->Fingerprint(), ReferenceFingerprint(3));
}

TEST_F(JobControllerTest, FailedShardAbandonsTheCheckpointAndTheJobGoesOn) {
  CheckpointOptions options;
  options.every_clocks = 2;
  ASSERT_TRUE(StartScheduler(options).ok());
  ASSERT_TRUE(RunAll(0, 2).ok());
  ASSERT_TRUE(WaitFor([&] { return controller_->status().committed == 1; }));
  servers_->fail_shard_ = 1;
  ASSERT_TRUE(RunAll(2, 5).ok()) << "an abandoned checkpoint releases the hold";
  EXPECT_EQ(controller_->status().committed, 1u);
  EXPECT_EQ((*layout_->ReadLatest())->clock(), 2) << "LATEST still names the last complete checkpoint";
  servers_->fail_shard_ = -1;
  ASSERT_TRUE(RunAll(5, 7).ok());
  ASSERT_TRUE(WaitFor([&] { return controller_->status().latest_clock == 6; }));
}

TEST_F(JobControllerTest, ResumeRestoresTheLatestCheckpointOntoNewServers) {
  ASSERT_NO_FATAL_FAILURE(RunThenStopScheduler(/*every=*/2, /*to=*/5, /*cut=*/4));
  CheckpointOptions options;
  options.every_clocks = 2;

  // Everything restarts: new servers, a new scheduler. Without --resume the directory is refused.
  for (int s = 0; s < kServers; ++s) servers_->Replace(s);
  absl::Status refused = StartScheduler(options);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "--resume")) << refused;
  options.resume = true;
  ASSERT_TRUE(StartScheduler(options).ok());
  ASSERT_TRUE(WaitFor([&] { return membership_->state() == JobState::kRunning; })) << fatal_;
  EXPECT_TRUE(clocks_->AllAt(4));
  EXPECT_EQ(servers_->Fingerprint(), ReferenceFingerprint(4));
  EXPECT_EQ(controller_->StateFor(0, 4)->reader().global_line(), 400u);
  ASSERT_TRUE(RunAll(4, 7).ok());
  EXPECT_EQ(servers_->Fingerprint(), ReferenceFingerprint(7));
}

TEST_F(JobControllerTest, ResumeFromADamagedCheckpointIsRefusedByName) {
  ASSERT_NO_FATAL_FAILURE(RunThenStopScheduler(/*every=*/2, /*to=*/3, /*cut=*/2));
  CheckpointOptions options;
  const std::string manifest = layout_->ManifestPath("ckpt-00000001");
  fs::resize_file(manifest, fs::file_size(manifest) - 10);
  options.resume = true;
  absl::Status status = StartScheduler(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), manifest)) << status;
}

TEST_F(JobControllerTest, DamagedShardFileStopsTheRestoreWithItsName) {
  ASSERT_NO_FATAL_FAILURE(RunThenStopScheduler(/*every=*/2, /*to=*/3, /*cut=*/2));
  CheckpointOptions options;
  options.every_clocks = 2;
  const CheckpointManifest m = **layout_->ReadLatest();
  const std::string sst = layout_->ShardDir("ckpt-00000001", 1) + "/" + m.shards(1).files(0).name();
  fs::remove(sst);
  for (int s = 0; s < kServers; ++s) servers_->Replace(s);
  options.resume = true;
  ASSERT_TRUE(StartScheduler(options).ok()) << "the manifest itself is fine";
  ASSERT_TRUE(fatal_seen_.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(fatal_.code(), absl::StatusCode::kDataLoss) << fatal_;
  EXPECT_TRUE(absl::StrContains(fatal_.message(), sst)) << fatal_;
  EXPECT_TRUE(absl::StrContains(fatal_.message(), "server 1")) << fatal_;
  EXPECT_NE(membership_->state(), JobState::kRunning) << "never a silent fresh start";
}

}  // namespace
}  // namespace kestrel
