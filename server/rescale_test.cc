// Rescale between live in-process servers over gRPC (server/rescale_participant.h RescaleShard): the scheduler's part is
// played by the test, phase by phase, as scheduler/rescaler.cc drives it.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/hash.h"
#include "common/held_reads.h"
#include "common/limits.h"
#include "common/partition.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/hosted_shards.h"
#include "server/ps_server.h"

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
      options.owner = s;
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

  // `new_rank`: server s's rank in `next` (-2: s, or -1 when s is beyond it).
  absl::StatusOr<RescaleShardResponse> Phase(int s, RescaleShardRequest::Phase phase, uint64_t generation,
                                             const Partition& next, int senders, uint64_t attempt = 0,
                                             int new_rank = -2, const std::vector<int>& from = {},
                                             const std::vector<std::string>& addresses = {}) {
    RescaleShardRequest request;
    request.set_new_rank(new_rank != -2 ? new_rank : s < next.num_servers() ? s : -1);
    for (int f : from) request.add_from_servers(f);
    request.mutable_header()->set_job_id("t");
    request.mutable_header()->set_worker_rank(-1);
    request.set_phase(phase);
    request.set_layout_generation(generation);
    request.set_attempt(attempt);
    request.set_partition(next.ToString());
    for (int t = 0; t < next.num_servers(); ++t) {
      request.add_server_addresses(addresses.empty() ? addresses_[t] : addresses[t]);
    }
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

  // A rescale that removes server `removed` (dead: it takes no part) from a layout of `old_n`: the others send
  // what they serve and are renumbered.
  void RemoveServer(int old_n, int removed, const Partition& next, uint64_t generation) {
    std::vector<int> from, new_rank(old_n, -1);
    std::vector<std::string> addresses;
    for (int s = 0, r = 0; s < old_n; ++s) {
      if (s == removed) continue;
      from.push_back(s);
      new_rank[s] = r++;
      addresses.push_back(addresses_[s]);
    }
    for (auto phase : {RescaleShardRequest::SEND, RescaleShardRequest::INSTALL, RescaleShardRequest::SWITCH}) {
      for (int s : from) {
        auto answer = Phase(s, phase, generation, next, old_n, 0, new_rank[s], from, addresses);
        ASSERT_TRUE(answer.ok()) << "phase " << phase << " on server " << s << ": " << answer.status();
      }
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
    EXPECT_EQ(servers_[s]->service().layout().generation(), 1u);
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
  EXPECT_TRUE(servers_[2]->service().layout().left());
  EXPECT_FALSE(servers_[0]->service().layout().left());
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
    EXPECT_EQ(servers_[s]->service().layout().generation(), 0u);
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
  for (int s = 0; s < 2; ++s) EXPECT_EQ(servers_[s]->service().layout().generation(), 0u);
  EXPECT_EQ(Fingerprint(2), fingerprint);
}

TEST_F(RescaleTest, ADeadMiddleServerIsRemovedFromItsBackupsAndTheRanksAboveRenumbered) {
  // Three servers, two copies of every range; server 1 dies and is failed over, then removed.
  const Partition three = *Partition::Uniform(3, 4)->WithReplicas(2);
  const Partition two = *Partition::Uniform(2, 4)->WithReplicas(2);
  Start(three, three);
  for (int s = 0; s < 3; ++s) {
    for (Shard* group : Groups(s).shards()) ASSERT_TRUE(group->CreateTable(Ctx(), Emb()).ok());
  }
  // Every copy of every range gets the same pushes, as a primary forwarding to its backups keeps them.
  std::map<int, std::vector<uint64_t>> keys;
  for (uint64_t i = 0; i < 3000; ++i) keys[three.OwnerOf(Mix64(i))].push_back(Mix64(i));
  for (auto& [owner, mine] : keys) {
    std::sort(mine.begin(), mine.end());
    std::vector<float> grads(mine.size() * kDim, 0.125f);
    for (int j = 0; j < 2; ++j) {
      auto group = Groups(three.ReplicaOfOwner(owner, j)).Group(owner);
      ASSERT_TRUE(group.ok());
      ASSERT_TRUE((*group)->Push(Ctx(), "emb", mine, grads, kDim).ok());
    }
  }
  const uint64_t fingerprint = Fingerprint(3);
  const uint64_t probe = keys[1].front();  // a row server 1 owned
  std::string before;
  ASSERT_TRUE(Groups(1).own().Pull(Ctx(), "emb", {probe}, kDim, &before).ok());
  servers_[1]->Shutdown(absl::ZeroDuration());
  for (int s : {0, 2}) ASSERT_TRUE(Groups(s).routing().Update(1, {1}).ok());  // failed over: 2 serves group 1

  RemoveServer(3, 1, two, 1);
  // Server 2 is rank 1 now: the two live servers hold the whole table, in both copies of each range.
  EXPECT_EQ(Groups(2).server(), 1);
  EXPECT_EQ(Groups(2).partition().num_servers(), 2);
  uint64_t after = 0;
  for (int s : {0, 2}) after += Groups(s).own().FindTable("emb")->RowsFingerprint();
  EXPECT_EQ(after, fingerprint);
  for (int owner = 0; owner < 2; ++owner) {
    const int primary = owner == 0 ? 0 : 2, backup = owner == 0 ? 2 : 0;
    EXPECT_EQ((*Groups(primary).Group(owner))->Fingerprint(), (*Groups(backup).Group(owner))->Fingerprint())
        << "range group " << owner;
  }
  std::string moved;
  const int holder = two.OwnerOf(probe) == 0 ? 0 : 2;
  ASSERT_TRUE(Groups(holder).own().Pull(Ctx(), "emb", {probe}, kDim, &moved).ok());
  EXPECT_EQ(moved, before) << "the dead server's row, from its backup";
}

TEST_F(RescaleTest, RestoreIntoANewLayoutServesTheRankItNames) {
  const Partition three = *Partition::Uniform(3, 4);
  const Partition two = *Partition::Uniform(2, 4);
  Start(three, three);
  RestoreShardRequest request;
  request.mutable_header()->set_job_id("t");
  request.set_layout_generation(1);
  request.set_partition(two.ToString());
  request.set_rank(1);
  request.add_worker_ids(0);
  request.add_worker_ids(2);
  RestoreShardResponse response;
  {
    grpc::ClientContext context;
    absl::Status status = FromGrpcStatus(stubs_[2]->Restore(&context, request, &response));
    ASSERT_TRUE(status.ok()) << status;
  }
  EXPECT_EQ(Groups(2).server(), 1);
  EXPECT_EQ(Groups(2).partition().ToString(), two.ToString());
  EXPECT_EQ(servers_[2]->service().layout().generation(), 1u);
  // Retried (the scheduler retries a rollback whose other restores failed): restored again, same layout.
  {
    grpc::ClientContext context;
    absl::Status status = FromGrpcStatus(stubs_[2]->Restore(&context, request, &response));
    EXPECT_TRUE(status.ok()) << status;
  }
  // A rank outside the layout, an older layout: refused, nothing changes.
  request.set_rank(2);
  request.set_layout_generation(2);
  {
    grpc::ClientContext context;
    EXPECT_TRUE(absl::IsInvalidArgument(FromGrpcStatus(stubs_[2]->Restore(&context, request, &response))));
  }
  request.set_rank(0);
  request.set_layout_generation(1);
  {
    grpc::ClientContext context;
    EXPECT_TRUE(absl::IsFailedPrecondition(FromGrpcStatus(stubs_[2]->Restore(&context, request, &response))));
  }
  EXPECT_EQ(Groups(2).server(), 1);
}

// One server of a one-server BSP job of three workers, serving on loopback, and a stub to it.
struct OneBspServer {
  Partition one = *Partition::Uniform(1, 1);
  std::unique_ptr<PsServer> server;
  std::unique_ptr<ParameterServer::Stub> stub;

  void Start() {
    ShardOptions options;
    options.job_id = "t";
    options.bsp_workers = 3;
    auto hosted = HostedShards::Create(options, one);
    ASSERT_TRUE(hosted.ok());
    PsServerOptions server_options;
    server_options.address = "127.0.0.1:0";
    auto started = PsServer::Start(server_options, std::shared_ptr<HostedShards>(*std::move(hosted)));
    ASSERT_TRUE(started.ok());
    server = *std::move(started);
    stub = ParameterServer::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server->port()), grpc::InsecureChannelCredentials()));
  }
  Shard& shard() { return server->service().hosted()->own(); }
};

TEST_F(RescaleTest, FenceAndCompleteSettleTheClockRemovedBspWorkersLeftHalfDone) {
  // One BSP server with three workers; worker 1 pushes half of clock 0 and dies.
  OneBspServer bsp;
  ASSERT_NO_FATAL_FAILURE(bsp.Start());
  const Partition& one = bsp.one;
  auto* server = &bsp.server;
  ParameterServer::Stub* stub = bsp.stub.get();
  Shard& shard = bsp.shard();
  ASSERT_TRUE(shard.CreateTable(Ctx(), Emb()).ok());
  const std::vector<uint64_t> key = {Mix64(3)};
  auto push = [&](int worker, int part, int parts, float value) {
    RequestContext ctx = Ctx();
    ctx.worker_rank = worker;
    ctx.clock = 0;
    ctx.part = part;
    ctx.parts = parts;
    return shard.Push(ctx, "emb", key, std::vector<float>(kDim, value), kDim);
  };
  ASSERT_TRUE(push(0, 0, 1, 1.0f).ok());
  ASSERT_TRUE(push(1, 0, 2, 50.0f).ok());
  ASSERT_TRUE(push(2, 0, 1, 3.0f).ok());
  // Values and optimizer state (Emb's Adagrad has no learning rate: only its accumulators move).
  const uint64_t before = shard.FindTable("emb")->RowsFingerprint();
  auto phase = [&](RescaleShardRequest::Phase which) -> absl::StatusOr<RescaleShardResponse> {
    RescaleShardRequest request;
    request.mutable_header()->set_job_id("t");
    request.set_phase(which);
    request.set_layout_generation(1);
    request.add_removed_workers(1);
    request.set_clock(0);
    RescaleShardResponse response;
    grpc::ClientContext context;
    absl::Status status = FromGrpcStatus(stub->RescaleShard(&context, request, &response));
    if (!status.ok()) return status;
    return response;
  };
  auto fenced = phase(RescaleShardRequest::FENCE);
  ASSERT_TRUE(fenced.ok()) << fenced.status();
  EXPECT_EQ(fenced->applied_with_removed(), 0u);
  EXPECT_TRUE(absl::IsFailedPrecondition(push(1, 1, 2, 50.0f))) << "the removed worker is fenced off";
  auto completed = phase(RescaleShardRequest::COMPLETE);
  ASSERT_TRUE(completed.ok()) << completed.status();
  EXPECT_EQ(completed->completed(), 1u);
  const uint64_t after = shard.FindTable("emb")->RowsFingerprint();
  EXPECT_NE(after, before) << "clock 0 was applied";
  // Applied once: a second COMPLETE changes nothing, and FENCE now says it was completed without them.
  ASSERT_TRUE(phase(RescaleShardRequest::COMPLETE).ok());
  EXPECT_EQ(shard.FindTable("emb")->RowsFingerprint(), after);
  EXPECT_EQ(phase(RescaleShardRequest::FENCE)->applied_with_removed(), 0u);

  // The switch to the two workers left, in place: the rows stay, and clock 1 completes with ranks 0 and 1.
  RescaleShardRequest keep;
  keep.mutable_header()->set_job_id("t");
  keep.set_phase(RescaleShardRequest::SWITCH);
  keep.set_keep_groups(true);
  keep.set_layout_generation(1);
  keep.set_partition(one.ToString());
  keep.set_new_rank(0);
  keep.set_bsp_workers(2);
  keep.add_worker_ids(0);
  keep.add_worker_ids(2);
  for (int attempt = 0; attempt < 2; ++attempt) {  // a retried switch is answered OK
    RescaleShardResponse response;
    grpc::ClientContext context;
    absl::Status status = FromGrpcStatus(stub->RescaleShard(&context, keep, &response));
    ASSERT_TRUE(status.ok()) << status;
  }
  EXPECT_EQ((*server)->service().layout().generation(), 1u);
  EXPECT_EQ(shard.bsp_workers(), 2);
  EXPECT_EQ(shard.FindTable("emb")->RowsFingerprint(), after) << "the rows stayed";
  auto push1 = [&](int worker) {
    RequestContext ctx = Ctx();
    ctx.worker_rank = worker;
    ctx.clock = 1;
    return shard.Push(ctx, "emb", key, std::vector<float>(kDim, 1.0f), kDim);
  };
  ASSERT_TRUE(push1(0).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(push1(2))) << "rank 2 is beyond the two workers";
  ASSERT_TRUE(push1(1).ok());
  EXPECT_NE(shard.FindTable("emb")->RowsFingerprint(), after) << "clock 1 applied with two workers";
  // A switch whose boundary or worker count cannot be is refused before anything changes.
  for (auto [clock, workers] : {std::pair<int64_t, int>{-1, 2}, {5, -1}, {5, kMaxWorkers + 1}}) {
    RescaleShardRequest bad = keep;
    bad.set_layout_generation(2);
    bad.set_clock(clock);
    bad.set_workers(workers);
    RescaleShardResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(absl::IsInvalidArgument(FromGrpcStatus(stub->RescaleShard(&context, bad, &response))))
        << clock << " " << workers;
    EXPECT_EQ((*server)->service().layout().generation(), 1u);
  }
  // A switch in place that names another layout is refused.
  keep.set_layout_generation(2);
  keep.set_new_rank(1);
  RescaleShardResponse response;
  grpc::ClientContext context;
  EXPECT_TRUE(absl::IsInvalidArgument(FromGrpcStatus(stub->RescaleShard(&context, keep, &response))));
}

TEST_F(RescaleTest, FrontierAndHoldStopTheOthersWhereARemovedWorkerBlocksThem) {
  // One BSP server, three workers, two tables. Worker 1 died after clock 0: of clock 1 it pushed only "late".
  OneBspServer bsp;
  ASSERT_NO_FATAL_FAILURE(bsp.Start());
  ParameterServer::Stub* stub = bsp.stub.get();
  Shard& shard = bsp.shard();
  TableConfig late = Emb();
  late.set_name("late");
  ASSERT_TRUE(shard.CreateTable(Ctx(), Emb()).ok());
  ASSERT_TRUE(shard.CreateTable(Ctx(), late).ok());
  const std::vector<uint64_t> key = {Mix64(3)};
  auto push = [&](const std::string& table, int worker, int64_t clock) {
    RequestContext ctx = Ctx();
    ctx.worker_rank = worker;
    ctx.clock = clock;
    return shard.Push(ctx, table, key, std::vector<float>(kDim, 1.0f), kDim);
  };
  for (const std::string table : {"emb", "late"}) {
    for (int w = 0; w < 3; ++w) ASSERT_TRUE(push(table, w, 0).ok());
  }
  ASSERT_TRUE(push("emb", 0, 1).ok());
  ASSERT_TRUE(push("emb", 2, 1).ok());
  ASSERT_TRUE(push("late", 1, 1).ok());
  auto call = [&](RescaleShardRequest request) -> absl::StatusOr<RescaleShardResponse> {
    request.mutable_header()->set_job_id("t");
    request.set_layout_generation(1);
    RescaleShardResponse response;
    grpc::ClientContext context;
    absl::Status status = FromGrpcStatus(stub->RescaleShard(&context, request, &response));
    if (!status.ok()) return status;
    return response;
  };
  RescaleShardRequest frontier;
  frontier.set_phase(RescaleShardRequest::FRONTIER);
  frontier.add_removed_workers(1);
  absl::StatusOr<RescaleShardResponse> found = call(frontier);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->frontier(), 1) << "its clock 1 is missing on emb";
  EXPECT_EQ(found->frontier_high(), 2) << "late buffers its part of clock 1";
  // Worker 0 reads iteration 2 of emb: it waits for clock 1, which worker 1 never completes.
  RequestContext reader = Ctx();
  reader.worker_rank = 0;
  std::vector<absl::Status> answers;
  absl::StatusOr<bool> waits = shard.AwaitClocks(reader, "emb", TableConfig::SPARSE, 2, absl::InfiniteFuture(),
                                                 [&](absl::Status s) { answers.push_back(s); });
  ASSERT_TRUE(waits.ok());
  EXPECT_FALSE(*waits);
  // Bad holds are refused and change nothing.
  RescaleShardRequest hold;
  hold.set_phase(RescaleShardRequest::HOLD);
  hold.set_clock(2);
  for (int64_t from : {int64_t{-1}, int64_t{3}}) {
    RescaleShardRequest bad = hold;
    bad.set_hold_reads_from(from);
    EXPECT_TRUE(absl::IsInvalidArgument(call(bad).status())) << from;
  }
  RescaleShardRequest nobody = frontier;
  nobody.clear_removed_workers();
  EXPECT_TRUE(absl::IsInvalidArgument(call(nobody).status()));
  nobody.add_removed_workers(-1);
  EXPECT_TRUE(absl::IsInvalidArgument(call(nobody).status()));
  EXPECT_TRUE(answers.empty()) << "still waiting";
  // The hold answers the waiting read with its boundary; later reads of the held iterations too; earlier ones run.
  hold.set_hold_reads_from(2);
  ASSERT_TRUE(call(hold).ok());
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(HeldClockOf(answers[0]), 2) << answers[0];
  absl::StatusOr<bool> again =
      shard.AwaitClocks(reader, "late", TableConfig::SPARSE, 2, absl::InfiniteFuture(), [](absl::Status) {});
  EXPECT_EQ(HeldClockOf(again.status()), 2) << again.status();
  EXPECT_TRUE(*shard.AwaitClocks(reader, "emb", TableConfig::SPARSE, 1, absl::InfiniteFuture(), [](absl::Status) {}));
  // An abort lifts it: the read waits again.
  RescaleShardRequest abort;
  abort.set_phase(RescaleShardRequest::ABORT);
  ASSERT_TRUE(call(abort).ok());
  absl::StatusOr<bool> lifted =
      shard.AwaitClocks(reader, "emb", TableConfig::SPARSE, 2, absl::InfiniteFuture(), [](absl::Status) {});
  ASSERT_TRUE(lifted.ok()) << lifted.status();
  EXPECT_FALSE(*lifted);
}

}  // namespace
}  // namespace kestrel
