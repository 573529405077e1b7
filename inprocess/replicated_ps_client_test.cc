// Replication through the real gRPC servers and client (docs/replication.md): three kestrel servers in
// process, two copies of every key range. Pushes reach both copies identically before they are acknowledged;
// a server that stops is failed over by a routing announcement, and the client's retried pushes are applied
// exactly once on the survivors.
#include <atomic>
#include <chrono>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/key_batch.h"
#include "server/hosted_shards.h"
#include "server/primary_lease.h"
#include "server/ps_server.h"
#include "worker/grpc_ps_client.h"

namespace kestrel {
namespace {

constexpr int kServers = 3;
constexpr int kDim = 4;

TableConfig Table() {
  TableConfig c;
  c.set_name("emb");
  c.set_dim(kDim);
  c.mutable_initializer()->set_type(InitializerConfig::ZEROS);
  c.mutable_optimizer()->set_type(OptimizerConfig::SGD);
  c.mutable_optimizer()->set_learning_rate(1.0f);
  return c;
}

class ReplicatedPsClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    partition_ = *Partition::Uniform(kServers, /*ranges_per_server=*/2)->WithReplicas(2);
    for (int s = 0; s < kServers; ++s) {
      ShardOptions options;
      options.job_id = "job";
      options.owner = s;
      hosted_.push_back(*HostedShards::Create(options, partition_));
      PsServerOptions server_options;
      server_options.address = "127.0.0.1:0";
      server_options.threads = 2;
      auto server = PsServer::Start(server_options, hosted_.back().get());
      ASSERT_TRUE(server.ok()) << server.status();
      addresses_.push_back("127.0.0.1:" + std::to_string((*server)->port()));
      servers_.push_back(std::move(server).value());
    }
    for (auto& server : servers_) server->peers().SetAddresses(addresses_);
    routing_ = std::make_shared<RoutingTable>(partition_);
    options_.job_id = "job";
    PsClientOptions& options = options_;
    options.worker_rank = 0;          // a worker's pushes are deduplicated by request id (a tool's are not)
    options.max_request_bytes = 512;  // several requests per group
    options.routing = routing_;
    options.retry_backoff = absl::Milliseconds(10);
    options.give_up = [this] {  // asked before every retry beyond max_retries: counts them, gives up if told
      ++failover_retries_;
      return stop_retrying_.load();
    };
    client_ = *NewGrpcPsClient(options, partition_, addresses_);
    ASSERT_TRUE(client_->CreateTable(Table()).ok());
  }

  // The scheduler's announcement, as every process hears it.
  void Announce(uint64_t generation, std::vector<int> out_of_service) {
    ASSERT_TRUE(routing_->Update(generation, out_of_service).ok());
    for (auto& hosted : hosted_) ASSERT_TRUE(hosted->routing().Update(generation, out_of_service).ok());
  }

  // Every copy of every range group holds the same rows.
  void ExpectCopiesIdentical(const std::vector<bool>& out = std::vector<bool>(kServers, false)) {
    for (int owner = 0; owner < kServers; ++owner) {
      const uint64_t primary = (*hosted_[owner]->Group(owner))->Fingerprint();
      const int backup = partition_.ReplicaOfOwner(owner, 1);
      if (out[owner] || out[backup]) continue;
      EXPECT_EQ((*hosted_[backup]->Group(owner))->Fingerprint(), primary) << "ranges of server " << owner;
    }
  }

  Partition partition_ = *Partition::Uniform(1);
  std::vector<std::unique_ptr<HostedShards>> hosted_;
  std::vector<std::unique_ptr<PsServer>> servers_;
  std::vector<std::string> addresses_;
  std::shared_ptr<RoutingTable> routing_;
  std::atomic<int> failover_retries_{0};  // requests retried beyond max_retries, waiting for a failover
  std::atomic<bool> stop_retrying_{false};  // give_up answers this
  PsClientOptions options_;
  std::unique_ptr<PsClient> client_;
};

std::vector<uint64_t> Keys(int n) {
  std::vector<uint64_t> keys;
  for (int i = 0; i < n; ++i) keys.push_back(Partition::FeatureKey(static_cast<uint64_t>(i)));
  return keys;
}

TEST_F(ReplicatedPsClientTest, PushesReachEveryCopyBeforeTheyAreAcknowledged) {
  const std::vector<uint64_t> keys = Keys(300);
  std::vector<float> grads(keys.size() * kDim, 0.25f);
  ASSERT_TRUE(client_->Push("emb", keys, kDim, grads.data()).ok());
  ExpectCopiesIdentical();
  for (int owner = 0; owner < kServers; ++owner) {
    EXPECT_GT((*hosted_[owner]->Group(owner))->Stats().tables[0].rows, 0u) << "every group got keys";
  }
  std::vector<float> rows(keys.size() * kDim);
  ASSERT_TRUE(client_->Pull("emb", keys, kDim, rows.data()).ok());
  for (float v : rows) ASSERT_EQ(v, -0.25f);
  // Stats name their group: one answer per range group, from its primary.
  absl::StatusOr<std::vector<StatsResponse>> stats = client_->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  uint64_t rows_total = 0;
  for (const StatsResponse& s : *stats) rows_total += s.rows();
  EXPECT_EQ(rows_total, keys.size()) << "each row counted once, not once per copy";
}

// A fused Step (one request per range group: every table's push and read) reaches the group's backups too
// (ReplicateStep) before it is acknowledged, and answers the primary's rows; a Step the primary refuses (one of
// its tables does not exist) reaches no copy, its other table's push included.
TEST_F(ReplicatedPsClientTest, StepsReachEveryCopyAndARefusedOneReachesNone) {
  const std::vector<uint64_t> raw = Keys(300);
  KeyBatch keys;
  keys.Build(raw, partition_);
  std::vector<float> grads(keys.num_unique() * kDim, 0.25f), rows(keys.num_unique() * kDim, 7.0f);
  StepPart emb{"emb"};
  emb.dim = kDim;
  emb.push = true;
  emb.push_keys = &keys;
  emb.grads = grads.data();
  emb.pull = true;
  emb.pull_keys = &keys;
  emb.rows = rows.data();
  ASSERT_TRUE(client_->Step({emb}, CallClock{0}, CallClock{1}).ok());
  ExpectCopiesIdentical();
  for (float v : rows) ASSERT_EQ(v, -0.25f) << "the read follows the push it travels with";
  std::vector<uint64_t> before;
  for (int s = 0; s < kServers; ++s) {
    for (Shard* group : hosted_[s]->shards()) before.push_back(group->Fingerprint());
  }
  emb.pull = false;
  StepPart missing = emb;
  missing.table = "missing";
  const absl::Status refused = client_->Step({emb, missing}, CallClock{1}, CallClock{2});
  EXPECT_TRUE(absl::IsNotFound(refused)) << refused;
  std::vector<uint64_t> after;
  for (int s = 0; s < kServers; ++s) {
    for (Shard* group : hosted_[s]->shards()) after.push_back(group->Fingerprint());
  }
  EXPECT_EQ(after, before) << "a refused Step changed a copy";
}

// The split-brain fence (server/primary_lease.h): with it on, a primary whose lease from the scheduler lapsed (or
// was never granted) answers no read or write, and nothing it refused was applied on any copy.
TEST_F(ReplicatedPsClientTest, APrimaryWithoutALeaseAnswersNothing) {
  for (auto& server : servers_) server->service().primary_lease().Enforce();
  const std::vector<uint64_t> keys = Keys(300);
  std::vector<float> grads(keys.size() * kDim, 0.25f);
  failover_retries_ = 0;
  stop_retrying_ = true;
  const absl::Status refused = client_->Push("emb", keys, kDim, grads.data());
  EXPECT_TRUE(absl::IsUnavailable(refused)) << refused;
  EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("lease from the scheduler lapsed")) << refused;
  for (int owner = 0; owner < kServers; ++owner) {
    EXPECT_EQ((*hosted_[owner]->Group(owner))->Stats().tables[0].rows, 0u) << "a refused push was applied";
  }
  std::vector<float> rows(keys.size() * kDim);
  EXPECT_TRUE(absl::IsUnavailable(client_->Pull("emb", keys, kDim, rows.data())));
  // The scheduler answered a heartbeat sent now: each server serves for the lease.
  for (auto& server : servers_) {
    server->service().primary_lease().Renew(std::chrono::steady_clock::now(), absl::Minutes(10));
  }
  stop_retrying_ = false;
  ASSERT_TRUE(client_->Push("emb", keys, kDim, grads.data()).ok());
  ASSERT_TRUE(client_->Pull("emb", keys, kDim, rows.data()).ok());
  for (float v : rows) ASSERT_EQ(v, -0.25f);
  ExpectCopiesIdentical();
}

TEST_F(ReplicatedPsClientTest, StoppedServerFailsOverAndRetriedPushesApplyOnce) {
  const std::vector<uint64_t> keys = Keys(300);
  std::vector<float> grads(keys.size() * kDim, 0.5f);
  ASSERT_TRUE(client_->Push("emb", keys, kDim, grads.data()).ok());

  servers_[1]->Shutdown(absl::ZeroDuration());  // server 1 dies: primary of its ranges, backup of server 0's
  servers_[1]->Wait();
  std::thread scheduler([this] {  // declared dead once the pushes are retrying past max_retries
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (failover_retries_.load() == 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
    Announce(1, {1});
  });
  // Pushes to server 1's ranges fail (it is gone), and so do server 0's (its backup is gone): retried until the
  // routing moves, then applied once on the survivors.
  ASSERT_TRUE(client_->Push("emb", keys, kDim, grads.data()).ok());
  scheduler.join();
  EXPECT_GT(failover_retries_.load(), 0) << "the push was acknowledged without waiting for the failover";
  std::vector<float> rows(keys.size() * kDim);
  ASSERT_TRUE(client_->Pull("emb", keys, kDim, rows.data()).ok());
  for (float v : rows) ASSERT_EQ(v, -1.0f) << "both pushes, each applied exactly once";
  ExpectCopiesIdentical({false, true, false});
}

// Split brain (docs/replication.md#fencing-no-split-brain): server 0, primary of its ranges, is cut off from the
// scheduler, which fails it over to server 1; a worker that has not heard of the new routing yet still reaches
// server 0 and reads rows another worker has since updated on the new primary.
class SplitBrainTest : public ReplicatedPsClientTest {
 protected:
  // Returns the stale worker's read of `keys_` (rows_) through server 0 after the failover.
  absl::Status StaleRead(bool fenced) {
    std::vector<float> grads(keys_.size() * kDim, 0.25f);
    EXPECT_TRUE(client_->Push("emb", keys_, kDim, grads.data()).ok());  // every copy: -0.25
    // The worker that will not hear of the failover: its own routing, still at generation 0.
    PsClientOptions stale_options = options_;
    stale_routing_ = std::make_shared<RoutingTable>(partition_);
    stale_options.routing = stale_routing_;
    stale_options.give_up = [] { return true; };
    stale_options.worker_rank = 1;
    stale_ = *NewGrpcPsClient(stale_options, partition_, addresses_);
    // Server 0 hears the scheduler no more: its lease is not renewed (granted with the registration, it lapsed).
    // The others' heartbeats are answered.
    for (int s = 0; s < kServers; ++s) {
      if (fenced) servers_[s]->service().primary_lease().Enforce();
      const auto sent = std::chrono::steady_clock::now() - (s == 0 ? std::chrono::seconds(10) : std::chrono::seconds(0));
      servers_[s]->service().primary_lease().Renew(sent, PrimaryLease::LengthFor(absl::Seconds(1)));
    }
    // The scheduler fails server 0 over; every process but server 0 and the stale worker hears it.
    EXPECT_TRUE(routing_->Update(1, {0}).ok());
    for (int s = 1; s < kServers; ++s) EXPECT_TRUE(hosted_[s]->routing().Update(1, {0}).ok());
    EXPECT_TRUE(client_->Push("emb", keys_, kDim, grads.data()).ok());  // on the new primaries: -0.5
    rows_.assign(keys_.size() * kDim, 0.0f);
    return stale_->Pull("emb", keys_, kDim, rows_.data());
  }

  // Keys of server 0's ranges only.
  std::vector<uint64_t> keys_ = [] {
    std::vector<uint64_t> keys;
    const Partition partition = *Partition::Uniform(kServers, 2)->WithReplicas(2);
    for (uint64_t i = 0; keys.size() < 100; ++i) {
      const uint64_t key = Partition::FeatureKey(i);
      if (partition.OwnerOf(key) == 0) keys.push_back(key);
    }
    return keys;
  }();
  std::vector<float> rows_;
  std::shared_ptr<RoutingTable> stale_routing_;
  std::unique_ptr<PsClient> stale_;
};

TEST_F(SplitBrainTest, WithoutTheFenceACutOffPrimaryServesAStaleRead) {
  const absl::Status read = StaleRead(/*fenced=*/false);
  ASSERT_TRUE(read.ok()) << read;
  for (float v : rows_) ASSERT_EQ(v, -0.25f) << "expected the stale value the fence exists to refuse";
}

TEST_F(SplitBrainTest, TheFencedPrimaryRefusesAndTheRetryReadsTheNewPrimary) {
  const absl::Status read = StaleRead(/*fenced=*/true);
  EXPECT_TRUE(absl::IsUnavailable(read)) << read;
  EXPECT_THAT(std::string(read.message()), ::testing::HasSubstr("lease from the scheduler lapsed")) << read;
  // The worker re-routes (its next heartbeat answer brings the new routing) and reads the acknowledged state.
  ASSERT_TRUE(stale_routing_->Update(1, {0}).ok());
  ASSERT_TRUE(stale_->Pull("emb", keys_, kDim, rows_.data()).ok());
  for (float v : rows_) ASSERT_EQ(v, -0.5f);
}

}  // namespace
}  // namespace kestrel
