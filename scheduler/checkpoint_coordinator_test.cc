#include "scheduler/checkpoint_coordinator.h"

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/checkpoint_layout.h"
#include "common/hash.h"
#include "common/partition.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/shard_store.h"
#include "worker/data/reshard.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

constexpr int kDim = 4;
constexpr int kServers = 2;
constexpr int kWorkers = 2;

TableConfig Emb() {
  TableConfig c;
  c.set_name("emb");
  c.set_dim(kDim);
  c.mutable_optimizer()->set_type(OptimizerConfig::ADAGRAD);
  return c;
}

RequestContext Ctx(int rank, uint64_t generation) {
  RequestContext ctx;
  ctx.job_id = "job";
  ctx.worker_rank = rank;
  ctx.generation = generation;
  return ctx;
}

// The keys worker `rank` pushes at iteration `clock`: each row is written by exactly one push, so the state
// after any set of iterations does not depend on the order they ran in.
std::vector<uint64_t> KeysOf(int rank, int64_t clock) {
  std::vector<uint64_t> keys;
  for (int i = 0; i < 50; ++i) keys.push_back(Mix64((static_cast<uint64_t>(clock) << 32) | (rank << 16) | i));
  return keys;
}

// In-process servers reached through ShardAdmin, as the scheduler reaches real ones over gRPC.
class FakeServers final : public ShardAdmin {
 public:
  FakeServers(const CheckpointLayout& layout, Partition partition) : layout_(layout), partition_(partition) {
    for (int s = 0; s < kServers; ++s) Replace(s);
  }

  // Server `s` is replaced by a fresh process: no tables, a new working store.
  void Replace(int s) {
    ShardOptions options;
    options.job_id = "job";
    options.shard_index = s;
    stores_[s].reset();  // the process is gone: its working store with it
    shards_[s] = std::move(Shard::Create(options, partition_)).value();
    auto store = ShardStore::Open(layout_, s);
    ASSERT_TRUE(store.ok()) << store.status();
    stores_[s] = std::move(store).value();
  }
  std::string Address(int s) const { return absl::StrCat("server-", s); }
  Shard& shard(int s) { return *shards_[s]; }

  // The worker side of an iteration: create the table (idempotent) and push its keys to their owners.
  absl::Status Push(int rank, int64_t clock, uint64_t generation) {
    std::vector<uint64_t> keys = KeysOf(rank, clock);
    std::sort(keys.begin(), keys.end());
    for (int s = 0; s < kServers; ++s) {
      absl::StatusOr<bool> created = shards_[s]->CreateTable(Ctx(rank, generation), Emb());
      if (!created.ok()) return created.status();
      std::vector<uint64_t> mine;
      for (uint64_t k : keys) {
        if (partition_.OwnerOf(k) == s) mine.push_back(k);
      }
      std::vector<float> grads(mine.size() * kDim, 0.25f + clock);
      if (absl::Status st = shards_[s]->Push(Ctx(rank, generation), "emb", mine, grads, 0); !st.ok()) return st;
    }
    return absl::OkStatus();
  }

  // Order-independent fingerprint of the whole table over every server.
  uint64_t Fingerprint() {
    uint64_t sum = 0;
    for (int s = 0; s < kServers; ++s) {
      const Table* table = shards_[s]->FindTable("emb");
      if (table == nullptr) continue;
      table->ForEachRow([&](uint64_t key, const float* row, const float*) {
        sum += HashCombine(key, Hash64(absl::string_view(reinterpret_cast<const char*>(row),
                                                         sizeof(float) * table->stored_floats())));
      });
    }
    return sum;
  }

  absl::StatusOr<ShardCheckpoint> Checkpoint(int shard, const std::string& address, const std::string& name,
                                             int64_t) override {
    if (shard == fail_shard_.load()) return absl::UnavailableError("injected failure");
    if (shard >= kServers) return absl::UnavailableError("no such fake server");  // a rescale's new rank
    EXPECT_EQ(address, Address(shard));
    return stores_[shard]->Checkpoint(*shards_[shard], name);
  }
  absl::Status Restore(int shard, const std::string& address, const std::string& name, uint64_t generation) {
    RestoreShardRequest request;
    request.set_name(name);
    request.set_min_worker_generation(generation);
    return Restore(shard, address, request);
  }
  absl::Status Restore(int shard, const std::string&, RestoreShardRequest request) override {
    const std::string& name = request.name();
    const uint64_t generation = request.min_worker_generation();
    std::optional<CheckpointManifest> manifest;
    if (!name.empty()) {
      absl::StatusOr<CheckpointManifest> read = layout_.ReadManifest(name);
      if (!read.ok()) return read.status();
      manifest = *read;
    }
    return stores_[shard]->Restore(manifest, *shards_[shard], generation);
  }

  // Re-replication: records each copy asked for, (source, owner, target); the copy itself is tested with real
  // servers (tests/recovery_test.cc).
  absl::StatusOr<uint64_t> CopyGroup(int source, const std::string&, int owner, int target,
                                     const std::string&) override {
    absl::MutexLock lock(&copies_mu_);
    copies_.push_back({source, owner, target});
    return 0;
  }
  std::vector<std::vector<int>> copies() {
    absl::MutexLock lock(&copies_mu_);
    return copies_;
  }

  // Rescale: records each phase asked of each server, (phase, shard); fails `fail_phase` when set. The moves
  // themselves are tested with real servers (server/rescale_test.cc, tests/rescale_test.cc).
  absl::StatusOr<RescaleShardResponse> Rescale(int shard, const std::string&, RescaleShardRequest request) override {
    absl::MutexLock lock(&copies_mu_);
    rescales_.push_back({static_cast<int>(request.phase()), shard});
    if (static_cast<int>(request.phase()) == fail_phase_) return absl::UnavailableError("injected failure");
    RescaleShardResponse response;
    // FENCE: how many tables applied the removed workers' clock with them (fence_applied_, once).
    if (request.phase() == RescaleShardRequest::FENCE) response.set_applied_with_removed(fence_applied_.exchange(0));
    return response;
  }
  absl::StatusOr<uint64_t> Fingerprint(int shard, const std::string&) override {
    if (shard >= kServers) return 0;
    const Table* table = shards_[shard]->FindTable("emb");
    return table == nullptr ? 0 : table->RowsFingerprint();
  }
  std::vector<std::vector<int>> rescales() {
    absl::MutexLock lock(&copies_mu_);
    return rescales_;
  }
  int fail_phase_ = -1;
  std::atomic<int> fence_applied_{0};

  std::atomic<int> fail_shard_{-1};

 private:
  absl::Mutex copies_mu_;
  std::vector<std::vector<int>> copies_ ABSL_GUARDED_BY(copies_mu_);
  std::vector<std::vector<int>> rescales_ ABSL_GUARDED_BY(copies_mu_);
  const CheckpointLayout layout_;
  const Partition partition_;
  std::unique_ptr<Shard> shards_[kServers];
  std::unique_ptr<ShardStore> stores_[kServers];
};

// A whole job's scheduler side (membership, clocks, coordinator) plus its servers.
class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = absl::StrCat(::testing::TempDir(), "/coord_", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    layout_ = std::make_unique<CheckpointLayout>(root_);
    servers_ = std::make_unique<FakeServers>(*layout_, *Partition::Uniform(kServers));
  }

  // Builds the scheduler side and registers everyone. Returns Start()'s status.
  // `bsp`: the clocks and the coordinator run BSP (else ASP: workers run apart).
  absl::Status StartScheduler(CheckpointOptions options, int replicas = 1, bool bsp = false) {
    coordinator_.reset();
    MembershipOptions m;
    m.num_servers = kServers;
    m.num_workers = kWorkers;
    membership_ = std::move(Membership::Create(m, Partition::Uniform(kServers)->WithReplicas(replicas)->ToString())).value();
    const ConsistencyPolicy policy = bsp ? ConsistencyPolicy::Bsp() : ConsistencyPolicy::Asp();
    clocks_ = std::move(ClockTable::Create(kWorkers, policy)).value();
    options.dir = root_;
    JobDescription job;
    job.job_id = "job";
    job.partition = Partition::Uniform(kServers)->WithReplicas(replicas)->ToString();
    job.consistency = bsp ? "bsp" : "asp";
    job.num_servers = kServers;
    job.num_workers = kWorkers;
    coordinator_ = std::make_unique<CheckpointCoordinator>(options, job, membership_.get(), clocks_.get(),
                                                           servers_.get(), [this](absl::Status s) {
                                                             fatal_ = s;
                                                             fatal_seen_.Notify();
                                                           });
    clocks_->SetListener([this] { coordinator_->Wake(); });
    absl::Status started = coordinator_->Start();
    if (!started.ok()) return started;
    incarnations_.clear();
    for (int s = 0; s < kServers; ++s) {
      auto r = membership_->Register(Role::kServer, servers_->Address(s), s, now_);
      EXPECT_TRUE(r.ok()) << r.status();
      incarnations_[{Role::kServer, s}] = r->incarnation;
    }
    for (int w = 0; w < kWorkers; ++w) {
      auto r = membership_->Register(Role::kWorker, "", w, now_);
      EXPECT_TRUE(r.ok()) << r.status();
      incarnations_[{Role::kWorker, w}] = r->incarnation;
    }
    return absl::OkStatus();
  }

  // Worker `rank` runs iterations [from, to) with the generation it holds; stops at the first refusal.
  absl::Status RunWorker(int rank, int64_t from, int64_t to, uint64_t generation) {
    for (int64_t c = from; c < to; ++c) {
      auto permitted = std::make_shared<absl::Notification>();
      auto status = std::make_shared<absl::Status>();
      clocks_->WaitToStart(rank, c, [permitted, status](absl::Status s) {
        *status = s;
        permitted->Notify();
      });
      if (!permitted->WaitForNotificationWithTimeout(absl::Seconds(20))) {
        return absl::DeadlineExceededError(absl::StrCat("worker ", rank, " never allowed to start ", c));
      }
      if (!status->ok()) return *status;
      if (absl::Status pushed = servers_->Push(rank, c, generation); !pushed.ok()) return pushed;
      WorkerState state;
      state.set_clock(c + 1);
      state.mutable_reader()->set_global_line(static_cast<uint64_t>(c + 1) * 100 + rank);
      *state.mutable_share() = LineShareOf(PlainShard(rank, kWorkers));
      state.set_epoch_end(1 << 20);
      coordinator_->RecordWorkerState(rank, state);
      if (absl::Status advanced = clocks_->Advance(rank, c + 1); !advanced.ok()) return advanced;
    }
    return absl::OkStatus();
  }

  absl::Status RunAll(int64_t from, int64_t to) {
    std::vector<absl::Status> results(kWorkers);
    std::vector<std::thread> threads;
    const uint64_t generation = membership_->generation();
    for (int w = 0; w < kWorkers; ++w) {
      threads.emplace_back([&, w] { results[w] = RunWorker(w, from, to, generation); });
    }
    for (auto& t : threads) t.join();
    for (const auto& r : results) {
      if (!r.ok()) return r;
    }
    return absl::OkStatus();
  }

  // The table a job that ran iterations [0, clock) of every worker holds, built directly.
  uint64_t ReferenceFingerprint(int64_t clock) {
    FakeServers reference(CheckpointLayout(root_ + "_reference"), *Partition::Uniform(kServers));
    for (int64_t c = 0; c < clock; ++c) {
      for (int w = 0; w < kWorkers; ++w) EXPECT_TRUE(reference.Push(w, c, 0).ok());
    }
    return reference.Fingerprint();
  }

  // Runs a job that checkpoints every `every` clocks up to clock `to`, waits for its checkpoint at `cut`, and
  // stops its scheduler (the servers stay). Wrap calls in ASSERT_NO_FATAL_FAILURE.
  void RunThenStopScheduler(int64_t every, int64_t to, int64_t cut) {
    CheckpointOptions options;
    options.every_clocks = every;
    ASSERT_TRUE(StartScheduler(options).ok());
    ASSERT_TRUE(RunAll(0, to).ok());
    ASSERT_TRUE(WaitFor([&] { return coordinator_->status().latest_clock == cut; }));
    coordinator_.reset();
  }

  bool WaitFor(const std::function<bool()>& condition) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (!condition()) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return true;
  }

  std::string root_;
  std::unique_ptr<CheckpointLayout> layout_;
  std::unique_ptr<FakeServers> servers_;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<ClockTable> clocks_;
  std::unique_ptr<CheckpointCoordinator> coordinator_;
  // Every member but worker `silent` heartbeats at `at`; then the silent one is declared dead (at `at`).
  void KeepAliveAllBut(int silent, absl::Time at) {
    for (const auto& [member, incarnation] : incarnations_) {
      if (member.first == Role::kWorker && member.second == silent) continue;
      EXPECT_TRUE(membership_->Heartbeat(member.first, member.second, incarnation, at).ok());
    }
    EXPECT_EQ(membership_->ExpireSilent(at).size(), 1u);
  }

  absl::Time now_ = absl::UnixEpoch();
  std::map<std::pair<Role, int>, std::string> incarnations_;  // of the members StartScheduler registered
  absl::Status fatal_;
  absl::Notification fatal_seen_;
};

TEST_F(CoordinatorTest, EveryNClocksCutsExactGlobalCheckpoints) {
  CheckpointOptions options;
  options.every_clocks = 4;
  options.keep = 2;
  ASSERT_TRUE(StartScheduler(options).ok());
  // ASP lets workers run apart, but the hold stops both at clock 4, 8, 12: each checkpoint is an exact cut.
  ASSERT_TRUE(RunAll(0, 10).ok());
  ASSERT_TRUE(WaitFor([&] { return coordinator_->status().latest_clock == 8; }));
  EXPECT_EQ(coordinator_->status().committed, 2u);
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
  coordinator_.reset();
  for (int s = 0; s < kServers; ++s) {
    servers_->Replace(s);
    ASSERT_TRUE(servers_->Restore(s, "", CheckpointLayout::CheckpointName(m.sequence()), 1).ok());
  }
  EXPECT_EQ(servers_->Fingerprint(), ReferenceFingerprint(8));
}

TEST_F(CoordinatorTest, RequestedCheckpointCutsAtTheNextBoundary) {
  ASSERT_TRUE(StartScheduler(CheckpointOptions()).ok());
  ASSERT_TRUE(RunAll(0, 3).ok());
  auto clock = coordinator_->Request();
  ASSERT_TRUE(clock.ok()) << clock.status();
  EXPECT_EQ(*clock, 3);
  ASSERT_TRUE(RunAll(3, 5).ok());
  ASSERT_TRUE(WaitFor([&] { return coordinator_->status().committed == 1; }));
  EXPECT_EQ(coordinator_->status().latest_clock, 3);
  EXPECT_EQ((*layout_->ReadLatest())->reason(), "requested");
}

TEST_F(CoordinatorTest, TimedCheckpointCutsAtTheNextBoundaryAfterTheInterval) {
  CheckpointOptions options;
  options.every = absl::Milliseconds(100);
  ASSERT_TRUE(StartScheduler(options).ok());
  ASSERT_TRUE(RunAll(0, 3).ok());
  // The workers pause at clock 3 longer than the interval: the cut lands there.
  ASSERT_TRUE(WaitFor([&] { return coordinator_->status().committed == 1; }));
  EXPECT_EQ(coordinator_->status().latest_clock, 3);
  EXPECT_EQ((*layout_->ReadLatest())->reason(), "every 100ms");
  ASSERT_TRUE(RunAll(3, 6).ok());
  coordinator_.reset();
  for (int s = 0; s < kServers; ++s) {
    servers_->Replace(s);
    ASSERT_TRUE(servers_->Restore(s, "", "ckpt-00000001", 1).ok());
  }
  EXPECT_EQ(servers_->Fingerprint(), ReferenceFingerprint(3));
}

TEST_F(CoordinatorTest, FailedShardAbandonsTheCheckpointAndTheJobGoesOn) {
  CheckpointOptions options;
  options.every_clocks = 2;
  ASSERT_TRUE(StartScheduler(options).ok());
  ASSERT_TRUE(RunAll(0, 2).ok());
  ASSERT_TRUE(WaitFor([&] { return coordinator_->status().committed == 1; }));
  servers_->fail_shard_ = 1;
  ASSERT_TRUE(RunAll(2, 5).ok()) << "an abandoned checkpoint releases the hold";
  EXPECT_EQ(coordinator_->status().committed, 1u);
  EXPECT_EQ((*layout_->ReadLatest())->clock(), 2) << "LATEST still names the last complete checkpoint";
  servers_->fail_shard_ = -1;
  ASSERT_TRUE(RunAll(5, 7).ok());
  ASSERT_TRUE(WaitFor([&] { return coordinator_->status().latest_clock == 6; }));
}

TEST_F(CoordinatorTest, ServerDeathRollsEveryServerBackToTheLatestCheckpoint) {
  CheckpointOptions options;
  options.every_clocks = 3;
  ASSERT_TRUE(StartScheduler(options).ok());
  ASSERT_TRUE(RunAll(0, 5).ok());
  ASSERT_TRUE(WaitFor([&] { return coordinator_->status().latest_clock == 3; }));
  const uint64_t old_generation = membership_->generation();

  // Server 1 stops heartbeating and is declared dead; a replacement (empty) registers with its rank.
  now_ += absl::Seconds(1);
  ASSERT_TRUE(membership_->Heartbeat(Role::kServer, 0, membership_->Members()[0].incarnation, now_).ok());
  for (int w = 0; w < kWorkers; ++w) {
    ASSERT_TRUE(membership_->Heartbeat(Role::kWorker, w, membership_->Members()[kServers + w].incarnation, now_).ok());
  }
  ASSERT_EQ(membership_->ExpireSilent(now_ + absl::Milliseconds(600)).size(), 1u);
  coordinator_->Wake();
  ASSERT_TRUE(WaitFor([&] { return membership_->rolling_back(); }));
  EXPECT_EQ(membership_->state(), JobState::kRecovering);
  EXPECT_EQ(clocks_->hold(), 0) << "nothing may start during the rollback";
  servers_->Replace(1);
  ASSERT_TRUE(membership_->Register(Role::kServer, servers_->Address(1), 1, now_).ok());
  coordinator_->Wake();
  ASSERT_TRUE(WaitFor([&] { return !membership_->rolling_back(); })) << fatal_;
  EXPECT_EQ(membership_->state(), JobState::kRunning);
  EXPECT_EQ(coordinator_->status().rollbacks, 1u);
  EXPECT_TRUE(clocks_->AllAt(3));
  EXPECT_EQ(servers_->Fingerprint(), ReferenceFingerprint(3)) << "both servers hold exactly the cut at clock 3";
  EXPECT_EQ(coordinator_->StateFor(1, 3)->reader().global_line(), 301u);
  // The survivor refuses the old timeline; the new generation works and the job finishes.
  EXPECT_EQ(servers_->Push(0, 5, old_generation).code(), absl::StatusCode::kAborted);
  ASSERT_TRUE(RunAll(3, 8).ok());
  EXPECT_EQ(servers_->Fingerprint(), ReferenceFingerprint(8));
}

// Replicated (2 copies of every range): a dead server is failed over. No rollback, no generation of a worker
// moves, no wait is cancelled and the clocks go on; scheduled checkpoints are skipped (not held) while a server
// is out of service. Its replacement is re-replicated and put back, and checkpoints resume. (Losing every copy
// rolls back: tests/recovery_test.cc.)
TEST_F(CoordinatorTest, ReplicatedServerDeathFailsOverAndTheReplacementIsReReplicated) {
  CheckpointOptions options;
  options.every_clocks = 3;
  ASSERT_TRUE(StartScheduler(options, /*replicas=*/2).ok());
  ASSERT_TRUE(RunAll(0, 5).ok());
  ASSERT_TRUE(WaitFor([&] { return coordinator_->status().latest_clock == 3; }));
  const std::vector<uint64_t> worker_generations = membership_->WorkerGenerations();
  const uint64_t epoch = clocks_->epoch();

  now_ += absl::Seconds(1);
  for (const Member& m : membership_->Members()) {
    if (!(m.role == Role::kServer && m.rank == 1)) ASSERT_TRUE(membership_->Heartbeat(m.role, m.rank, m.incarnation, now_).ok());
  }
  ASSERT_EQ(membership_->ExpireSilent(now_ + absl::Milliseconds(600)).size(), 1u);
  coordinator_->Wake();
  ASSERT_TRUE(WaitFor([&] { return membership_->routing().generation == 1; }));
  EXPECT_EQ(membership_->routing().out_of_service, std::vector<int>{1});
  EXPECT_EQ(membership_->routing().failovers, 1u);
  EXPECT_FALSE(membership_->rolling_back());
  EXPECT_EQ(membership_->state(), JobState::kRunning) << "running on the backups";
  EXPECT_EQ(membership_->WorkerGenerations(), worker_generations);
  EXPECT_EQ(clocks_->epoch(), epoch) << "no wait was cancelled";
  EXPECT_EQ(coordinator_->status().rollbacks, 0u);

  // The job goes on past the next scheduled cut (6), which is skipped rather than held.
  ASSERT_TRUE(RunAll(5, 8).ok());
  EXPECT_EQ(coordinator_->status().latest_clock, 3);
  EXPECT_EQ(servers_->Fingerprint(), ReferenceFingerprint(8));

  // The replacement registers: every worker is held at the earliest boundary (8), the primary of each range
  // group it should hold (server 0, for both) copies the group to it, it is put back in service, and the hold
  // is released only once every live server acts on that routing.
  ASSERT_TRUE(membership_->Register(Role::kServer, servers_->Address(1), 1, now_).ok());
  coordinator_->Wake();
  ASSERT_TRUE(WaitFor([&] { return membership_->routing().generation == 2; })) << "put back in service";
  EXPECT_TRUE(membership_->routing().out_of_service.empty());
  EXPECT_EQ(servers_->copies(), (std::vector<std::vector<int>>{{0, 1, 1}, {0, 0, 1}}));  // (source, owner, target)
  EXPECT_EQ(clocks_->hold(), 8);
  absl::SleepFor(absl::Milliseconds(100));
  coordinator_->Wake();
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(clocks_->hold(), 8) << "server 0 has not acted on the new routing yet";
  for (const Member& m : membership_->Members()) {
    ASSERT_TRUE(membership_->Heartbeat(m.role, m.rank, m.incarnation, now_, /*routing_generation=*/2).ok());
  }
  coordinator_->Wake();
  ASSERT_TRUE(RunAll(8, 10).ok());
  EXPECT_EQ(coordinator_->status().rollbacks, 0u);
  ASSERT_TRUE(WaitFor([&] { return coordinator_->status().latest_clock == 9; })) << "checkpoints resume";
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
TEST_F(CoordinatorTest, ServerLostAfterTheFinalCheckpointRestoresIt) {
  CheckpointOptions options;
  options.every_clocks = 3;
  ASSERT_TRUE(StartScheduler(options).ok());
  ASSERT_TRUE(RunAll(0, 5).ok());
  EXPECT_FALSE(coordinator_->status().final_model_settled);
  ASSERT_NO_FATAL_FAILURE(MarkAllDone(*membership_));
  coordinator_->Wake();
  ASSERT_TRUE(WaitFor([&] { return coordinator_->status().final_model_settled; }));
  EXPECT_EQ(coordinator_->status().latest_clock, 5) << "settled only with the final checkpoint committed";
  ASSERT_TRUE(membership_->MarkWorkerLeft(1).ok());  // worker 0 still evaluates

  ASSERT_NO_FATAL_FAILURE(DeclareServer1Dead(*membership_, now_));
  coordinator_->Wake();
  ASSERT_TRUE(WaitFor([&] { return membership_->rolling_back(); }));
  EXPECT_EQ(membership_->state(), JobState::kRecovering);
  servers_->Replace(1);
  ASSERT_TRUE(membership_->Register(Role::kServer, servers_->Address(1), 1, now_).ok());
  coordinator_->Wake();
  ASSERT_TRUE(WaitFor([&] { return !membership_->rolling_back(); })) << fatal_;
  EXPECT_EQ(membership_->state(), JobState::kFinished) << "the final checkpoint: every worker is done at it";
  EXPECT_TRUE(coordinator_->status().final_model_settled);
  EXPECT_TRUE(clocks_->AllAt(5));
  EXPECT_EQ(servers_->Fingerprint(), ReferenceFingerprint(5));
  EXPECT_TRUE(fatal_.ok()) << fatal_;
}

// Once every worker has left, nobody reads the servers: a server that goes is not recovered.
TEST_F(CoordinatorTest, ServerLeavingAfterEveryWorkerLeftIsNoFailure) {
  CheckpointOptions options;
  options.every_clocks = 3;
  ASSERT_TRUE(StartScheduler(options).ok());
  ASSERT_TRUE(RunAll(0, 4).ok());
  ASSERT_NO_FATAL_FAILURE(MarkAllDone(*membership_));
  coordinator_->Wake();
  ASSERT_TRUE(WaitFor([&] { return coordinator_->status().final_model_settled; }));
  for (int w = 0; w < kWorkers; ++w) ASSERT_TRUE(membership_->MarkWorkerLeft(w).ok());
  EXPECT_FALSE(membership_->AnyWorkerAlive());
  ASSERT_NO_FATAL_FAILURE(DeclareServer1Dead(*membership_, now_));
  coordinator_->Wake();
  absl::SleepFor(absl::Milliseconds(200));  // several coordinator steps
  EXPECT_FALSE(membership_->rolling_back());
  EXPECT_EQ(membership_->state(), JobState::kFinished);
  EXPECT_EQ(coordinator_->status().rollbacks, 0u);
  EXPECT_TRUE(fatal_.ok()) << fatal_;
}

// The final checkpoint keeps failing: after a few attempts the workers are let go without it, and a server
// lost after that (a worker still evaluating) cannot be recovered: DATA_LOSS, not a silently empty server.
TEST_F(CoordinatorTest, ServerLostWithTheFinalModelInNoCheckpointIsFatal) {
  CheckpointOptions options;
  options.every_clocks = 3;
  ASSERT_TRUE(StartScheduler(options).ok());
  ASSERT_TRUE(RunAll(0, 5).ok());
  servers_->fail_shard_ = 0;
  ASSERT_NO_FATAL_FAILURE(MarkAllDone(*membership_));
  coordinator_->Wake();
  ASSERT_TRUE(WaitFor([&] { return coordinator_->status().final_model_settled; }));
  EXPECT_EQ(coordinator_->status().latest_clock, 3) << "no final checkpoint";
  ASSERT_NO_FATAL_FAILURE(DeclareServer1Dead(*membership_, now_));
  coordinator_->Wake();
  ASSERT_TRUE(fatal_seen_.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(fatal_.code(), absl::StatusCode::kDataLoss) << fatal_;
  EXPECT_FALSE(membership_->rolling_back());
}

TEST_F(CoordinatorTest, ResumeRestoresTheLatestCheckpointOntoNewServers) {
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
  EXPECT_EQ(coordinator_->StateFor(0, 4)->reader().global_line(), 400u);
  ASSERT_TRUE(RunAll(4, 7).ok());
  EXPECT_EQ(servers_->Fingerprint(), ReferenceFingerprint(7));
}

TEST_F(CoordinatorTest, ResumeFromADamagedCheckpointIsRefusedByName) {
  ASSERT_NO_FATAL_FAILURE(RunThenStopScheduler(/*every=*/2, /*to=*/3, /*cut=*/2));
  CheckpointOptions options;
  const std::string manifest = layout_->ManifestPath("ckpt-00000001");
  fs::resize_file(manifest, fs::file_size(manifest) - 10);
  options.resume = true;
  absl::Status status = StartScheduler(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), manifest)) << status;
}

TEST_F(CoordinatorTest, DamagedShardFileStopsTheRestoreWithItsName) {
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
  EXPECT_TRUE(absl::StrContains(fatal_.message(), "shard 1")) << fatal_;
  EXPECT_NE(membership_->state(), JobState::kRunning) << "never a silent fresh start";
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// The rows' moves are tested with real servers (server/rescale_test.cc); here, the order of the phases and what
// the job looks like after a rescale and after a failed one.
TEST_F(CoordinatorTest, RescaleRunsEveryPhaseOnTheRightServersAndMovesTheLayout) {
  CheckpointOptions options;
  ASSERT_TRUE(StartScheduler(options).ok());
  ASSERT_TRUE(RunAll(0, 3).ok());
  absl::Notification done;
  absl::StatusOr<ScaleResult> result = absl::UnknownError("not answered");
  ASSERT_TRUE(coordinator_
                  ->Scale({kServers + 1, kWorkers}, absl::Minutes(1),
                          [&](absl::StatusOr<ScaleResult> r) {
                            result = std::move(r);
                            done.Notify();
                          })
                  .ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(coordinator_->Scale({kServers + 1, kWorkers}, absl::Minutes(1), nullptr)))
      << "one rescale at a time";
  // The new server registers as a joining rank; only then does the rescale hold the workers.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_TRUE(servers_->rescales().empty());
  auto joined = membership_->Register(Role::kServer, "server-2", kServers, now_);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_TRUE(joined->joining);
  coordinator_->Wake();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->clock, 3);
  EXPECT_EQ(result->layout_generation, 1u);
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

TEST_F(CoordinatorTest, FailedRescaleAbortsEveryServerAndTheJobGoesOnUnchanged) {
  CheckpointOptions options;
  ASSERT_TRUE(StartScheduler(options).ok());
  ASSERT_TRUE(RunAll(0, 2).ok());
  servers_->fail_phase_ = RescaleShardRequest::INSTALL;
  absl::Notification done;
  absl::StatusOr<ScaleResult> result = absl::UnknownError("not answered");
  ASSERT_TRUE(coordinator_
                  ->Scale({kServers + 1, kWorkers}, absl::Minutes(1),
                          [&](absl::StatusOr<ScaleResult> r) {
                            result = std::move(r);
                            done.Notify();
                          })
                  .ok());
  auto joined = membership_->Register(Role::kServer, "server-2", kServers, now_);
  ASSERT_TRUE(joined.ok()) << joined.status();
  coordinator_->Wake();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(absl::IsUnavailable(result.status())) << result.status();
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

TEST_F(CoordinatorTest, RescaleWaitsForTheNewRanksOnlyUntilItsTimeout) {
  CheckpointOptions options;
  ASSERT_TRUE(StartScheduler(options).ok());
  ASSERT_TRUE(RunAll(0, 1).ok());
  absl::Notification done;
  absl::StatusOr<ScaleResult> result = absl::UnknownError("not answered");
  ASSERT_TRUE(coordinator_
                  ->Scale({kServers + 1, kWorkers}, absl::Milliseconds(200),
                          [&](absl::StatusOr<ScaleResult> r) {
                            result = std::move(r);
                            done.Notify();
                          })
                  .ok());
  ASSERT_TRUE(RunAll(1, 3).ok()) << "the job runs on while the new ranks start";
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(absl::IsDeadlineExceeded(result.status())) << result.status();
  EXPECT_TRUE(servers_->rescales().empty());
  EXPECT_FALSE(membership_->pending_scale().has_value());
  EXPECT_TRUE(absl::IsUnavailable(membership_->Register(Role::kServer, "late", kServers, now_).status()));
}

// A worker's reported state after reading its first `read` lines of the first epoch (plain sharding of `count`).
WorkerState ReadOf(int w, int count, uint64_t read, int64_t clock) {
  const ShardAssignment share = PlainShard(w, count);
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
    const ShardAssignment a = PlainShard(w, 3);
    for (uint64_t n = 0; n < (w == 1 ? 20u : 24u); ++n) ++reads[a.Line(n)];
  }
  for (const LineShare& share : plan.shares()) {
    const ShardAssignment a = AssignmentOf(share);
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
    const ShardAssignment a = PlainShard(w, 3);
    for (uint64_t n = 0; n < (w == 1 ? 20u : 24u); ++n) ++reads[a.Line(n)];
  }
  const ShardAssignment last = AssignmentOf((*second)[0].plan().shares(0));
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
    for (uint64_t n = 0; n < 8; ++n) ++reads[PlainShard(w, 3).Line(n)];
  }
  for (const LineShare& share : (*planned)[0].plan().shares()) {
    const ShardAssignment a = AssignmentOf(share);
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

// Elastic removal of a BSP worker that died in clock 6, after worker 0 finished it. The phases asked of the
// servers decide: its clock is completed without it (no rollback), or, when a server applied it with its pushes
// already, the job rolls back to the checkpoint at clock 4 and the worker is removed from there.
class ElasticCoordinatorTest : public CoordinatorTest {
 protected:
  void RunUntilWorker1Dies() {
    CheckpointOptions options;
    options.every_clocks = 4;
    options.elastic_timeout = absl::Milliseconds(50);
    ASSERT_TRUE(StartScheduler(options, /*replicas=*/1, /*bsp=*/true).ok());
    ASSERT_TRUE(RunAll(0, 6).ok());
    ASSERT_TRUE(WaitFor([&] { return coordinator_->status().latest_clock == 4; }));
    // Worker 0 finishes clock 6; worker 1 died in it. Membership's times here are far before the monotonic
    // clock the coordinator reads: the death is older than the elastic timeout at once.
    ASSERT_TRUE(RunWorker(0, 6, 7, membership_->generation()).ok());
    KeepAliveAllBut(1, now_ + absl::Seconds(10));
    coordinator_->Wake();
  }
  std::vector<int> Phases() {
    std::vector<int> phases;
    for (const auto& call : servers_->rescales()) {
      if (phases.empty() || phases.back() != call[0]) phases.push_back(call[0]);
    }
    return phases;
  }
};

TEST_F(ElasticCoordinatorTest, AWorkerDeadMidClockIsRemovedAndItsClockCompletedWithoutIt) {
  ASSERT_NO_FATAL_FAILURE(RunUntilWorker1Dies());
  ASSERT_TRUE(WaitFor([&] { return coordinator_->status().elastic_removals == 1; }));
  // The servers keep their rows (the partition stays): they switch to the new worker count in place.
  EXPECT_EQ(Phases(), (std::vector<int>{RescaleShardRequest::FENCE, RescaleShardRequest::COMPLETE,
                                        RescaleShardRequest::SWITCH}));
  EXPECT_EQ(coordinator_->status().rollbacks, 0u);
  const JobLayout layout = membership_->layout();
  EXPECT_EQ(layout.num_workers, 1);
  EXPECT_EQ(layout.worker_ids, std::vector<int>{0});
  EXPECT_EQ(clocks_->num_workers(), 1);
  EXPECT_EQ(clocks_->ClockOf(0), 7) << "worker 0 goes on from where it was";
  EXPECT_EQ(membership_->state(), JobState::kRunning);
  // Its shares: everything worker 1 had not read is worker 0's now, from the state the checkpoint at 7 keeps.
  auto state = coordinator_->StateFor(0, 7);
  ASSERT_TRUE(state.has_value());
  ASSERT_EQ(state->plan().shares_size(), 1);
  EXPECT_GT(state->plan().shares(0).leftovers_size(), 0) << "worker 1's unread lines";
  ASSERT_TRUE(WaitFor([&] { return coordinator_->status().latest_clock == 7; })) << "cut at the removal";
}

TEST_F(CoordinatorTest, AnAspWorkerDeadBehindTheOthersIsRemovedWithNothingToComplete) {
  CheckpointOptions options;
  options.elastic_timeout = absl::Milliseconds(50);
  ASSERT_TRUE(StartScheduler(options).ok());  // ASP: workers run apart, pushes are applied on arrival
  ASSERT_TRUE(RunAll(0, 3).ok());
  ASSERT_TRUE(RunWorker(0, 3, 8, membership_->generation()).ok());  // worker 1 died at clock 3, far behind
  KeepAliveAllBut(1, now_ + absl::Seconds(10));
  coordinator_->Wake();
  ASSERT_TRUE(WaitFor([&] { return coordinator_->status().elastic_removals == 1; }));
  std::vector<int> phases;
  for (const auto& call : servers_->rescales()) phases.push_back(call[0]);
  EXPECT_EQ(phases, (std::vector<int>{RescaleShardRequest::SWITCH, RescaleShardRequest::SWITCH}))
      << "no clock to complete, no row to move: both servers switch in place";
  EXPECT_EQ(coordinator_->status().rollbacks, 0u);
  EXPECT_EQ(membership_->layout().num_workers, 1);
  EXPECT_EQ(clocks_->ClockOf(0), 8);
  // Worker 1's lines from clock 3 on are worker 0's now (leftovers below the watermark).
  auto state = coordinator_->StateFor(0, 8);
  ASSERT_TRUE(state.has_value());
  ASSERT_EQ(state->plan().shares_size(), 1);
  EXPECT_GT(state->plan().shares(0).leftovers_size(), 0);
  EXPECT_EQ(state->reader().global_line(), 3u * 100 + 1) << "read from worker 1's last position";
}

TEST_F(ElasticCoordinatorTest, AWorkerWhosePushWasAppliedSomewhereIsRemovedAfterARollback) {
  servers_->fence_applied_ = 1;
  ASSERT_NO_FATAL_FAILURE(RunUntilWorker1Dies());
  ASSERT_TRUE(WaitFor([&] { return coordinator_->status().elastic_removals == 1; }));
  EXPECT_EQ(coordinator_->status().rollbacks, 1u);
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
