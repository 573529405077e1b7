// The job controller's test bench (scheduler/job_controller.h): a whole job's scheduler side (membership,
// clocks, controller) driven in process, with FakeServers (real shards and stores, server/shard.h and
// server/shard_store.h, reached in process) standing in for the parameter servers. Test-only; here rather than
// in scheduler/ because it uses the servers' code (the layering: tools/BUILD).
#ifndef KESTREL_TESTS_JOB_CONTROLLER_TESTING_H_
#define KESTREL_TESTS_JOB_CONTROLLER_TESTING_H_

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/checkpoint_layout.h"
#include "common/hash.h"
#include "common/partition.h"
#include "common/line_assignment.h"
#include "gtest/gtest.h"
#include "scheduler/clock_table.h"
#include "scheduler/job_controller.h"
#include "scheduler/membership.h"
#include "scheduler/server_admin.h"
#include "server/shard.h"
#include "server/shard_store.h"

namespace kestrel {

inline constexpr int kDim = 4;
inline constexpr int kServers = 2;
inline constexpr int kWorkers = 2;

inline TableConfig Emb() {
  TableConfig c;
  c.set_name("emb");
  c.set_dim(kDim);
  c.mutable_optimizer()->set_type(OptimizerConfig::ADAGRAD);
  return c;
}

inline RequestContext Ctx(int rank, uint64_t generation) {
  RequestContext ctx;
  ctx.job_id = "job";
  ctx.worker_rank = rank;
  ctx.generation = generation;
  return ctx;
}

// The keys worker `rank` pushes at iteration `clock`: each row is written by exactly one push, so the state
// after any set of iterations does not depend on the order they ran in.
inline std::vector<uint64_t> KeysOf(int rank, int64_t clock) {
  std::vector<uint64_t> keys;
  for (int i = 0; i < 50; ++i) keys.push_back(Mix64((static_cast<uint64_t>(clock) << 32) | (rank << 16) | i));
  return keys;
}

// In-process servers reached through ServerAdmin, as the scheduler reaches real ones over gRPC.
class FakeServers final : public ServerAdmin {
 public:
  FakeServers(const CheckpointLayout& layout, Partition partition) : layout_(layout), partition_(partition) {
    for (int s = 0; s < kServers; ++s) Replace(s);
  }

  // Server `s` is replaced by a fresh process: no tables, a new working store.
  void Replace(int s) {
    absl::MutexLock admin(&admin_mu_[s]);
    ShardOptions options;
    options.job_id = "job";
    options.owner = s;
    stores_[s].reset();  // the process is gone: its working store with it
    written_[s].first.clear();  // and what it wrote
    shards_[s] = std::move(Shard::Create(options, partition_)).value();
    auto store = ShardStore::Open(layout_, s);
    ASSERT_TRUE(store.ok()) << store.status();
    stores_[s] = std::move(store).value();
  }
  std::string Address(int s) const { return absl::StrCat("server-", s); }
  Shard& shard(int s) { return *shards_[s]; }

  // The worker side of an iteration: create the table (idempotent) and push its keys to their owners.
  [[nodiscard]] absl::Status Push(int rank, int64_t clock, uint64_t generation) {
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

  [[nodiscard]] absl::StatusOr<ShardCheckpoint> Checkpoint(int shard, const std::string& address, const std::string& name,
                                             int64_t, bool copy_on_write) override {
    if (shard == fail_shard_.load()) return absl::UnavailableError("injected failure");
    if (shard >= kServers) return absl::UnavailableError("no such fake server");  // a rescale's new rank
    EXPECT_EQ(address, Address(shard));
    absl::MutexLock admin(&admin_mu_[shard]);
    WritePendingLocked(shard);
    if (!copy_on_write) return stores_[shard]->Checkpoint(*shards_[shard], name);
    if (absl::Status cut = stores_[shard]->BeginCheckpoint(*shards_[shard], name); !cut.ok()) return cut;
    ShardCheckpoint answer;
    answer.set_shard(shard);
    return answer;
  }
  [[nodiscard]] absl::StatusOr<ShardCheckpoint> AwaitCheckpoint(int shard, const std::string&, const std::string& name) override {
    if (shard == fail_shard_.load()) return absl::UnavailableError("injected failure");
    if (shard >= kServers) return absl::UnavailableError("no such fake server");
    absl::MutexLock admin(&admin_mu_[shard]);
    WritePendingLocked(shard);
    if (written_[shard].first != name) return absl::FailedPreconditionError(absl::StrCat(name, " was not cut here last"));
    return written_[shard].second;
  }
  [[nodiscard]] absl::Status Restore(int shard, const std::string& address, const std::string& name, uint64_t generation) {
    RestoreShardRequest request;
    request.set_name(name);
    request.set_min_worker_generation(generation);
    return Restore(shard, address, request);
  }
  [[nodiscard]] absl::Status Restore(int shard, const std::string&, RestoreShardRequest request) override {
    const std::string& name = request.name();
    const uint64_t generation = request.min_worker_generation();
    std::optional<CheckpointManifest> manifest;
    if (!name.empty()) {
      absl::StatusOr<CheckpointManifest> read = layout_.ReadManifest(name);
      if (!read.ok()) return read.status();
      manifest = *read;
    }
    absl::MutexLock admin(&admin_mu_[shard]);
    WritePendingLocked(shard);
    written_[shard].first.clear();  // as a real server: no part written before a restore is answered
    return stores_[shard]->Restore(manifest, *shards_[shard], generation);
  }

  // Re-replication: records each copy asked for, (source, owner, target); the copy itself is tested with real
  // servers (tests/recovery_test.cc).
  [[nodiscard]] absl::StatusOr<uint64_t> CopyGroup(int source, const std::string&, int owner, int target,
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
  [[nodiscard]] absl::StatusOr<RescaleShardResponse> Rescale(int shard, const std::string&, RescaleShardRequest request) override {
    absl::MutexLock lock(&copies_mu_);
    rescales_.push_back({static_cast<int>(request.phase()), shard});
    if (static_cast<int>(request.phase()) == fail_phase_) return absl::UnavailableError("injected failure");
    RescaleShardResponse response;
    // FENCE: how many tables applied the removed workers' clock with them (fence_applied_, once).
    if (request.phase() == RescaleShardRequest::FENCE) response.set_applied_with_removed(fence_applied_.exchange(0));
    return response;
  }
  [[nodiscard]] absl::StatusOr<uint64_t> Fingerprint(int shard, const std::string&) override {
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
  // A copy-on-write cut is written before the server's next admin call, as a real server's admin thread writes it
  // right after the cut.
  void WritePendingLocked(int s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(admin_mu_[s]) {
    const std::string name = stores_[s]->pending_checkpoint();
    if (!name.empty()) written_[s] = {name, stores_[s]->FinishCheckpoint()};
  }

  // Each server's admin calls run one at a time, as a real server's admin thread runs them.
  absl::Mutex admin_mu_[kServers];
  // The last copy-on-write cut written by each server, and its part (or error).
  std::pair<std::string, absl::StatusOr<ShardCheckpoint>> written_[kServers];
  std::unique_ptr<Shard> shards_[kServers];
  std::unique_ptr<ShardStore> stores_[kServers];
};

// A whole job's scheduler side (membership, clocks, job controller) plus its servers.
class JobControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = absl::StrCat(::testing::TempDir(), "/controller_", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
    layout_ = std::make_unique<CheckpointLayout>(root_);
    servers_ = std::make_unique<FakeServers>(*layout_, *Partition::Uniform(kServers));
  }

  // Builds the scheduler side and registers everyone. Returns Start()'s status.
  // `bsp`: the clocks and the controller run BSP (else ASP: workers run apart).
  [[nodiscard]] absl::Status StartScheduler(CheckpointOptions options, int replicas = 1, bool bsp = false) {
    controller_.reset();
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
    job.consistency = bsp ? ConsistencyPolicy::Bsp() : ConsistencyPolicy::Asp();
    job.num_servers = kServers;
    job.num_workers = kWorkers;
    controller_ = std::make_unique<JobController>(options, job, membership_.get(), clocks_.get(),
                                                           servers_.get(), [this](absl::Status s) {
                                                             fatal_ = s;
                                                             fatal_seen_.Notify();
                                                           });
    clocks_->SetListener([this] { controller_->Wake(); });
    absl::Status started = controller_->Start();
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
  [[nodiscard]] absl::Status RunWorker(int rank, int64_t from, int64_t to, uint64_t generation) {
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
      *state.mutable_share() = LineShareOf(PlainAssignment(rank, kWorkers));
      state.set_epoch_end(1 << 20);
      controller_->RecordWorkerState(rank, state);
      if (absl::Status advanced = clocks_->Advance(rank, c + 1); !advanced.ok()) return advanced;
    }
    return absl::OkStatus();
  }

  [[nodiscard]] absl::Status RunAll(int64_t from, int64_t to) {
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
    ASSERT_TRUE(WaitFor([&] { return controller_->status().latest_clock == cut; }));
    controller_.reset();
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
  std::unique_ptr<JobController> controller_;
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

}  // namespace kestrel

#endif  // KESTREL_TESTS_JOB_CONTROLLER_TESTING_H_
