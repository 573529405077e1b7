// Replication under SSP and ASP with real processes (docs/replication.md): a kestrel_scheduler, three
// kestrel_server processes with --replicas=2, and this test as the job's only worker. It pushes a gradient
// of 1 to the same keys again and again while one server (chosen at random) is killed with SIGKILL part way,
// and counts the pushes acknowledged. Every acknowledged push must be applied exactly once on the survivors:
// each key's value (SGD, learning rate 1, zero-initialized) is minus the number of acknowledged pushes, and
// both copies of every range still fully in service hold the same rows. The scheduler's records show the
// failover and no rollback. Unlike BSP (tests/recovery_test.cc), copies may apply concurrent pushes in
// different orders; here pushes are sequential, so the copies must also be identical. The victim and the push it
// dies before come from the test's seed, printed as "seed=N (replay: KESTREL_TEST_SEED=N)" (common/test_seed.h).
#include <csignal>
#include <filesystem>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "client/grpc_scheduler_client.h"
#include "client/heartbeater.h"
#include "client/routing_announcement.h"
#include "client/scheduler_client.h"
#include "tests/server_process.h"
#include "common/test_seed.h"
#include "worker/grpc_ps_client.h"

namespace kestrel {
namespace {

constexpr int kServers = 3;
constexpr int kDim = 4;
constexpr int kPushes = 60;
constexpr char kJob[] = "repl";

std::string TmpDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

TableConfig Table() {
  TableConfig c;
  c.set_name("emb");
  c.set_dim(kDim);
  c.mutable_initializer()->set_type(InitializerConfig::ZEROS);
  c.mutable_optimizer()->set_type(OptimizerConfig::SGD);
  c.mutable_optimizer()->set_learning_rate(1.0f);
  return c;
}

// The fingerprint of `owner`'s range group as server `address` holds it.
absl::StatusOr<uint64_t> GroupFingerprint(const std::string& address, int owner) {
  auto stub = ParameterServer::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  StatsRequest request;
  request.mutable_header()->set_job_id(kJob);
  request.mutable_header()->set_worker_rank(-1);
  request.mutable_header()->set_owner(owner);
  request.set_fingerprints(true);
  StatsResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Status status = stub->Stats(&context, request, &response);
  if (!status.ok()) return absl::UnavailableError(status.error_message());
  uint64_t sum = 0;
  for (const TableDescription& t : response.tables()) sum += t.fingerprint();
  return sum;
}

class ReplicationTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReplicationTest, KilledServerLosesNoAcknowledgedPush) {
  const std::string consistency = GetParam();
  const std::string dir = absl::StrCat(TmpDir(), "/replication_", consistency);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto scheduler = ServerProcess::Start(
      RunfilePath("scheduler/kestrel_scheduler"),
      {absl::StrCat("--job_id=", kJob), absl::StrCat("--num_servers=", kServers), "--num_workers=1",
       "--consistency=" + consistency, "--replicas=2", "--heartbeat_interval=300ms"},
      dir, "scheduler");
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  std::vector<std::optional<ServerProcess>> servers(kServers);
  for (int s = 0; s < kServers; ++s) {
    auto p = ServerProcess::Start(RunfilePath("server/kestrel_server"),
                                  {absl::StrCat("--job_id=", kJob), absl::StrCat("--num_servers=", kServers),
                                   absl::StrCat("--rank=", s), "--replicas=2",
                                   "--scheduler=" + scheduler->address()},
                                  dir, absl::StrCat("server", s));
    ASSERT_TRUE(p.ok()) << p.status();
    servers[s].emplace(std::move(p).value());
  }

  // This test is the job's worker: registered, heartbeating, routing by the scheduler's announcements.
  SchedulerClientOptions scheduler_options;
  scheduler_options.job_id = kJob;
  std::unique_ptr<SchedulerClient> client = NewGrpcSchedulerClient(scheduler->address(), scheduler_options, nullptr);
  absl::StatusOr<RegisterResponse> reg = client->Register(ROLE_WORKER, "", 0);
  ASSERT_TRUE(reg.ok()) << reg.status();
  absl::StatusOr<DescribeResponse> view;
  for (absl::Time give_up = absl::Now() + absl::Seconds(20); absl::Now() < give_up;) {
    view = client->Describe();
    if (view.ok() && view->view().job_state() == "running") break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(view.ok() && view->view().job_state() == "running");
  const Partition partition = *Partition::Parse(view->view().partition());
  ASSERT_EQ(partition.replicas(), 2);
  auto routing = std::make_shared<RoutingTable>(partition);
  Heartbeater heartbeater(client.get(), ROLE_WORKER, 0, reg->incarnation(), absl::Milliseconds(150),
                          [](absl::Status s) { ADD_FAILURE() << "refused: " << s; },
                          [routing](const HeartbeatResponse& answer) {
                            ApplyRouting(*routing, answer.routing_generation(), answer.out_of_service());
                          });
  PsClientOptions options;
  options.job_id = kJob;
  options.worker_rank = 0;
  options.routing = routing;
  options.max_request_bytes = 1024;  // several requests per range group
  std::vector<std::string> addresses(view->view().server_addresses().begin(), view->view().server_addresses().end());
  std::unique_ptr<PsClient> ps = *NewGrpcPsClient(options, partition, addresses);
  ps->SetGeneration(reg->generation());
  ASSERT_TRUE(ps->CreateTable(Table()).ok());

  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < 500; ++i) keys.push_back(Partition::FeatureKey(i));
  const std::vector<float> grads(keys.size() * kDim, 1.0f);
  const TestSeed seed;
  std::mt19937 rng(seed.value());
  const int victim = std::uniform_int_distribution<int>(0, kServers - 1)(rng);
  const int kill_at = std::uniform_int_distribution<int>(5, kPushes - 20)(rng);
  int acknowledged = 0, failed = 0;
  for (int i = 0; i < kPushes; ++i) {
    if (i == kill_at) {
      (void)servers[victim]->Stop(SIGKILL);
      servers[victim].reset();
    }
    absl::Status pushed = ps->Push("emb", keys, kDim, grads.data());
    pushed.ok() ? ++acknowledged : ++failed;
    if (!pushed.ok()) ADD_FAILURE() << "push " << i << ": " << pushed;
  }
  const std::string what = absl::StrCat(consistency, ": server ", victim, " killed before push ", kill_at);
  EXPECT_EQ(acknowledged, kPushes) << what << ": every push is acknowledged once the range fails over";

  // Every acknowledged push applied exactly once, read from the survivors.
  std::vector<float> rows(keys.size() * kDim);
  ASSERT_TRUE(ps->Pull("emb", keys, kDim, rows.data()).ok());
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i], -static_cast<float>(acknowledged)) << what << ": key " << i / kDim;
  }
  // The range group whose copies both survived: identical on both.
  absl::StatusOr<DescribeResponse> after = client->Describe();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->failovers(), 1u) << what;
  EXPECT_EQ(after->rollbacks(), 0u) << what;
  int compared = 0;
  for (int owner = 0; owner < kServers; ++owner) {
    const int backup = partition.ReplicaOfOwner(owner, 1);
    if (owner == victim || backup == victim) continue;
    absl::StatusOr<uint64_t> a = GroupFingerprint(addresses[owner], owner);
    absl::StatusOr<uint64_t> b = GroupFingerprint(addresses[backup], owner);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(*a, *b) << what << ": the two copies of server " << owner << "'s ranges differ";
    ++compared;
  }
  EXPECT_EQ(compared, 1);
}

INSTANTIATE_TEST_SUITE_P(SspAndAsp, ReplicationTest, ::testing::Values("ssp", "asp"));

}  // namespace
}  // namespace kestrel
