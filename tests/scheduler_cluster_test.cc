// A real kestrel_scheduler and two real kestrel_server processes on loopback; worker threads drive clocks
// through the real gRPC APIs.
//   - SSP(1): no worker is ever allowed more than 1 iteration ahead of the slowest, also while one worker is
//     paused (until the scheduler's metrics show it holding the others at the bound), and everyone finishes
//     once it resumes;
//   - a server killed with SIGKILL is declared dead (the 2-interval bound itself is proven with controlled
//     time in scheduler/membership_test);
//   - requests of the old generation are refused; a replacement server takes the dead rank.
// Everything runs over mutual TLS (tests/test_cluster_tls.h): each process and each worker thread presents the
// certificate of its own role and rank; the test reads the job's state as an admin.
#include <signal.h>

#include <atomic>
#include <optional>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "common/metrics_testing.h"
#include "gtest/gtest.h"
#include "client/grpc_scheduler_client.h"
#include "client/heartbeater.h"
#include "client/scheduler_client.h"
#include "tests/server_process.h"
#include "tests/test_cluster_tls.h"
#include "worker/grpc_ps_client.h"

namespace kestrel {
namespace {

constexpr char kJob[] = "cluster";
constexpr int kWorkers = 3;
constexpr int kStaleness = 1;
constexpr int kIterations = 12;
constexpr absl::Duration kInterval = absl::Milliseconds(600);

std::string TmpDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

absl::StatusOr<ServerProcess> StartServer(int index, const std::string& scheduler, const std::string& name) {
  absl::StatusOr<std::vector<std::string>> args = TestClusterTls::Get().WithFlags(
      {std::string("--job_id=") + kJob, "--num_servers=2", "--rank=" + std::to_string(index),
       "--scheduler=" + scheduler},
      kJob, "server", index);
  if (!args.ok()) return args.status();
  return ServerProcess::Start(RunfilePath("server/kestrel_server"), *args, TmpDir(), name);
}

// A scheduler client presenting the certificate of `role` and `rank`.
std::unique_ptr<SchedulerClient> SchedulerClientAs(const std::string& address, const std::string& role, int rank) {
  SchedulerClientOptions options;
  options.job_id = kJob;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      TestClusterTls::Get().Credentials(kJob, role, rank);
  EXPECT_TRUE(credentials.ok()) << credentials.status();
  return NewGrpcSchedulerClient(address, options, credentials.ok() ? *credentials : nullptr);
}

// A PsClient of worker `rank`, with that worker's certificate.
std::unique_ptr<PsClient> PsClientAs(int rank, const std::vector<std::string>& addresses) {
  PsClientOptions options;
  options.job_id = kJob;
  options.worker_rank = rank;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      TestClusterTls::Get().Credentials(kJob, "worker", rank);
  EXPECT_TRUE(credentials.ok()) << credentials.status();
  return *NewGrpcPsClient(options, *Partition::Uniform(2), addresses,
                          credentials.ok() ? *credentials : nullptr);
}

// Polls Describe until `predicate` holds (up to `timeout`); returns the last answer.
DescribeResponse DescribeUntil(SchedulerClient& client, const std::function<bool(const DescribeResponse&)>& predicate,
                               absl::Duration timeout = absl::Seconds(15)) {
  const absl::Time deadline = absl::Now() + timeout;
  DescribeResponse last;
  while (absl::Now() < deadline) {
    auto d = client.Describe();
    if (d.ok()) {
      last = *d;
      if (predicate(last)) break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return last;
}

// The WaitToStart calls the scheduler holds (its kestrel_scheduler_waiting_requests gauge), read from /metrics.
absl::StatusOr<double> WaitingRequests(int metrics_port) {
  absl::StatusOr<std::string> body = HttpGet("127.0.0.1", metrics_port, "/metrics");
  if (!body.ok()) return body.status();
  absl::StatusOr<Exposition> metrics = ParseExposition(*body);
  if (!metrics.ok()) return metrics.status();
  std::optional<double> waiting = metrics->Value("kestrel_scheduler_waiting_requests");
  if (!waiting.has_value()) return absl::NotFoundError("no kestrel_scheduler_waiting_requests in the scrape");
  return *waiting;
}

bool ServerAlive(const DescribeResponse& d, int rank) {
  for (const MemberStatus& m : d.members()) {
    if (m.role() == ROLE_SERVER && m.rank() == rank) return m.alive();
  }
  return false;
}

TEST(SchedulerClusterTest, SspBoundDeathAndGenerations) {
  auto scheduler_args = TestClusterTls::Get().WithFlags(
      {std::string("--job_id=") + kJob, "--num_servers=2", "--num_workers=" + std::to_string(kWorkers),
       "--consistency=ssp", "--staleness=" + std::to_string(kStaleness), "--lease_clocks=0",  // the barrier itself
       "--heartbeat_interval=" + absl::FormatDuration(kInterval), "--metrics_port=0",
       "--metrics_port_file=" + TmpDir() + "/scheduler.metrics_port"},
      kJob, "scheduler", 0);
  ASSERT_TRUE(scheduler_args.ok()) << scheduler_args.status();
  auto scheduler =
      ServerProcess::Start(RunfilePath("scheduler/kestrel_scheduler"), *scheduler_args, TmpDir(), "scheduler");
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  const absl::StatusOr<int> metrics_port = ReadPortFile(TmpDir() + "/scheduler.metrics_port");
  ASSERT_TRUE(metrics_port.ok()) << metrics_port.status();
  std::vector<ServerProcess> servers;
  for (int s = 0; s < 2; ++s) {
    auto server = StartServer(s, scheduler->address(), "server" + std::to_string(s));
    ASSERT_TRUE(server.ok()) << server.status();
    servers.push_back(std::move(server).value());
  }
  // The admin reads the job (Describe); what only a worker may do (Register, Advance, Rejoin) the test does as
  // that worker, with its certificate.
  auto admin = SchedulerClientAs(scheduler->address(), "admin", 0);
  std::vector<std::unique_ptr<SchedulerClient>> as_worker;
  for (int w = 0; w < kWorkers; ++w) as_worker.push_back(SchedulerClientAs(scheduler->address(), "worker", w));

  std::atomic<int> errors{0}, violations{0}, pauses_not_held{0};
  std::atomic<int64_t> paused_clock{-1}, max_start_during_pause{-1};
  std::vector<std::string> incarnations(kWorkers);  // each written by its worker's thread before the join
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      auto client = SchedulerClientAs(scheduler->address(), "worker", w);
      auto reg = client->Register(ROLE_WORKER, "", w);
      if (!reg.ok()) {
        ++errors;
        return;
      }
      incarnations[w] = reg->incarnation();
      Heartbeater heartbeat(client.get(), ROLE_WORKER, reg->rank(), reg->incarnation(), kInterval / 2,
                            [&](absl::Status) { ++errors; });
      // Wait for the servers to be in the view, then use them for real traffic.
      DescribeResponse view = DescribeUntil(*client, [](const DescribeResponse& d) {
        return d.view().job_state() == "running";
      });
      auto ps = PsClientAs(w, {view.view().server_addresses(0), view.view().server_addresses(1)});
      ps->SetGeneration(reg->generation());  // the generation this worker's requests carry
      TableConfig table;
      table.set_name("emb");
      table.set_dim(4);
      if (!ps->CreateTable(table).ok()) ++errors;
      int64_t pushed = 0;  // pulls carry the clock of this worker's last push (0 before the first)
      for (int64_t c = 0; c < kIterations; ++c) {
        auto min_clock = client->WaitToStart(w, c, reg->generation(), reg->incarnation());
        if (!min_clock.ok()) {
          ++errors;
          return;
        }
        if (c - *min_clock > kStaleness) ++violations;  // ran too far ahead
        if (w != 2 && paused_clock.load() >= 0) {
          int64_t seen = max_start_during_pause.load();
          while (c > seen && !max_start_during_pause.compare_exchange_weak(seen, c)) {
          }
        }
        std::vector<uint64_t> keys = {Partition::FeatureKey(w), Partition::FeatureKey(100 + c)};
        std::vector<float> rows(keys.size() * 4);
        if (!ps->Pull("emb", keys, 4, rows.data(), CallClock{pushed}).ok()) ++errors;
        std::vector<float> grads(rows.size(), 0.1f);
        pushed = c;
        if (!ps->Push("emb", keys, 4, grads.data(), CallClock{c}).ok()) ++errors;
        if (w == 2 && c == 4) {  // worker 2 pauses after finishing iteration 4's work...
          paused_clock = c;
          // ...until the scheduler holds both others' requests to start iteration 4 + kStaleness + 1, the first
          // one the bound forbids them while this worker sits at 4: only then has the pause tested the bound.
          bool held = false;
          for (absl::Time give_up = absl::Now() + absl::Seconds(60); !held && absl::Now() < give_up;) {
            const absl::StatusOr<double> waiting = WaitingRequests(*metrics_port);
            held = waiting.ok() && *waiting == kWorkers - 1;
            if (!held) absl::SleepFor(absl::Milliseconds(20));
          }
          if (!held) ++pauses_not_held;
          paused_clock = -1;
        }
        if (!client->Advance(w, c + 1, reg->generation(), reg->incarnation()).ok()) ++errors;
      }
    });
  }
  for (auto& t : workers) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(violations.load(), 0) << "a worker started more than " << kStaleness << " iteration(s) ahead";
  // While worker 2 sat at clock 4 (4 iterations finished), the others could start at most iteration 4 + 1.
  EXPECT_LE(max_start_during_pause.load(), 4 + kStaleness);
  EXPECT_EQ(pauses_not_held.load(), 0) << "the scheduler never held the others while worker 2 paused";
  DescribeResponse done = *admin->Describe();
  EXPECT_EQ(done.min_clock(), kIterations) << "everyone finished after the pause";

  // The other workers' deaths do not disturb a worker: once they are declared dead, worker 1 (not replaced)
  // still pushes to server 0 at the generation it registered at. (After a server's death the job rolls back,
  // which moves every worker's generation: that is checked below.)
  DescribeUntil(*admin, [](const DescribeResponse& d) {
    for (const MemberStatus& m : d.members()) {
      if (m.role() == ROLE_WORKER && m.rank() != 1 && m.alive()) return false;
    }
    return true;
  });
  {
    const std::vector<uint64_t> key = {5};  // owned by server 0
    const std::vector<float> grad(4, 1.0f);
    auto w1 = PsClientAs(1, {servers[0].address(), "127.0.0.1:1"});
    w1->SetGeneration(1);
    const absl::Status pushed = w1->Push("emb", key, 4, grad.data());
    EXPECT_TRUE(pushed.ok()) << pushed;
  }

  // kill -9 of a server: declared dead, generation moves on, old-generation requests are refused.
  const uint64_t old_generation = done.view().generation();
  const absl::Time killed = absl::Now();
  ASSERT_TRUE(servers[1].Stop(SIGKILL).ok());
  DescribeResponse after = DescribeUntil(*admin, [](const DescribeResponse& d) { return !ServerAlive(d, 1); });
  const absl::Duration detection = absl::Now() - killed;
  EXPECT_FALSE(ServerAlive(after, 1));
  // Generous wall-clock bound for a loaded machine; the strict 2-interval bound is unit-tested.
  EXPECT_LE(detection, 2 * kInterval + absl::Seconds(2)) << "detected after " << detection;
  RecordProperty("death_detection_ms", absl::StrCat(absl::ToInt64Milliseconds(detection)));
  EXPECT_GT(after.view().generation(), old_generation);
  EXPECT_EQ(after.view().job_state(), "recovering");
  // The worker threads have ended too: once they are declared dead, their requests are refused.
  DescribeUntil(*admin, [](const DescribeResponse& d) {
    for (const MemberStatus& m : d.members()) {
      if (m.role() == ROLE_WORKER && m.alive()) return false;
    }
    return true;
  });
  auto stale = as_worker[0]->Advance(0, kIterations, old_generation, incarnations[0]);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition) << stale.status();
  const std::vector<uint64_t> key = {5};  // owned by server 0
  const std::vector<float> grad(4, 1.0f);
  // Worker 0 is replaced; the surviving server learns it from its heartbeats and refuses the old incarnation.
  auto replacement_worker = as_worker[0]->Register(ROLE_WORKER, "", 0);
  ASSERT_TRUE(replacement_worker.ok()) << replacement_worker.status();
  EXPECT_EQ(replacement_worker->clock(), kIterations) << "a replacement continues from its rank's clock";
  auto zombie = PsClientAs(0, {servers[0].address(), "127.0.0.1:1"});
  zombie->SetGeneration(1);  // it registered at generation 1
  absl::Status refused;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    refused = zombie->Push("emb", key, 4, grad.data());
    if (!refused.ok()) break;
    absl::SleepFor(absl::Milliseconds(50));  // the server has not heard the new generation yet
  } while (absl::Now() < deadline);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;

  // A replacement server takes rank 1 (the workers have ended, so the job itself stays recovering).
  auto replacement = StartServer(1, scheduler->address(), "server1b");
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  DescribeResponse healed = DescribeUntil(*admin, [](const DescribeResponse& d) { return ServerAlive(d, 1); });
  EXPECT_TRUE(ServerAlive(healed, 1));
  EXPECT_GT(healed.view().generation(), after.view().generation());

  // The worker threads have ended (declared dead), so replacements of ranks 1 and 2 join like rank 0's did and
  // every rank reports its last iteration: the job is finished.
  std::vector<std::string> replacements = {replacement_worker->incarnation()};
  for (int w = 1; w < kWorkers; ++w) {
    auto r = as_worker[w]->Register(ROLE_WORKER, "", w);
    ASSERT_TRUE(r.ok()) << r.status();
    replacements.push_back(r->incarnation());
  }
  // Where each rank is now: once the job runs again, the rollback has reset the clocks to its checkpoint.
  std::vector<int64_t> clocks(kWorkers, 0);
  const uint64_t rollbacks_before = done.rollbacks();
  const DescribeResponse now = DescribeUntil(*admin, [&](const DescribeResponse& d) {
    return d.rollbacks() > rollbacks_before && d.view().job_state() == "running";
  });
  ASSERT_GT(now.rollbacks(), rollbacks_before);
  ASSERT_EQ(now.view().job_state(), "running");
  for (const MemberStatus& m : now.members()) {
    if (m.role() == ROLE_WORKER && m.rank() >= 0 && m.rank() < kWorkers) clocks[m.rank()] = m.clock();
  }
  // The generation each rank's requests carry now (the rollback moved them): what a rejoin answers.
  std::vector<uint64_t> generations;
  for (int w = 0; w < kWorkers; ++w) {
    auto rejoined = as_worker[w]->Rejoin(w, replacements[w]);
    ASSERT_TRUE(rejoined.ok()) << rejoined.status();
    generations.push_back(rejoined->generation());
  }
  for (int w = 0; w < kWorkers; ++w) {  // one iteration at a time, as workers report them; done with the last
    for (int64_t c = std::min<int64_t>(clocks[w] + 1, kIterations); c <= kIterations; ++c) {
      auto status = as_worker[w]->Advance(w, c, generations[w], replacements[w], /*done=*/c == kIterations).status();
      EXPECT_TRUE(status.ok()) << status;
    }
  }
  EXPECT_EQ(admin->Describe()->view().job_state(), "finished");

  // Clean shutdown.
  for (ServerProcess* p : {&servers[0], &*replacement, &*scheduler}) {
    auto code = p->Stop(SIGTERM);
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0) << "see " << p->log_path();
  }
}

}  // namespace
}  // namespace kestrel
