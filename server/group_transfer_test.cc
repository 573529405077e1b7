// GroupTransfer driven without a channel: the sending server's PeerLinks delivers each piece straight into the
// receiving server's GroupTransfer, as ReceiveGroup would.
#include "server/group_transfer.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/peer_links.h"

namespace kestrel {
namespace {

constexpr int kDim = 4;

std::unique_ptr<HostedShards> Server(int rank) {
  ShardOptions options;
  options.job_id = "t";
  options.owner = rank;
  return *HostedShards::Create(options, *Partition::Uniform(2)->WithReplicas(2));
}

// Links to one other server, in process: pieces go to its GroupTransfer. Counts them.
class InProcessLinks final : public PeerLinks {
 public:
  InProcessLinks(GroupTransfer* receiver, HostedShards* hosted) : receiver_(receiver), hosted_(hosted) {}
  void Resize(int) override {}
  void SetAddresses(const std::vector<std::string>&) override {}
  PieceStream::Deliver PiecesTo(const std::string& address, std::string what) override {
    EXPECT_EQ(address, "server1:1");
    EXPECT_EQ(what, "server 1 at server1:1");
    return [this](const GroupChunk& piece) {
      ++pieces;
      uint64_t installed = 0;
      return receiver_->Receive(*hosted_, piece, &installed);
    };
  }
  int pieces = 0;

 private:
  GroupTransfer* const receiver_;
  HostedShards* const hosted_;
};

TEST(GroupTransferTest, ACopySentThroughPeerLinksInstallsTheGroupWhole) {
  std::unique_ptr<HostedShards> source = Server(0), target = Server(1);
  Shard& group = source->own();  // server 0's ranges; server 1 holds their backup
  RequestContext ctx;
  ctx.job_id = "t";
  TableConfig table;
  table.set_name("emb");
  table.set_dim(kDim);
  ASSERT_TRUE(group.CreateTable(ctx, table).ok());
  std::vector<uint64_t> keys;
  for (uint64_t id = 0; keys.size() < 3000; ++id) {
    const uint64_t key = Partition::FeatureKey(id);
    if (group.partition().OwnerOf(key) == 0) keys.push_back(key);
  }
  std::sort(keys.begin(), keys.end());
  std::vector<float> grads(keys.size() * kDim);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.001f * static_cast<float>(i % 97);
  ASSERT_TRUE(group.Push(ctx, "emb", keys, grads, kDim).ok());
  group.StartClocksAt(7);  // the primary holds every update of clocks 0..6

  absl::StatusOr<Shard*> backup = target->Group(0);
  ASSERT_TRUE(backup.ok()) << backup.status();
  ASSERT_NE((*backup)->Fingerprint(), group.Fingerprint());
  GroupTransfer receiver("t", nullptr);
  InProcessLinks links(&receiver, target.get());
  GroupTransfer sender("t", &links);
  CopyGroupRequest request;
  request.set_owner(0);
  request.set_target(1);
  request.set_target_address("server1:1");
  CopyGroupResponse response;
  ASSERT_TRUE(sender.Send(*source, request, &response).ok());
  EXPECT_EQ(response.rows(), keys.size());
  EXPECT_GE(links.pieces, 2) << "the rows and the last piece";
  EXPECT_EQ((*backup)->Fingerprint(), group.Fingerprint()) << "the backup holds the primary's rows bit for bit";
  EXPECT_EQ((*backup)->CompleteClocks(), 7) << "the copy's clocks start where the primary's were complete";
}

TEST(GroupTransferTest, ACopyClaimingANegativeClockIsRefusedAndChangesNothing) {
  std::unique_ptr<HostedShards> target = Server(1);
  absl::StatusOr<Shard*> backup = target->Group(0);
  ASSERT_TRUE(backup.ok()) << backup.status();
  const uint64_t before = (*backup)->Fingerprint();
  GroupTransfer receiver("t", nullptr);
  GroupChunk chunk;
  chunk.mutable_header()->set_job_id("t");
  chunk.set_owner(0);
  chunk.set_last(true);
  chunk.set_complete_clocks(-5);
  uint64_t installed = 0;
  const absl::Status refused = receiver.Receive(*target, chunk, &installed);
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_EQ((*backup)->Fingerprint(), before);
  EXPECT_EQ((*backup)->CompleteClocks(), 0);
}

TEST(GroupTransferTest, WithoutPeerLinksAServerSendsNothing) {
  std::unique_ptr<HostedShards> source = Server(0);
  GroupTransfer sender("t", nullptr);
  CopyGroupRequest request;
  request.set_owner(0);
  request.set_target(1);
  request.set_target_address("server1:1");
  CopyGroupResponse response;
  EXPECT_EQ(sender.Send(*source, request, &response).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kestrel
