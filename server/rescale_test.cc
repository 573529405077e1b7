// Rescale between live in-process servers over gRPC (server/ps_service.h RescaleShard): the scheduler's part is
// played by the test, phase by phase, as scheduler/checkpoint_coordinator.cc drives it.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/hash.h"
#include "common/partition.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/hosted_shards.h"
#include "server/ps_service.h"

namespace kestrel {
namespace {

constexpr int kDim = 8;
constexpr int kMaxServers = 3;

TableConfig Emb() {
  TableConfig c;
  c.set_name("emb");
  c.set_dim(kDim);
  c.mutable_optimizer()->set_type(OptimizerConfig::ADAGRAD);
  return c;
}

RequestContext Ctx() {
  RequestContext ctx;
  ctx.job_id = "t";
  ctx.worker_rank = 0;
  return ctx;
}

class RescaleTest : public ::testing::Test {
 protected:
  // Servers 0..n-1 serve `partition`; the others (up to kMaxServers) start too, as a rescale's new ranks do,
  // with the partition they are launched for.
  void Start(const Partition& partition, const Partition& joining) {
    for (int s = 0; s < kMaxServers; ++s) {
      ShardOptions options;
      options.job_id = "t";
      options.shard_index = s;
      auto hosted = HostedShards::Create(options, s < partition.num_servers() ? partition : joining);
      ASSERT_TRUE(hosted.ok()) << hosted.status();
      PsServerOptions server_options;
      server_options.address = "127.0.0.1:0";
      auto server = PsServer::Start(server_options, std::shared_ptr<HostedShards>(*std::move(hosted)));
      ASSERT_TRUE(server.ok()) << server.status();
      servers_.push_back(*std::move(server));
      addresses_.push_back(absl::StrCat("127.0.0.1:", servers_.back()->port()));
      stubs_.push_back(ParameterServer::NewStub(grpc::CreateChannel(addresses_.back(), grpc::InsecureChannelCredentials())));
    }
  }

  HostedShards& Groups(int s) { return *servers_[s]->service().hosted(); }

  // Every server of `partition` gets the table and pushes to its own keys (two steps, so the optimizer state
  // differs from a fresh row).
  void Fill(const Partition& partition) {
    for (int s = 0; s < partition.num_servers(); ++s) {
      ASSERT_TRUE(Groups(s).own().CreateTable(Ctx(), Emb()).ok());
    }
    for (int step = 0; step < 2; ++step) {
      std::map<int, std::vector<uint64_t>> keys;
      for (uint64_t i = 0; i < 3000; ++i) keys[partition.OwnerOf(Mix64(i))].push_back(Mix64(i));
      for (auto& [s, mine] : keys) {
        std::sort(mine.begin(), mine.end());
        std::vector<float> grads(mine.size() * kDim);
        for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.01f * static_cast<float>((i * 7 + step) % 13) - 0.05f;
        ASSERT_TRUE(Groups(s).own().Push(Ctx(), "emb", mine, grads, kDim).ok());
      }
    }
  }

  // The whole table over servers [0, n): order-independent, so equal whatever the layout.
  uint64_t Fingerprint(int n) {
    uint64_t sum = 0;
    for (int s = 0; s < n; ++s) {
      const Table* table = Groups(s).own().FindTable("emb");
      if (table != nullptr) sum += table->RowsFingerprint();
    }
    return sum;
  }
  uint64_t Rows(int n) {
    uint64_t rows = 0;
    for (int s = 0; s < n; ++s) {
      const Table* table = Groups(s).own().FindTable("emb");
      if (table != nullptr) rows += table->num_rows();
    }
    return rows;
  }

  absl::StatusOr<RescaleShardResponse> Phase(int s, RescaleShardRequest::Phase phase, uint64_t generation,
                                             const Partition& next, int senders, uint64_t attempt = 0) {
    RescaleShardRequest request;
    request.mutable_header()->set_job_id("t");
    request.mutable_header()->set_worker_rank(-1);
    request.set_phase(phase);
    request.set_layout_generation(generation);
    request.set_attempt(attempt);
    request.set_partition(next.ToString());
    for (int t = 0; t < next.num_servers(); ++t) request.add_server_addresses(addresses_[t]);
    request.set_senders(senders);
    request.set_routing_generation(generation);
    RescaleShardResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    absl::Status status = FromGrpcStatus(stubs_[s]->RescaleShard(&context, request, &response));
    if (!status.ok()) return status;
    return response;
  }

  // The whole rescale from `old_n` servers to `next`, as the scheduler runs it.
  void Rescale(int old_n, const Partition& next, uint64_t generation, uint64_t attempt = 0) {
    const int everyone = std::max(old_n, next.num_servers());
    for (int s = 0; s < old_n; ++s) {
      auto sent = Phase(s, RescaleShardRequest::SEND, generation, next, old_n, attempt);
      ASSERT_TRUE(sent.ok()) << sent.status();
    }
    for (int s = 0; s < everyone; ++s) {
      auto installed = Phase(s, RescaleShardRequest::INSTALL, generation, next, old_n, attempt);
      ASSERT_TRUE(installed.ok()) << installed.status();
    }
    for (int s = 0; s < everyone; ++s) {
      auto switched = Phase(s, RescaleShardRequest::SWITCH, generation, next, old_n, attempt);
      ASSERT_TRUE(switched.ok()) << switched.status();
    }
  }

  std::vector<std::unique_ptr<PsServer>> servers_;
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<ParameterServer::Stub>> stubs_;
};

TEST_F(RescaleTest, RowsMoveTwoToThreeToTwoWithTheTableUnchanged) {
  const Partition two = *Partition::Uniform(2, 4);
  const Partition three = *Partition::Uniform(3, 4);
  Start(two, three);
  Fill(two);
  const uint64_t fingerprint = Fingerprint(2);
  const uint64_t rows = Rows(2);
  ASSERT_EQ(rows, 3000u);
  // A row's bits before the move, read from its owner.
  const uint64_t probe = Mix64(17);
  std::string before;
  ASSERT_TRUE(Groups(two.OwnerOf(probe)).own().Pull(Ctx(), "emb", {probe}, kDim, &before).ok());

  Rescale(2, three, 1);
  EXPECT_EQ(Fingerprint(3), fingerprint);
  EXPECT_EQ(Rows(3), rows);
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(servers_[s]->service().layout_generation(), 1u);
    EXPECT_EQ(Groups(s).partition().num_servers(), 3);
    EXPECT_GT(Groups(s).own().FindTable("emb")->num_rows(), 0u) << "server " << s;
  }
  std::string after;
  absl::Status pulled = Groups(three.OwnerOf(probe)).own().Pull(Ctx(), "emb", {probe}, kDim, &after);
  ASSERT_TRUE(pulled.ok()) << pulled;
  EXPECT_EQ(after, before);
  // The old owner's view of a key it gave away: refused, not answered with a fresh row.
  for (int s = 0; s < 3; ++s) {
    if (s == three.OwnerOf(probe)) continue;
    std::string wrong;
    EXPECT_FALSE(Groups(s).own().Pull(Ctx(), "emb", {probe}, kDim, &wrong).ok());
  }

  Rescale(3, two, 2);
  EXPECT_EQ(Fingerprint(2), fingerprint);
  EXPECT_EQ(Rows(2), rows);
  EXPECT_TRUE(servers_[2]->service().left());
  EXPECT_FALSE(servers_[0]->service().left());
  ASSERT_TRUE(Groups(two.OwnerOf(probe)).own().Pull(Ctx(), "emb", {probe}, kDim, &after).ok());
  EXPECT_EQ(after, before);
}

TEST_F(RescaleTest, ReplicatedRowsReachEveryCopyOfTheirNewRange) {
  const Partition two = *Partition::Uniform(2, 4)->WithReplicas(2);
  const Partition three = *Partition::Uniform(3, 4)->WithReplicas(2);
  Start(two, three);
  Fill(two);  // each server's own group only: its backup copy stays empty, as a primary would have kept it
  const uint64_t fingerprint = Fingerprint(2);
  Rescale(2, three, 1);
  EXPECT_EQ(Fingerprint(3), fingerprint);
  // Group o lives on o (primary) and o + 1 (backup): both copies hold the same rows.
  for (int owner = 0; owner < 3; ++owner) {
    const int backup = (owner + 1) % 3;
    auto primary_group = Groups(owner).Group(owner);
    auto backup_group = Groups(backup).Group(owner);
    ASSERT_TRUE(primary_group.ok() && backup_group.ok());
    EXPECT_GT((*primary_group)->FindTable("emb")->num_rows(), 0u);
    EXPECT_EQ((*primary_group)->Fingerprint(), (*backup_group)->Fingerprint()) << "range group " << owner;
  }
}

TEST_F(RescaleTest, AbortedRescaleLeavesTheLayoutAsItWas) {
  const Partition two = *Partition::Uniform(2, 4);
  const Partition three = *Partition::Uniform(3, 4);
  Start(two, three);
  Fill(two);
  const uint64_t fingerprint = Fingerprint(2);
  for (int s = 0; s < 2; ++s) ASSERT_TRUE(Phase(s, RescaleShardRequest::SEND, 1, three, 2, /*attempt=*/1).ok());
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(Phase(s, RescaleShardRequest::ABORT, 1, three, 2, /*attempt=*/1).ok());
  // Nothing was kept: an install now has nothing to build from.
  EXPECT_TRUE(absl::IsFailedPrecondition(Phase(2, RescaleShardRequest::INSTALL, 1, three, 2, 1).status()));
  // A late piece of the aborted attempt is refused (it would otherwise start a stale layout).
  GroupChunk late;
  late.mutable_header()->set_job_id("t");
  late.set_layout_generation(1);
  late.set_attempt(1);
  late.set_sender(0);
  late.set_partition(three.ToString());
  *late.add_tables() = Emb();
  GroupChunkResponse answer;
  grpc::ClientContext context;
  absl::Status refused = FromGrpcStatus(stubs_[2]->ReceiveGroup(&context, late, &answer));
  EXPECT_TRUE(absl::IsAborted(refused)) << refused;
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(servers_[s]->service().layout_generation(), 0u);
    EXPECT_EQ(Groups(s).partition().num_servers(), 2);
  }
  EXPECT_EQ(Fingerprint(2), fingerprint);
  // The retry of the same rescale (a later attempt) goes through.
  Rescale(2, three, 1, /*attempt=*/2);
  EXPECT_EQ(Fingerprint(3), fingerprint);
}

TEST_F(RescaleTest, RefusesBadRequestsWithoutChangingAnything) {
  const Partition two = *Partition::Uniform(2, 4);
  const Partition three = *Partition::Uniform(3, 4);
  Start(two, three);
  Fill(two);
  const uint64_t fingerprint = Fingerprint(2);
  // A switch nothing was installed for.
  EXPECT_TRUE(absl::IsFailedPrecondition(Phase(0, RescaleShardRequest::SWITCH, 1, three, 2).status()));
  // Incomplete rows: only server 0 sent.
  ASSERT_TRUE(Phase(0, RescaleShardRequest::SEND, 1, three, 2).ok());
  absl::Status incomplete = Phase(1, RescaleShardRequest::INSTALL, 1, three, 2).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(incomplete)) << incomplete;
  EXPECT_NE(incomplete.message().find("server 1 has not sent"), std::string::npos) << incomplete;
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(Phase(s, RescaleShardRequest::ABORT, 1, three, 2).ok());
  // A partition that does not parse; addresses that do not match it.
  RescaleShardRequest bad;
  bad.mutable_header()->set_job_id("t");
  bad.set_phase(RescaleShardRequest::SEND);
  bad.set_layout_generation(3);
  bad.set_partition("not a partition");
  RescaleShardResponse response;
  {
    grpc::ClientContext context;
    absl::Status status = FromGrpcStatus(stubs_[0]->RescaleShard(&context, bad, &response));
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  }
  bad.set_partition(three.ToString());
  bad.add_server_addresses(addresses_[0]);
  {
    grpc::ClientContext context;
    absl::Status status = FromGrpcStatus(stubs_[0]->RescaleShard(&context, bad, &response));
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  }
  // Rows from a sender out of range, and rows of a rescale the server already passed.
  GroupChunk piece;
  piece.mutable_header()->set_job_id("t");
  piece.set_layout_generation(5);
  piece.set_sender(-1);
  GroupChunkResponse answer;
  {
    grpc::ClientContext context;
    absl::Status status = FromGrpcStatus(stubs_[1]->ReceiveGroup(&context, piece, &answer));
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  }
  // A piece claiming rows that are not whole rows.
  piece.set_sender(0);
  piece.set_owner(0);
  *piece.add_tables() = Emb();
  piece.set_table("emb");
  piece.set_keys(std::string(8, 'k'));
  piece.set_rows(std::string(12, 'r'));
  {
    grpc::ClientContext context;
    absl::Status status = FromGrpcStatus(stubs_[1]->ReceiveGroup(&context, piece, &answer));
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  }
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(Phase(s, RescaleShardRequest::ABORT, 5, three, 2).ok());
  for (int s = 0; s < 2; ++s) EXPECT_EQ(servers_[s]->service().layout_generation(), 0u);
  EXPECT_EQ(Fingerprint(2), fingerprint);
}

}  // namespace
}  // namespace kestrel
