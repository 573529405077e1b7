// Kestrel's processes over mutual TLS: a scheduler, two servers and two workers train a job with certificates
// of one CA; the servers refuse clients without a certificate of that CA; a listener on a non-loopback address
// without TLS is refused unless --insecure.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing_certs.h"
#include "common/tls.h"
#include "gtest/gtest.h"
#include "tests/records.h"
#include "tests/server_process.h"
#include "worker/data/datagen.h"
#include "worker/grpc_ps_client.h"
#include "proto/ps.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace kestrel {
namespace {

std::string TmpDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(TlsClusterTest, AJobTrainsOverMutualTlsAndStrangersAreRefused) {
  const std::string dir = TmpDir() + "/tls_cluster";
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(GenerateCriteoData(SmallDatagenOptions(), dir).ok());
  absl::StatusOr<TestingCa> ca = TestingCa::Create(dir + "/certs", "job-ca");
  ASSERT_TRUE(ca.ok()) << ca.status();
  absl::StatusOr<TestingCa> other_ca = TestingCa::Create(dir + "/certs", "other-ca");
  ASSERT_TRUE(other_ca.ok()) << other_ca.status();

  const std::string config = dir + "/job.pbtxt";
  std::ofstream(config) << "model { type: LOGISTIC_REGRESSION }\n"
                        << "data { format: CRITEO train_files: '" << dir << "/train.tsv' test_files: '" << dir
                        << "/test.tsv' }\n"
                        << "train { batch_size: 256 epochs: 1 log_every_steps: 100 }\n";
  absl::StatusOr<TlsConfig> scheduler_tls = ca->Issue("tls", "scheduler", 0);
  ASSERT_TRUE(scheduler_tls.ok()) << scheduler_tls.status();
  auto scheduler = ServerProcess::Start(
      RunfilePath("scheduler/kestrel_scheduler"),
      Concat({"--job_id=tls", "--num_servers=2", "--num_workers=2", "--consistency=bsp", "--heartbeat_interval=1s"},
             TestingCa::Flags(*scheduler_tls)),
      dir, "scheduler");
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  std::vector<ServerProcess> servers;
  std::vector<std::string> addresses;
  for (int s = 0; s < 2; ++s) {
    absl::StatusOr<TlsConfig> tls = ca->Issue("tls", "server", s);
    ASSERT_TRUE(tls.ok()) << tls.status();
    auto server = ServerProcess::Start(
        RunfilePath("server/kestrel_server"),
        Concat({"--job_id=tls", "--num_servers=2", absl::StrCat("--rank=", s), "--bsp_workers=2",
                "--scheduler=" + scheduler->address()},
               TestingCa::Flags(*tls)),
        dir, absl::StrCat("server", s));
    ASSERT_TRUE(server.ok()) << server.status();
    EXPECT_NE(ReadFile(server->log_path()).find("mutual TLS"), std::string::npos);
    addresses.push_back(server->address());
    servers.push_back(std::move(server).value());
  }
  std::vector<ServerProcess> workers;
  for (int w = 0; w < 2; ++w) {
    absl::StatusOr<TlsConfig> tls = ca->Issue("tls", "worker", w);
    ASSERT_TRUE(tls.ok()) << tls.status();
    auto worker = ServerProcess::Spawn(
        RunfilePath("cmd/kestrel_worker"),
        Concat({"--job_id=tls", "--config=" + config, "--scheduler=" + scheduler->address(),
                absl::StrCat("--rank=", w), "--device=cpu", "--compute_threads=1",
                "--metrics_out=" + dir + "/metrics.jsonl", "--metrics_append"},
               TestingCa::Flags(*tls)),
        dir, absl::StrCat("worker", w));
    ASSERT_TRUE(worker.ok()) << worker.status();
    workers.push_back(std::move(worker).value());
  }
  for (int w = 0; w < 2; ++w) {
    absl::StatusOr<int> code = workers[w].Wait(absl::Minutes(4));
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0) << ReadFile(workers[w].log_path());
  }
  absl::StatusOr<Record> eval = LastRecord(dir + "/metrics.jsonl", "eval");
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_GT(eval->auc(), 0.7);

  // Two more servers of the job (no scheduler, no BSP): only a worker of this job, under its own rank, may move
  // rows; only the scheduler may restore; nobody without a certificate of the job's CA gets in.
  addresses.clear();
  for (int s = 0; s < 2; ++s) {
    absl::StatusOr<TlsConfig> tls = ca->Issue("tls", "server", s);
    ASSERT_TRUE(tls.ok()) << tls.status();
    auto server = ServerProcess::Start(
        RunfilePath("server/kestrel_server"),
        Concat({"--job_id=tls", "--num_servers=2", absl::StrCat("--rank=", s)}, TestingCa::Flags(*tls)), dir,
        absl::StrCat("probe", s));
    ASSERT_TRUE(server.ok()) << server.status();
    addresses.push_back(server->address());
    servers.push_back(std::move(server).value());
  }
  TableConfig table;
  table.set_name("probe");
  table.set_kind(TableConfig::SPARSE);
  table.set_dim(1);
  auto client = [&](const absl::StatusOr<TlsConfig>& tls, int rank) {
    EXPECT_TRUE(tls.ok()) << tls.status();
    PsClientOptions options;
    options.job_id = "tls";
    options.worker_rank = rank;
    options.rpc_deadline = absl::Seconds(3);
    return *NewGrpcPsClient(options, *Partition::Uniform(2), addresses, *MakeChannelCredentials(*tls));
  };
  const uint64_t key = 42;
  const float grad = 1.0f;
  float row = 0;
  absl::Status status = client(ca->Issue("tls", "worker", 1), 1)->CreateTable(table);
  EXPECT_TRUE(status.ok()) << status;
  status = client(ca->Issue("tls", "worker", 1), 1)->Push("probe", {&key, 1}, 1, &grad);
  EXPECT_TRUE(status.ok()) << status;
  status = client(ca->Issue("tls", "worker", 1), 0)->Push("probe", {&key, 1}, 1, &grad);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  status = client(ca->Issue("tls", "admin", 0), -1)->Pull("probe", {&key, 1}, 1, &row);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  status = client(ca->Issue("other-job", "worker", 1), 1)->Pull("probe", {&key, 1}, 1, &row);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_EQ(status.message().find("other-job"), std::string::npos) << status;
  status = client(other_ca->Issue("tls", "worker", 1), 1)->Pull("probe", {&key, 1}, 1, &row);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  {
    PsClientOptions options;
    options.job_id = "tls";
    options.rpc_deadline = absl::Seconds(3);
    status = (*NewGrpcPsClient(options, *Partition::Uniform(2), addresses, grpc::InsecureChannelCredentials()))
                 ->Pull("probe", {&key, 1}, 1, &row);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  }
  // A worker asking a server to restore (wipe) its shard.
  absl::StatusOr<TlsConfig> worker_tls = ca->Issue("tls", "worker", 0);
  ASSERT_TRUE(worker_tls.ok());
  auto stub = ParameterServer::NewStub(grpc::CreateChannel(addresses[0], *MakeChannelCredentials(*worker_tls)));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  RestoreShardRequest restore;
  restore.mutable_header()->set_job_id("tls");
  RestoreShardResponse restored;
  const grpc::Status refused = stub->Restore(&context, restore, &restored);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED) << refused.error_message();
  EXPECT_EQ(refused.error_message(), "a worker may not call Restore");
  // The scheduler's certificate may restore, but not to a generation ahead of the job: that would lock every
  // worker out until the server restarts. Refused before anything is wiped.
  {
    absl::StatusOr<TlsConfig> scheduler_tls = ca->Issue("tls", "scheduler", 0);
    ASSERT_TRUE(scheduler_tls.ok());
    auto admin = ParameterServer::NewStub(grpc::CreateChannel(addresses[0], *MakeChannelCredentials(*scheduler_tls)));
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    restore.set_min_worker_generation(~uint64_t{0});
    const grpc::Status ahead = admin->Restore(&c, restore, &restored);
    EXPECT_EQ(ahead.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << ahead.error_message();
    EXPECT_NE(ahead.error_message().find("ahead of the job's generation"), std::string::npos)
        << ahead.error_message();
  }
  // Stats: counts for a worker, fingerprints (every row read) for an admin only.
  {
    absl::StatusOr<TlsConfig> admin_tls = ca->Issue("tls", "admin", 0);
    ASSERT_TRUE(admin_tls.ok());
    for (const auto& [tls, allowed] : std::vector<std::pair<TlsConfig, bool>>{{*worker_tls, false},
                                                                               {*admin_tls, true}}) {
      auto stats_stub = ParameterServer::NewStub(grpc::CreateChannel(addresses[0], *MakeChannelCredentials(tls)));
      grpc::ClientContext c;
      c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      StatsRequest stats;
      stats.mutable_header()->set_job_id("tls");
      stats.set_fingerprints(true);
      StatsResponse answer;
      const grpc::Status got = stats_stub->Stats(&c, stats, &answer);
      EXPECT_EQ(got.ok(), allowed) << got.error_message();
      if (!allowed) { EXPECT_EQ(got.error_code(), grpc::StatusCode::PERMISSION_DENIED); }
    }
  }
  // The row the worker pushed is still there (the refused calls changed nothing).
  EXPECT_TRUE(client(ca->Issue("tls", "worker", 1), 1)->Pull("probe", {&key, 1}, 1, &row).ok());
  EXPECT_NE(row, 0.0f);
}

TEST(TlsClusterTest, PlaintextOnANonLoopbackAddressNeedsInsecure) {
  const std::string dir = TmpDir() + "/tls_refusal";
  std::filesystem::create_directories(dir);
  auto refused = ServerProcess::Spawn(RunfilePath("server/kestrel_server"),
                                      {"--job_id=x", "--host=0.0.0.0", "--port=0"}, dir, "refused");
  ASSERT_TRUE(refused.ok()) << refused.status();
  absl::StatusOr<int> code = refused->Wait(absl::Seconds(20));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 2);
  const std::string log = ReadFile(refused->log_path());
  EXPECT_NE(log.find("refusing to listen on 0.0.0.0:0 without TLS"), std::string::npos) << log;
  EXPECT_NE(log.find("--insecure"), std::string::npos) << log;

  auto allowed = ServerProcess::Spawn(RunfilePath("server/kestrel_server"),
                                      {"--job_id=x", "--host=0.0.0.0", "--port=0", "--insecure",
                                       "--port_file=" + dir + "/allowed.port"},
                                      dir, "allowed");
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  const absl::StatusOr<int> listening = ReadPortFile(dir + "/allowed.port");
  EXPECT_TRUE(listening.ok()) << listening.status() << "\n" << ReadFile(allowed->log_path());
}

}  // namespace
}  // namespace kestrel
