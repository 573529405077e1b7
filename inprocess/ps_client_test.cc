// PsClient routing, splitting, scattering and error reporting, over the in-process transport and over real
// gRPC servers (PsServer on loopback), with the same expectations.
#include "worker/ps_client.h"

#include <algorithm>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/half.h"
#include "common/metrics.h"
#include "common/hash.h"
#include "server/ps_server.h"
#include "server/shard.h"
#include "server/tables_testing.h"
#include "worker/grpc_ps_client.h"
#include "inprocess/local_ps_client.h"

namespace kestrel {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kServers = 3;

enum class Transport { kLocal, kGrpc };

class PsClientTest : public ::testing::TestWithParam<Transport> {
 protected:
  void SetUp() override {
    partition_ = std::make_unique<Partition>(*Partition::Uniform(kServers, /*ranges_per_server=*/2));
    std::vector<Shard*> shards;
    std::vector<std::string> addresses;
    for (int s = 0; s < kServers; ++s) {
      ShardOptions options;
      options.job_id = "job";
      options.owner = s;
      shards_.push_back(*Shard::Create(options, *partition_));
      shards.push_back(shards_.back().get());
      if (GetParam() == Transport::kGrpc) {
        PsServerOptions server_options;
        server_options.address = "127.0.0.1:0";
        server_options.threads = 2;
        server_options.max_message_bytes = 1 << 20;  // 1 MiB: the oversize test relies on it
        auto server = PsServer::Start(server_options, shards.back());
        ASSERT_TRUE(server.ok()) << server.status();
        addresses.push_back("127.0.0.1:" + std::to_string((*server)->port()));
        servers_.push_back(std::move(server).value());
      }
    }
    options_.job_id = "job";
    options_.max_request_bytes = 4096;  // small: forces many requests per server
    if (GetParam() == Transport::kGrpc) {
      auto client = NewGrpcPsClient(options_, *partition_, addresses);
      ASSERT_TRUE(client.ok()) << client.status();
      client_ = std::move(client).value();
      addresses_ = addresses;
    } else {
      client_ = NewLocalPsClient(options_, shards);
    }
    ASSERT_TRUE(client_->CreateTable(ZeroSgdTable("emb", 8)).ok());
  }

  uint64_t Fingerprint() const {
    uint64_t h = 0;
    for (const auto& s : shards_) h = HashCombine(h, s->Fingerprint());
    return h;
  }

  std::unique_ptr<Partition> partition_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<std::unique_ptr<PsServer>> servers_;
  std::vector<std::string> addresses_;
  PsClientOptions options_;
  std::unique_ptr<PsClient> client_;
};

TEST_P(PsClientTest, PushSumsDuplicatesAndPullScattersBack) {
  std::mt19937_64 rng(301);
  std::vector<uint64_t> keys(3000);
  for (auto& k : keys) k = Partition::FeatureKey(rng() % 700);  // many duplicates, random order
  std::vector<float> grads(keys.size() * 8);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(i % 5);
  const double pushes_before = RpcsSentCounter("server", "Push").Value();
  // A pull first: the client reuses its per-call buffers, and the push must not inherit anything from it.
  std::vector<float> zeros(keys.size() * 8, -1.0f);
  ASSERT_TRUE(client_->Pull("emb", keys, 8, zeros.data()).ok());
  for (float v : zeros) ASSERT_EQ(v, 0.0f);
  ASSERT_TRUE(client_->Push("emb", keys, 8, grads.data()).ok());

  std::map<uint64_t, std::vector<float>> expected;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto& row = expected[keys[i]];
    row.resize(8, 0.0f);
    for (int j = 0; j < 8; ++j) row[j] -= grads[i * 8 + j];
  }
  std::vector<float> out(keys.size() * 8, -1.0f);
  ASSERT_TRUE(client_->Pull("emb", keys, 8, out.data()).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    for (int j = 0; j < 8; ++j) ASSERT_EQ(out[i * 8 + j], expected[keys[i]][j]) << "position " << i;
  }

  // Every server got rows, each server holds only its own keys, and requests were split.
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  uint64_t rows = 0, push_requests = 0;
  for (int s = 0; s < kServers; ++s) {
    EXPECT_GT((*stats)[s].rows(), 0u);
    EXPECT_GT((*stats)[s].push_requests(), 1u) << "4 KiB requests should split each server's share";
    rows += (*stats)[s].rows();
    push_requests += (*stats)[s].push_requests();
  }
  EXPECT_EQ(rows, expected.size());
  // The gRPC transport counts every RPC it starts (kestrel_rpcs_sent_total): as many pushes as the servers saw.
  if (GetParam() == Transport::kGrpc) {
    EXPECT_EQ(RpcsSentCounter("server", "Push").Value() - pushes_before, static_cast<double>(push_requests));
  }
}

// Tables whose values travel as fp16 or bf16: a pushed gradient reaches the server as exactly its wire
// rounding (fp16: scaled by the request's power of two, then back), the server updates fp32, and a pull
// answers exactly the wire rounding of the stored value. Sparse and dense tables alike.
TEST_P(PsClientTest, HalfWireTypesRoundTripAsSpecified) {
  for (ValueType wire : {VALUE_TYPE_FLOAT16, VALUE_TYPE_BFLOAT16}) {
    SCOPED_TRACE(ValueType_Name(wire));
    const std::string name = wire == VALUE_TYPE_FLOAT16 ? "h16" : "b16";
    TableConfig config = ZeroSgdTable(name, 8);
    config.set_wire_type(wire);
    ASSERT_TRUE(client_->CreateTable(config).ok());
    std::vector<uint64_t> keys(500);
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = Partition::FeatureKey(i);
    std::vector<float> grads(keys.size() * 8);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = (static_cast<float>(i) - 1999.5f) / 3.0f;
    grads[11] = 1e-6f;  // small: kept by the fp16 scale (2^-20 would flush it without one)
    ASSERT_TRUE(client_->Push(name, keys, 8, grads.data()).ok());
    std::vector<float> out(grads.size(), 7.0f);
    ASSERT_TRUE(client_->Pull(name, keys, 8, out.data()).ok());
    auto round = [wire](float v) {
      return wire == VALUE_TYPE_FLOAT16 ? HalfToFloat(FloatToHalf(v)) : Bfloat16ToFloat(FloatToBfloat16(v));
    };
    size_t exact_gradients = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      // The stored value is -(the gradient as received); the pull answers its wire rounding.
      ASSERT_EQ(out[i], round(out[i])) << "answered values are representable in the wire type";
      if (i == 11) continue;  // below fp16's normal range both ways: checked apart
      ASSERT_NEAR(out[i], -grads[i], std::fabs(grads[i]) * (wire == VALUE_TYPE_FLOAT16 ? 1e-3 : 8e-3)) << i;
      if (out[i] == -round(grads[i])) ++exact_gradients;
    }
    EXPECT_NEAR(out[11], -1e-6f, 0.05e-6f) << "the small gradient survived (fp16 subnormal steps are 6e-8)";
    EXPECT_GT(exact_gradients, out.size() / 2);
    // Dense: the same through PushDense / PullDense.
    TableConfig dense = ZeroSgdTable(name + "_dense", 16);
    dense.set_kind(TableConfig::DENSE);
    dense.set_dense_size(100);
    dense.set_wire_type(wire);
    ASSERT_TRUE(client_->CreateTable(dense).ok());
    std::vector<float> dense_grads(100);
    for (size_t i = 0; i < dense_grads.size(); ++i) dense_grads[i] = 0.1f * static_cast<float>(i);
    ASSERT_TRUE(client_->PushDense(name + "_dense", dense_grads, {}).ok());
    std::vector<float> dense_out(100, 3.0f);
    ASSERT_TRUE(client_->PullDense(name + "_dense", absl::MakeSpan(dense_out), {}).ok());
    for (size_t i = 0; i < dense_out.size(); ++i) {
      ASSERT_EQ(dense_out[i], round(dense_out[i]));
      ASSERT_NEAR(dense_out[i], -dense_grads[i], 0.1f * i * 8e-3 + 1e-6) << i;
    }
  }
  // A pushed gradient that is not finite is refused before anything is sent, whatever the wire type.
  std::vector<uint64_t> one = {Partition::FeatureKey(1)};
  std::vector<float> inf(8, std::numeric_limits<float>::infinity());
  EXPECT_EQ(client_->Push("h16", one, 8, inf.data()).code(), absl::StatusCode::kInvalidArgument);
}

// A table stored in bf16 with an fp32 wire: gradients travel exact, the server rounds the update once, and pulls
// travel in bf16 (PullWireType: the stored values exactly, half the bytes), answering the stored values.
TEST_P(PsClientTest, CompactStoragePullsTheStoredValuesExactly) {
  TableConfig config = ZeroSgdTable("stored16", 8);
  config.mutable_storage()->set_type(VALUE_TYPE_BFLOAT16);
  EXPECT_EQ(PullWireType(config), VALUE_TYPE_BFLOAT16);
  EXPECT_EQ(PullWireType(ZeroSgdTable("plain", 8)), VALUE_TYPE_FLOAT32);
  ASSERT_TRUE(client_->CreateTable(config).ok());
  std::vector<uint64_t> keys(300);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = Partition::FeatureKey(i);
  std::vector<float> grads(keys.size() * 8);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = (static_cast<float>(i) - 1199.5f) / 7.0f;
  ASSERT_TRUE(client_->Push("stored16", keys, 8, grads.data()).ok());
  std::vector<float> out(grads.size(), 7.0f);
  ASSERT_TRUE(client_->Pull("stored16", keys, 8, out.data()).ok());
  for (size_t i = 0; i < out.size(); ++i) {
    // The table's initializer is ZEROS and SGD's rate 1: the stored value is -g rounded once to bf16.
    ASSERT_EQ(out[i], Bfloat16ToFloat(FloatToBfloat16(-grads[i]))) << i;
  }
}

TEST_P(PsClientTest, DenseTensorRoundTrip) {
  TableConfig dense = ZeroSgdTable("mlp", 16);
  dense.set_kind(TableConfig::DENSE);
  dense.set_dense_size(1000);  // 63 blocks, the last one partly used
  ASSERT_TRUE(client_->CreateTable(dense).ok());
  std::vector<float> grads(1000);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(i);
  ASSERT_TRUE(client_->PushDense("mlp", grads, {}).ok());
  ASSERT_TRUE(client_->PushDense("mlp", grads, {}).ok());
  std::vector<float> out(1000, 1.0f);
  ASSERT_TRUE(client_->PullDense("mlp", absl::MakeSpan(out), {}).ok());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], -2.0f * i) << i;
  // The blocks are spread over the servers.
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok());
  for (int s = 0; s < kServers; ++s) EXPECT_GT((*stats)[s].keys_pushed(), 0u);
  // A client that did not create the table learns its shape from the servers (DescribeTables).
  std::unique_ptr<PsClient> fresh;
  if (GetParam() == Transport::kGrpc) {
    fresh = *NewGrpcPsClient(options_, *partition_, addresses_);
  } else {
    std::vector<Shard*> shards;
    for (auto& shard : shards_) shards.push_back(shard.get());
    fresh = NewLocalPsClient(options_, shards);
  }
  std::vector<float> again(1000, 1.0f);
  ASSERT_TRUE(fresh->PullDense("mlp", absl::MakeSpan(again), {}).ok());
  EXPECT_EQ(again, out);
  EXPECT_EQ(fresh->PullDense("nope", absl::MakeSpan(again), {}).code(), absl::StatusCode::kNotFound);
  // A buffer of the wrong size is refused before anything is sent.
  std::vector<float> wrong(999);
  EXPECT_EQ(client_->PushDense("mlp", wrong, {}).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(PsClientTest, ErrorsNameTheServerAndLeaveStateUnchanged) {
  std::vector<uint64_t> keys = {Partition::FeatureKey(1), Partition::FeatureKey(2), Partition::FeatureKey(3)};
  std::vector<float> grads(keys.size() * 8, 1.0f);
  ASSERT_TRUE(client_->Push("emb", keys, 8, grads.data()).ok());
  const uint64_t before = Fingerprint();

  absl::Status missing = client_->Push("missing", keys, 8, grads.data());
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.message()), HasSubstr("table 'missing' does not exist"));
  EXPECT_THAT(std::string(missing.message()), HasSubstr("server "));

  // A batch over every server with one bad gradient (NaN, or too large) is refused whole: no server applies
  // its share.
  std::vector<uint64_t> many;
  for (uint64_t i = 0; i < 600; ++i) many.push_back(Partition::FeatureKey(1000 + i));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), 3e15f}) {
    std::vector<float> many_grads(many.size() * 8, 1.0f);
    many_grads[many_grads.size() - 3] = bad;
    absl::Status status = client_->Push("emb", many, 8, many_grads.data());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr("bad gradient"));
    EXPECT_THAT(std::string(status.message()), HasSubstr("nothing was sent"));
  }
  // Finite duplicates that sum past the limit are refused too.
  std::vector<uint64_t> twice = {keys[0], keys[0]};
  std::vector<float> huge(16, 9e14f);
  EXPECT_EQ(client_->Push("emb", twice, 8, huge.data()).code(), absl::StatusCode::kInvalidArgument);

  std::vector<float> out(keys.size() * 4);
  EXPECT_EQ(client_->Pull("emb", keys, 4, out.data()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Fingerprint(), before);
}

TEST_P(PsClientTest, WrongJobIsRefused) {
  PsClientOptions other = options_;
  other.job_id = "another-job";
  std::unique_ptr<PsClient> client;
  if (GetParam() == Transport::kGrpc) {
    client = *NewGrpcPsClient(other, *partition_, addresses_);
  } else {
    std::vector<Shard*> shards;
    for (auto& s : shards_) shards.push_back(s.get());
    client = NewLocalPsClient(other, shards);
  }
  std::vector<uint64_t> keys = {1, 2, 3};
  std::vector<float> out(keys.size() * 8);
  absl::Status status = client->Pull("emb", keys, 8, out.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), HasSubstr("job id is not the one shard"));
  EXPECT_THAT(std::string(status.message()), Not(HasSubstr("another-job"))) << "the caller's job id echoed";
}

TEST_P(PsClientTest, OversizeMessagesAreRejectedWhole) {
  if (GetParam() != Transport::kGrpc) GTEST_SKIP() << "message limits exist only on the gRPC path";
  // One request of ~2 MiB against servers that accept 1 MiB.
  PsClientOptions big = options_;
  big.max_request_bytes = 8 << 20;
  auto client = *NewGrpcPsClient(big, *partition_, addresses_);
  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < 60000; ++i) keys.push_back(i * 7919);  // all owned by server 0's first range
  std::vector<float> grads(keys.size() * 8, 1.0f);
  const uint64_t before = Fingerprint();
  absl::Status status = client->Push("emb", keys, 8, grads.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_EQ(Fingerprint(), before);
  // The default client splits the same push below the limit and succeeds.
  EXPECT_TRUE(client_->Push("emb", keys, 8, grads.data()).ok());
}

// The prepared form (a KeyBatch built once, rows in its unique-key order) reaches the same rows as the raw-keys
// form; a batch split over another number of servers is refused.
TEST_P(PsClientTest, PreparedBatchMatchesRawKeys) {
  std::mt19937_64 rng(17);
  std::vector<uint64_t> keys(500);
  for (auto& k : keys) k = Partition::FeatureKey(rng() % 200);
  KeyBatch batch;
  batch.Build(keys, *partition_);
  std::vector<float> unique_grads(batch.num_unique() * 8);
  for (size_t i = 0; i < unique_grads.size(); ++i) unique_grads[i] = static_cast<float>(i % 7);
  ASSERT_TRUE(client_->Push("emb", batch, 8, unique_grads.data(), CallClock{3}).ok());
  std::vector<float> unique_rows(batch.num_unique() * 8, 1.0f);
  ASSERT_TRUE(client_->Pull("emb", batch, 8, unique_rows.data(), CallClock{4}).ok());
  for (size_t i = 0; i < unique_rows.size(); ++i) ASSERT_EQ(unique_rows[i], -unique_grads[i]) << i;
  std::vector<float> out(keys.size() * 8);
  ASSERT_TRUE(client_->Pull("emb", keys, 8, out.data()).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    for (int j = 0; j < 8; ++j) ASSERT_EQ(out[i * 8 + j], unique_rows[batch.inverse()[i] * 8 + j]) << i;
  }
  KeyBatch other;
  other.Build(keys, *Partition::Uniform(kServers + 1));
  EXPECT_EQ(client_->Pull("emb", other, 8, unique_rows.data(), {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Pull("emb", batch, 0, unique_rows.data(), {}).code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Transports, PsClientTest, ::testing::Values(Transport::kLocal, Transport::kGrpc),
                         [](const auto& info) { return info.param == Transport::kGrpc ? "Grpc" : "Local"; });

TEST(PsServerOptionsTest, QuotaAndStreamBoundsAreValidated) {
  ShardOptions shard_options;
  shard_options.job_id = "job";
  std::unique_ptr<Shard> shard = *Shard::Create(shard_options, *Partition::Uniform(1));
  PsServerOptions options;
  options.address = "127.0.0.1:0";
  options.memory_quota_bytes = 1;
  EXPECT_EQ(PsServer::Start(options, shard.get()).status().code(), absl::StatusCode::kInvalidArgument);
  options.memory_quota_bytes = PsServerOptions().memory_quota_bytes;
  options.max_concurrent_streams = 0;
  EXPECT_EQ(PsServer::Start(options, shard.get()).status().code(), absl::StatusCode::kInvalidArgument);
  options.max_concurrent_streams = 2;  // a small cap still serves (streams beyond it wait on the client)
  absl::StatusOr<std::unique_ptr<PsServer>> server = PsServer::Start(options, shard.get());
  ASSERT_TRUE(server.ok()) << server.status();
  PsClientOptions client_options;
  client_options.job_id = "job";
  auto client = *NewGrpcPsClient(client_options, *Partition::Uniform(1),
                                 {absl::StrCat("127.0.0.1:", (*server)->port())});
  TableConfig table;
  table.set_name("t");
  table.set_dim(2);
  EXPECT_TRUE(client->CreateTable(table).ok());
  std::vector<uint64_t> keys(5000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = Partition::FeatureKey(i);
  std::sort(keys.begin(), keys.end());
  std::vector<float> rows(keys.size() * 2);
  EXPECT_TRUE(client->Pull("t", keys, 2, rows.data()).ok());
  (*server)->Shutdown();
}

// Answers every call at once and records the clock of each request's header.
class RecordingTransport final : public PsTransport {
 public:
  int num_servers() const override { return 2; }
  void Call(int server, PsMethod method, const google::protobuf::Message& request,
            google::protobuf::Message* response, absl::Duration, std::function<void(absl::Status)> done) override {
    const auto& header = static_cast<const RequestHeader&>(
        request.GetReflection()->GetMessage(request, request.GetDescriptor()->FindFieldByName("header")));
    {
      absl::MutexLock lock(&mu_);
      clocks_[method].insert(header.clock());
    }
    if (method == PsMethod::kPull || method == PsMethod::kPullDense) {
      const auto& pull = MessageAs<PullRequest>(request);
      auto* answer = MessageAs<PullResponse>(response);
      answer->set_value_type(VALUE_TYPE_FLOAT32);
      answer->mutable_values()->assign(pull.keys().size() / sizeof(uint64_t) * pull.dim() * sizeof(float), '\0');
    }
    done(absl::OkStatus());
  }
  // The clocks each method's requests carried since the last Take.
  std::map<PsMethod, std::set<int64_t>> Take() {
    absl::MutexLock lock(&mu_);
    return std::exchange(clocks_, {});
  }

 private:
  absl::Mutex mu_;
  std::map<PsMethod, std::set<int64_t>> clocks_ ABSL_GUARDED_BY(mu_);
};

// Each call's requests carry the clock it was given, and no call changes what a later one carries.
TEST(PsClientClockTest, EveryRequestCarriesItsCallsClock) {
  auto owned = std::make_unique<RecordingTransport>();
  RecordingTransport* transport = owned.get();
  std::unique_ptr<PsClient> client = NewPsClient(PsClientOptions(), *Partition::Uniform(2), std::move(owned));
  TableConfig dense = ZeroSgdTable("dense", 4);
  dense.set_kind(TableConfig::DENSE);
  dense.set_dense_size(8);
  ASSERT_TRUE(client->CreateTable(dense).ok());
  using Clocks = std::map<PsMethod, std::set<int64_t>>;
  EXPECT_EQ(transport->Take(), (Clocks{{PsMethod::kCreateTable, {0}}}));
  std::vector<uint64_t> keys = {5, uint64_t{1} << 63, 5};
  std::vector<float> rows(3 * 4), grads(3 * 4, 1.0f);
  ASSERT_TRUE(client->Push("emb", keys, 4, grads.data(), CallClock{7}).ok());
  EXPECT_EQ(transport->Take(), (Clocks{{PsMethod::kPush, {7}}}));
  ASSERT_TRUE(client->Pull("emb", keys, 4, rows.data(), CallClock{5, CacheRead{9, 4}}).ok());
  EXPECT_EQ(transport->Take(), (Clocks{{PsMethod::kPull, {5}}}));
  ASSERT_TRUE(client->Pull("emb", keys, 4, rows.data()).ok());
  EXPECT_EQ(transport->Take(), (Clocks{{PsMethod::kPull, {0}}}));
  std::vector<float> tensor(8);
  ASSERT_TRUE(client->PushDense("dense", tensor, CallClock{11}).ok());
  ASSERT_TRUE(client->PullDense("dense", absl::MakeSpan(tensor), CallClock{12}).ok());
  EXPECT_EQ(transport->Take(), (Clocks{{PsMethod::kPullDense, {12}}, {PsMethod::kPushDense, {11}}}));
  ASSERT_TRUE(client->Stats().ok());
  EXPECT_EQ(transport->Take(), (Clocks{{PsMethod::kStats, {0}}}));
}

}  // namespace
}  // namespace kestrel
