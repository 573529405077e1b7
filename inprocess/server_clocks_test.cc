// Server-enforced clocks (server/read_gate.h) end to end through a PsClient, in process and over gRPC: a
// training read with CallClock::wait_clock is answered only once every worker's updates it must see are in.
#include <atomic>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/key_batch.h"
#include "gtest/gtest.h"
#include "server/ps_server.h"
#include "server/shard.h"
#include "worker/grpc_ps_client.h"
#include "inprocess/local_ps_client.h"

namespace kestrel {
namespace {

constexpr int kServers = 2;
constexpr int kWorkers = 2;
constexpr int kDim = 4;

TableConfig Emb() {
  TableConfig c;
  c.set_name("emb");
  c.set_dim(kDim);
  c.mutable_initializer()->set_type(InitializerConfig::ZEROS);
  c.mutable_optimizer()->set_type(OptimizerConfig::SGD);
  c.mutable_optimizer()->set_learning_rate(1.0f);
  return c;
}

enum class Transport { kLocal, kGrpc };
struct Param {
  Transport transport;
  bool bsp;
};

class ServerClocksTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    partition_ = std::make_unique<Partition>(*Partition::Uniform(kServers));
    std::vector<Shard*> shards;
    std::vector<std::string> addresses;
    for (int s = 0; s < kServers; ++s) {
      ShardOptions options;
      options.job_id = "job";
      options.owner = s;
      options.bsp_workers = GetParam().bsp ? kWorkers : 0;
      shards_.push_back(*Shard::Create(options, *partition_));
      shards_.back()->SetJobView(1, std::vector<uint64_t>(kWorkers, 0));  // SSP learns the worker count here
      shards.push_back(shards_.back().get());
      if (GetParam().transport == Transport::kGrpc) {
        PsServerOptions server_options;
        server_options.address = "127.0.0.1:0";
        server_options.threads = 2;
        auto server = PsServer::Start(server_options, shards.back());
        ASSERT_TRUE(server.ok()) << server.status();
        addresses.push_back("127.0.0.1:" + std::to_string((*server)->port()));
        servers_.push_back(std::move(server).value());
      }
    }
    for (int w = 0; w < kWorkers; ++w) {
      PsClientOptions options;
      options.job_id = "job";
      options.worker_rank = w;
      options.bsp_pushes = true;
      options.rpc_deadline = absl::Seconds(3);  // a wait ends before it; the read is asked again
      if (GetParam().transport == Transport::kGrpc) {
        clients_.push_back(*NewGrpcPsClient(options, *partition_, addresses));
      } else {
        clients_.push_back(NewLocalPsClient(options, shards));
      }
    }
    ASSERT_TRUE(clients_[0]->CreateTable(Emb()).ok());
  }

  absl::Status Push(int worker, int64_t clock, std::vector<uint64_t> keys, float g) {
    std::vector<float> grads(keys.size() * kDim, g);
    return clients_[worker]->Push("emb", keys, kDim, grads.data(), CallClock{clock});
  }
  absl::StatusOr<std::vector<float>> Pull(int worker, int64_t clock, int64_t wait_clock,
                                          std::vector<uint64_t> keys) {
    std::vector<float> rows(keys.size() * kDim);
    CallClock at{clock};
    at.wait_clock = wait_clock;
    absl::Status status = clients_[worker]->Pull("emb", keys, kDim, rows.data(), at);
    if (!status.ok()) return status;
    return rows;
  }

  std::unique_ptr<Partition> partition_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<std::unique_ptr<PsServer>> servers_;
  std::vector<std::unique_ptr<PsClient>> clients_;
};

TEST_P(ServerClocksTest, ReadWaitsForEveryWorkersUpdatesOfThePreviousClock) {
  const uint64_t key = Partition::FeatureKey(7);
  ASSERT_TRUE(Push(0, 0, {key}, 1.0f).ok());
  // Worker 0 reads iteration 1: it must see worker 1's clock 0, which has not been pushed.
  std::future<absl::StatusOr<std::vector<float>>> read =
      std::async(std::launch::async, [&] { return Pull(0, 1, 1, {key}); });
  EXPECT_EQ(read.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  // Worker 1 has no key on any server this clock: its empty parts complete the clock.
  ASSERT_TRUE(Push(1, 0, {}, 0.0f).ok());
  absl::StatusOr<std::vector<float>> rows = read.get();
  ASSERT_TRUE(rows.ok()) << rows.status();
  // BSP: the mean of the two workers' gradients; SSP: applied on arrival.
  const float expected = GetParam().bsp ? -0.5f : -1.0f;
  for (float v : *rows) EXPECT_EQ(v, expected);
  // A read that needs nothing more is answered at once.
  EXPECT_TRUE(Pull(1, 1, 1, {key}).ok());
}

TEST_P(ServerClocksTest, AWaitLongerThanTheDeadlineIsAskedAgain) {
  const uint64_t key = Partition::FeatureKey(11);
  ASSERT_TRUE(Push(0, 0, {key}, 1.0f).ok());
  std::future<absl::StatusOr<std::vector<float>>> read =
      std::async(std::launch::async, [&] { return Pull(0, 1, 1, {key}); });
  // Longer than the 3 s deadline: the server answers "still waiting" before it, and the client asks again.
  EXPECT_EQ(read.wait_for(std::chrono::milliseconds(4500)), std::future_status::timeout);
  ASSERT_TRUE(Push(1, 0, {key}, 3.0f).ok());
  absl::StatusOr<std::vector<float>> rows = read.get();
  ASSERT_TRUE(rows.ok()) << rows.status();
  for (float v : *rows) EXPECT_EQ(v, GetParam().bsp ? -2.0f : -4.0f);
}

TEST_P(ServerClocksTest, ARestoreEndsTheWaitAborted) {
  const uint64_t key = Partition::FeatureKey(3);
  std::future<absl::StatusOr<std::vector<float>>> read =
      std::async(std::launch::async, [&] { return Pull(0, 5, 5, {key}); });
  EXPECT_EQ(read.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  auto empty = [](Shard::RowSink, Shard::SketchSink) { return absl::OkStatus(); };
  const uint64_t owner_shard = static_cast<uint64_t>(partition_->OwnerOf(key));
  for (auto& shard : shards_) ASSERT_TRUE(shard->Restore({}, 0, empty).ok());
  absl::StatusOr<std::vector<float>> rows = read.get();
  EXPECT_TRUE(absl::IsAborted(rows.status())) << rows.status() << " (key on server " << owner_shard << ")";
  // The restored checkpoint is of clock 5: a read of 5 needs nothing more.
  for (auto& shard : shards_) shard->StartClocksAt(5);
  EXPECT_TRUE(Pull(0, 5, 5, {key}).ok());
  EXPECT_EQ(shards_[0]->CompleteClocks("emb"), 5);
}

// A server restored mid-job (its checkpoint of clock 5) answers a read of clock 6 only once every worker's
// pushes of clock 5 are in again: what it held of clock 5 before the restart is gone with the restore.
TEST_P(ServerClocksTest, ARestoredServerWaitsForTheClockAfterItsCheckpointAgain) {
  const uint64_t key = Partition::FeatureKey(5);
  for (int64_t c = 0; c < 6; ++c) {
    ASSERT_TRUE(Push(0, c, {key}, 1.0f).ok());
    ASSERT_TRUE(Push(1, c, {key}, 1.0f).ok());
  }
  ASSERT_TRUE(Pull(0, 6, 6, {key}).ok());  // clock 5 is complete
  auto empty = [](Shard::RowSink, Shard::SketchSink) { return absl::OkStatus(); };
  for (auto& shard : shards_) {
    ASSERT_TRUE(shard->Restore({Emb()}, 0, empty).ok());
    shard->StartClocksAt(5);
  }
  std::future<absl::StatusOr<std::vector<float>>> read =
      std::async(std::launch::async, [&] { return Pull(0, 6, 6, {key}); });
  ASSERT_TRUE(Push(0, 5, {key}, 1.0f).ok());
  EXPECT_EQ(read.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  ASSERT_TRUE(Push(1, 5, {key}, 1.0f).ok());
  absl::StatusOr<std::vector<float>> rows = read.get();
  ASSERT_TRUE(rows.ok()) << rows.status();
  // The restored (empty) rows plus clock 5's update: BSP's mean, SSP's two pushes.
  for (float v : *rows) EXPECT_EQ(v, GetParam().bsp ? -1.0f : -2.0f);
}

// A Step (one request per server: the push of clock c and the read of c + 1) waits at the servers for every
// worker's clock c, and trains exactly what the separate Push and Pull calls do.
TEST_P(ServerClocksTest, StepsPushAndReadTheNextClockInOneRoundTrip) {
  TableConfig dense;
  dense.set_name("dense");
  dense.set_kind(TableConfig::DENSE);
  dense.set_dim(16);
  dense.set_dense_size(40);  // 3 blocks, the last partly used
  dense.mutable_initializer()->set_type(InitializerConfig::ZEROS);
  dense.mutable_optimizer()->set_type(OptimizerConfig::SGD);
  dense.mutable_optimizer()->set_learning_rate(1.0f);
  ASSERT_TRUE(clients_[0]->CreateTable(dense).ok());
  std::vector<uint64_t> raw = {Partition::FeatureKey(1), Partition::FeatureKey(2), Partition::FeatureKey(9)};
  KeyBatch keys;
  keys.Build(raw, *partition_);
  // Each worker's own buffers: its gradients and what its reads answer.
  struct Buffers {
    std::vector<float> grads, dense_grads, rows, dense_rows;
  };
  std::vector<Buffers> buffers(kWorkers);
  for (Buffers& b : buffers) {
    b.grads.resize(keys.num_unique() * kDim);
    b.rows.resize(keys.num_unique() * kDim);
    b.dense_grads.resize(40);
    b.dense_rows.resize(40);
  }
  auto step = [&](int worker, int64_t clock, bool fused) {
    Buffers& b = buffers[worker];
    const float g = worker == 0 ? 0.5f : 0.25f;
    for (size_t i = 0; i < b.grads.size(); ++i) b.grads[i] = g * static_cast<float>(i + 1);
    for (size_t i = 0; i < b.dense_grads.size(); ++i) b.dense_grads[i] = g * static_cast<float>(i);
    StepPart emb{"emb"};
    emb.dim = kDim;
    emb.push = true;
    emb.push_keys = &keys;
    emb.grads = b.grads.data();
    emb.pull = true;
    emb.pull_keys = &keys;
    emb.rows = b.rows.data();
    StepPart d{"dense"};
    d.dense = true;
    d.push = true;
    d.grads = b.dense_grads.data();
    d.push_floats = worker == 1 ? 0 : 40;  // worker 1 pushes an empty dense part
    d.pull = true;
    d.rows = b.dense_rows.data();
    d.pull_floats = 40;
    const std::vector<StepPart> parts = {emb, d};
    CallClock read{clock + 1};
    read.wait_clock = clock + 1;
    return fused ? clients_[worker]->Step(parts, CallClock{clock}, read)
                 : clients_[worker]->PsClient::Step(parts, CallClock{clock}, read);
  };
  std::vector<std::vector<float>> results;
  for (bool fused : {true, false}) {
    const int64_t base = fused ? 0 : 10;  // the separate calls train the same tables again from clock 10
    if (!fused) {
      auto empty = [](Shard::RowSink, Shard::SketchSink) { return absl::OkStatus(); };
      for (auto& shard : shards_) {
        ASSERT_TRUE(shard->Restore({Emb(), dense}, 0, empty).ok());
        shard->StartClocksAt(base);
      }
    }
    for (int64_t c = base; c < base + 3; ++c) {
      std::future<absl::Status> first = std::async(std::launch::async, [&] { return step(0, c, fused); });
      EXPECT_EQ(first.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout)
          << "worker 0's read of clock " << c + 1 << " waits for worker 1's push of clock " << c;
      ASSERT_TRUE(step(1, c, fused).ok());  // completes the clock: both reads are answered
      ASSERT_TRUE(first.get().ok());
      EXPECT_EQ(buffers[0].rows, buffers[1].rows);
      EXPECT_EQ(buffers[0].dense_rows, buffers[1].dense_rows);
    }
    std::vector<float> all = buffers[0].rows;
    all.insert(all.end(), buffers[0].dense_rows.begin(), buffers[0].dense_rows.end());
    results.push_back(all);
  }
  EXPECT_EQ(results[0], results[1]) << "a Step trains what the separate calls train";
  EXPECT_NE(results[0][0], 0.0f);
  EXPECT_NE(results[0][kDim * keys.num_unique() + 39], 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Transports, ServerClocksTest,
                         ::testing::Values(Param{Transport::kLocal, true}, Param{Transport::kLocal, false},
                                           Param{Transport::kGrpc, true}, Param{Transport::kGrpc, false}),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(info.param.transport == Transport::kLocal ? "Local" : "Grpc") +
                                  (info.param.bsp ? "Bsp" : "Ssp");
                         });

}  // namespace
}  // namespace kestrel
