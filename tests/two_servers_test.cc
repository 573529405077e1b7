// Two real kestrel_server processes on loopback, driven through the gRPC API across both key ranges, over
// mutual TLS (tests/test_cluster_tls.h): the test's clients present worker 0's certificate, and an admin's
// where they read fingerprints.
#include <signal.h>

#include <map>
#include <random>

#include "common/test_seed.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/health.grpc.pb.h"
#include "proto/ps.grpc.pb.h"
#include "tests/server_process.h"
#include "tests/test_cluster_tls.h"
#include "worker/grpc_ps_client.h"

namespace kestrel {
namespace {

using ::testing::HasSubstr;

class TwoServersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string binary = RunfilePath("server/kestrel_server");
    const char* tmp = std::getenv("TEST_TMPDIR");
    const std::string dir = tmp != nullptr ? tmp : "/tmp";
    for (int s = 0; s < 2; ++s) {
      auto args = TestClusterTls::Get().WithFlags(
          {"--job_id=it", "--num_servers=2", "--rank=" + std::to_string(s)}, "it", "server", s);
      ASSERT_TRUE(args.ok()) << args.status();
      auto p = ServerProcess::Start(binary, *args, dir, "server" + std::to_string(s));
      ASSERT_TRUE(p.ok()) << p.status();
      addresses_.push_back(p->address());
      servers_.push_back(std::move(p).value());
    }
    auto worker = TestClusterTls::Get().Credentials("it", "worker", 0);
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_ = *worker;
    auto admin = TestClusterTls::Get().Credentials("it", "admin", 0);
    ASSERT_TRUE(admin.ok()) << admin.status();
    admin_ = *admin;
    PsClientOptions options;
    options.job_id = "it";
    options.worker_rank = 0;  // the rank of its certificate (a worker's rows may only move under its own rank)
    options.max_request_bytes = 64 << 10;
    auto client = NewGrpcPsClient(options, *Partition::Uniform(2), addresses_, worker_);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(client).value();
  }

  std::vector<ServerProcess> servers_;
  std::vector<std::string> addresses_;
  std::unique_ptr<PsClient> client_;
  std::shared_ptr<grpc::ChannelCredentials> worker_;  // worker 0's certificate
  std::shared_ptr<grpc::ChannelCredentials> admin_;   // an admin's: may read fingerprints
};

TEST_F(TwoServersTest, PullPushAcrossBothRanges) {
  for (const std::string& address : addresses_) {
    auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(address, worker_));
    for (const char* service : {"", "kestrel.ParameterServer"}) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      grpc::health::v1::HealthCheckRequest request;
      request.set_service(service);
      grpc::health::v1::HealthCheckResponse response;
      ASSERT_TRUE(stub->Check(&ctx, request, &response).ok()) << address;
      EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
    }
  }

  TableConfig config;
  config.set_name("emb");
  config.set_dim(16);
  config.set_seed(11);
  config.mutable_initializer()->set_type(InitializerConfig::UNIFORM);
  config.mutable_optimizer()->set_type(OptimizerConfig::ADAGRAD);
  config.mutable_optimizer()->set_learning_rate(0.1f);
  ASSERT_TRUE(client_->CreateTable(config).ok());

  const TestSeed seed(7);
  std::mt19937_64 rng(seed.value());
  std::vector<uint64_t> keys(20000);
  for (auto& k : keys) k = Partition::FeatureKey(rng() % 5000);
  std::vector<float> initial(keys.size() * 16);
  ASSERT_TRUE(client_->Pull("emb", keys, 16, initial.data()).ok());
  // The same key pulled twice in a batch gets the same row.
  std::map<uint64_t, size_t> first;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto [it, fresh] = first.emplace(keys[i], i);
    if (!fresh) {
      ASSERT_EQ(0, std::memcmp(&initial[i * 16], &initial[it->second * 16], 16 * sizeof(float)));
    }
  }
  std::vector<float> grads(keys.size() * 16, 0.25f);
  ASSERT_TRUE(client_->Push("emb", keys, 16, grads.data()).ok());
  std::vector<float> after(keys.size() * 16);
  ASSERT_TRUE(client_->Pull("emb", keys, 16, after.data()).ok());
  for (size_t i = 0; i < after.size(); ++i) ASSERT_LT(after[i], initial[i]) << "every row moved against +grad";

  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->size(), 2u);
  EXPECT_GT((*stats)[0].rows(), 1000u);
  EXPECT_GT((*stats)[1].rows(), 1000u);
  EXPECT_EQ((*stats)[0].rows() + (*stats)[1].rows(), first.size());

  // A key sent to the wrong server is refused with the owner named.
  auto stub = ParameterServer::NewStub(grpc::CreateChannel(addresses_[0], worker_));  // requests claim rank 0
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  PullRequest request;
  request.mutable_header()->set_job_id("it");
  request.set_table("emb");
  const uint64_t foreign = 0xf000000000000000ULL;
  request.set_keys(std::string(reinterpret_cast<const char*>(&foreign), sizeof(foreign)));
  PullResponse response;
  grpc::Status status = stub->Pull(&ctx, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("belongs to shard 1"));

  // Malformed part/parts are refused on a server without BSP too, and change nothing.
  auto admin = ParameterServer::NewStub(grpc::CreateChannel(addresses_[0], admin_));
  auto fingerprint = [&]() -> uint64_t {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    StatsRequest stats_request;
    stats_request.mutable_header()->set_job_id("it");
    stats_request.set_fingerprints(true);
    StatsResponse stats_response;
    EXPECT_TRUE(admin->Stats(&c, stats_request, &stats_response).ok());
    uint64_t f = 0;
    for (const TableDescription& t : stats_response.tables()) f ^= t.fingerprint() * 31 + t.rows();
    return f;
  };
  const uint64_t before = fingerprint();
  const uint64_t own = 1;  // in server 0's half of the key space
  const std::vector<float> grad(16, 1.0f);
  for (const auto& [part, parts] : std::vector<std::pair<int, int>>{{5, 2}, {1, 1}, {-1, 2}, {0, -3},
                                                                    {0, 1025}, {0, 2000000000}}) {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    PushRequest push;
    push.mutable_header()->set_job_id("it");
    push.set_table("emb");
    push.set_dim(16);
    push.set_keys(std::string(reinterpret_cast<const char*>(&own), sizeof(own)));
    push.set_values(std::string(reinterpret_cast<const char*>(grad.data()), grad.size() * sizeof(float)));
    push.set_part(part);
    push.set_parts(parts);
    PushResponse pushed;
    const grpc::Status refused = stub->Push(&c, push, &pushed);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << part << " of " << parts;
    EXPECT_THAT(refused.error_message(), HasSubstr("a part is in [0, parts)"));
  }
  EXPECT_EQ(fingerprint(), before);

  // Clean shutdown on SIGTERM.
  for (auto& server : servers_) {
    auto code = server.Stop(SIGTERM);
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0) << "see " << server.log_path();
  }
}

}  // namespace
}  // namespace kestrel
