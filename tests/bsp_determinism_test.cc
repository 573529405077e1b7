// BSP determinism with real kestrel_server processes (run with --bsp_workers): worker threads train a sparse
// linear-regression model through real gRPC clients, asking the consistency core (ClockTable, BSP) before
// each iteration, with random delays so pushes arrive in different orders every run.
//   - two runs with the same seed, data and N give bitwise identical weights;
//   - N workers equal one worker with N x the batch (same samples, same order) within 1e-5 relative;
//   - a push that arrives twice (a retry) is applied once.
// Over mutual TLS (tests/test_cluster_tls.h): each server and worker thread presents its own role and rank.
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "scheduler/clock_table.h"
#include "tests/server_process.h"
#include "tests/test_cluster_tls.h"
#include "worker/grpc_ps_client.h"

namespace kestrel {
namespace {

constexpr char kJob[] = "bsp";
constexpr int kServers = 2;
constexpr int kFeatures = 300;      // distinct feature ids
constexpr int kPerSample = 6;       // features per sample
constexpr int kIterations = 15;
constexpr int kBatch = 40;          // samples per worker per iteration when 3 workers run

struct Sample {
  std::vector<uint64_t> keys;
  std::vector<float> x;
  float y;
};

// Deterministic data from a planted linear model.
std::vector<Sample> MakeData(int n) {
  std::mt19937_64 rng(2024);
  std::vector<float> planted(kFeatures);
  for (auto& w : planted) w = std::uniform_real_distribution<float>(-1, 1)(rng);
  std::vector<Sample> data(n);
  for (auto& s : data) {
    float y = 0;
    for (int j = 0; j < kPerSample; ++j) {
      const int f = static_cast<int>(rng() % kFeatures);
      s.keys.push_back(Partition::FeatureKey(f));
      s.x.push_back(std::uniform_real_distribution<float>(0, 1)(rng));
      y += planted[f] * s.x.back();
    }
    s.y = y;
  }
  return data;
}

TableConfig Weights(ValueType wire = VALUE_TYPE_FLOAT32) {
  TableConfig c;
  c.set_wire_type(wire);
  c.set_name("w");
  c.set_dim(1);
  c.set_seed(5);
  c.mutable_initializer()->set_type(InitializerConfig::UNIFORM);
  c.mutable_optimizer()->set_type(OptimizerConfig::SGD);
  c.mutable_optimizer()->set_learning_rate(0.5f);
  return c;
}

// Trains with `workers` BSP workers, each taking `batch` samples per iteration (iteration c of worker r uses
// samples [(c * workers + r) * batch, ... + batch)); returns the final weight of every feature.
// `duplicate_push`: worker 0 sends its push of iteration 3 twice.
std::vector<float> Train(int workers, int batch, const std::vector<Sample>& data, bool duplicate_push,
                         uint64_t delay_seed, ValueType wire = VALUE_TYPE_FLOAT32) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  std::vector<ServerProcess> servers;
  std::vector<std::string> addresses;
  for (int s = 0; s < kServers; ++s) {
    auto args = TestClusterTls::Get().WithFlags({"--job_id=bsp", "--num_servers=2", "--rank=" + std::to_string(s),
                                                 "--bsp_workers=" + std::to_string(workers)},
                                                kJob, "server", s);
    EXPECT_TRUE(args.ok()) << args.status();
    if (!args.ok()) return {};
    auto p = ServerProcess::Start(RunfilePath("server/kestrel_server"), *args, dir, "bsp_server" + std::to_string(s));
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return {};
    addresses.push_back(p->address());
    servers.push_back(std::move(p).value());
  }
  // Each worker's certificate, issued here: the threads below only use them.
  std::vector<std::shared_ptr<grpc::ChannelCredentials>> credentials;
  for (int r = 0; r < workers; ++r) {
    auto c = TestClusterTls::Get().Credentials(kJob, "worker", r);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return {};
    credentials.push_back(*c);
  }
  auto clocks = *ClockTable::Create(workers, ConsistencyPolicy::Bsp());
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int r = 0; r < workers; ++r) {
    threads.emplace_back([&, r] {
      PsClientOptions options;
      options.job_id = "bsp";
      options.worker_rank = r;
      options.bsp_pushes = true;
      auto client = *NewGrpcPsClient(options, *Partition::Uniform(kServers), addresses, credentials[r]);
      if (!client->CreateTable(Weights(wire)).ok()) ++errors;
      std::mt19937_64 delay(delay_seed * 31 + r);
      int64_t pushed = 0;  // pulls carry the clock of this worker's last push (0 before the first)
      for (int c = 0; c < kIterations; ++c) {
        absl::Notification allowed;
        clocks->WaitToStart(r, c, [&](absl::Status s) {
          if (!s.ok()) ++errors;
          allowed.Notify();
        });
        allowed.WaitForNotification();
        absl::SleepFor(absl::Microseconds(delay() % 1500));  // vary the order pushes reach the servers
        std::vector<uint64_t> keys;
        const size_t begin = (static_cast<size_t>(c) * workers + r) * batch;
        for (int i = 0; i < batch; ++i) {
          const Sample& s = data[begin + i];
          keys.insert(keys.end(), s.keys.begin(), s.keys.end());
        }
        std::vector<float> w(keys.size());
        if (!client->Pull("w", keys, 1, w.data(), CallClock{pushed}).ok()) ++errors;
        // Mean squared-error gradient over this worker's batch: d/dw_k of mean (p - y)^2 / 2.
        std::vector<float> grads(keys.size());
        for (int i = 0; i < batch; ++i) {
          const Sample& s = data[begin + i];
          float p = 0;
          for (int j = 0; j < kPerSample; ++j) p += w[i * kPerSample + j] * s.x[j];
          for (int j = 0; j < kPerSample; ++j) grads[i * kPerSample + j] = (p - s.y) * s.x[j] / batch;
        }
        pushed = c;
        if (!client->Push("w", keys, 1, grads.data(), CallClock{c}).ok()) ++errors;
        if (duplicate_push && r == 0 && c == 3 && !client->Push("w", keys, 1, grads.data(), CallClock{c}).ok()) {
          ++errors;
        }
        if (!clocks->Advance(r, c + 1).ok()) ++errors;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  // Over mutual TLS only a worker may pull, under its own rank (a rank -1 tool has no certificate that allows
  // it): the reader is worker 0 at the clock after the last, so the BSP servers answer the rows as they are.
  PsClientOptions options;
  options.job_id = "bsp";
  options.worker_rank = 0;
  auto reader = *NewGrpcPsClient(options, *Partition::Uniform(kServers), addresses, credentials[0]);
  std::vector<uint64_t> all;
  for (int f = 0; f < kFeatures; ++f) all.push_back(Partition::FeatureKey(f));
  std::vector<float> out(all.size());
  EXPECT_TRUE(reader->Pull("w", all, 1, out.data(), CallClock{kIterations}).ok());
  return out;
}

TEST(BspDeterminismTest, RepeatableEqualToOneBigBatchAndIdempotent) {
  const std::vector<Sample> data = MakeData(kIterations * 3 * kBatch);
  const std::vector<float> first = Train(3, kBatch, data, /*duplicate_push=*/false, /*delay_seed=*/1);
  const std::vector<float> second = Train(3, kBatch, data, /*duplicate_push=*/false, /*delay_seed=*/2);
  ASSERT_EQ(first.size(), static_cast<size_t>(kFeatures));
  ASSERT_EQ(second.size(), first.size());
  EXPECT_EQ(0, std::memcmp(first.data(), second.data(), first.size() * sizeof(float)))
      << "two BSP runs with the same data differ";

  const std::vector<float> retried = Train(3, kBatch, data, /*duplicate_push=*/true, /*delay_seed=*/3);
  ASSERT_EQ(retried.size(), first.size());
  EXPECT_EQ(0, std::memcmp(first.data(), retried.data(), first.size() * sizeof(float)))
      << "a duplicated push changed the result";

  const std::vector<float> one = Train(1, 3 * kBatch, data, /*duplicate_push=*/false, /*delay_seed=*/4);
  ASSERT_EQ(one.size(), first.size());
  int moved = 0;
  for (int f = 0; f < kFeatures; ++f) {
    EXPECT_NEAR(one[f], first[f], 1e-5 * std::max(1.0f, std::abs(first[f]))) << "feature " << f;
    // Training moved the weights out of the initializer's range [-0.01, 0.01) (so the comparison means
    // something).
    moved += std::abs(first[f]) > 0.011f;
  }
  EXPECT_GT(moved, kFeatures / 2);
}

// With the table's values on the wire as bf16 or fp16 (pulls and pushes rounded, fp16 pushes scaled), BSP is
// still bitwise repeatable, and training still lands near the fp32 run.
TEST(BspDeterminismTest, HalfPrecisionWireIsRepeatableToo) {
  const std::vector<Sample> data = MakeData(kIterations * 3 * kBatch);
  const std::vector<float> fp32 = Train(3, kBatch, data, /*duplicate_push=*/false, /*delay_seed=*/1);
  for (ValueType wire : {VALUE_TYPE_BFLOAT16, VALUE_TYPE_FLOAT16}) {
    SCOPED_TRACE(ValueType_Name(wire));
    const std::vector<float> first = Train(3, kBatch, data, false, /*delay_seed=*/5, wire);
    const std::vector<float> second = Train(3, kBatch, data, false, /*delay_seed=*/6, wire);
    ASSERT_EQ(first.size(), fp32.size());
    ASSERT_EQ(second.size(), fp32.size());
    EXPECT_EQ(0, std::memcmp(first.data(), second.data(), first.size() * sizeof(float)))
        << "two BSP runs over the half-precision wire differ";
    EXPECT_NE(0, std::memcmp(first.data(), fp32.data(), first.size() * sizeof(float)))
        << "the wire type changed nothing: it was not used";
    for (int f = 0; f < kFeatures; ++f) {
      EXPECT_NEAR(first[f], fp32[f], 0.05 * std::max(1.0f, std::abs(fp32[f]))) << "feature " << f;
    }
  }
}

}  // namespace
}  // namespace kestrel
