#include "server/hosted_shards.h"

#include "gtest/gtest.h"

namespace kestrel {
namespace {

ShardOptions Options(int server) {
  ShardOptions options;
  options.job_id = "t";
  options.owner = server;
  return options;
}

TEST(HostedShardsTest, UnreplicatedServerHoldsItsOwnGroupOnly) {
  auto hosted = HostedShards::Create(Options(1), *Partition::Uniform(3));
  ASSERT_TRUE(hosted.ok()) << hosted.status();
  EXPECT_FALSE((*hosted)->replicated());
  ASSERT_EQ((*hosted)->shards().size(), 1u);
  EXPECT_EQ((*hosted)->own().owner(), 1);
  EXPECT_EQ(*(*hosted)->Group(std::nullopt), &(*hosted)->own());
  EXPECT_EQ(*(*hosted)->Group(1), &(*hosted)->own());
  EXPECT_TRUE(absl::IsNotFound((*hosted)->Group(0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument((*hosted)->Group(3).status()));
  EXPECT_TRUE(absl::IsInvalidArgument((*hosted)->Group(-1).status()));
  EXPECT_TRUE((*hosted)->CheckPrimary(0).ok());  // nothing to check without replicas
  EXPECT_TRUE((*hosted)->BackupsOf(1).empty());
}

TEST(HostedShardsTest, ReplicatedServerHoldsItsNeighboursBackupsAndFollowsRouting) {
  const Partition partition = *Partition::Uniform(3, 2)->WithReplicas(2);
  auto hosted = HostedShards::Create(Options(1), partition);
  ASSERT_TRUE(hosted.ok()) << hosted.status();
  ASSERT_EQ((*hosted)->shards().size(), 2u);
  EXPECT_EQ((*hosted)->shards()[0]->owner(), 1);  // own
  EXPECT_EQ((*hosted)->shards()[1]->owner(), 0);  // replica 1 of server 0's ranges
  EXPECT_EQ((*hosted)->shards()[1]->ranges(), partition.RangesOf(0));
  EXPECT_TRUE(absl::IsNotFound((*hosted)->Group(2).status()));

  // Every server in service: primary of its own ranges, forwarding to the next server.
  EXPECT_TRUE((*hosted)->CheckPrimary(1).ok());
  EXPECT_EQ((*hosted)->BackupsOf(1), std::vector<int>{2});
  int told = 0;
  (*hosted)->SetGenerationListener([&told] { ++told; });
  absl::Status not_primary = (*hosted)->CheckPrimary(0);
  EXPECT_TRUE(absl::IsUnavailable(not_primary)) << not_primary;
  EXPECT_EQ(told, 1);  // asks the scheduler for a newer routing

  // Server 0 fails over to this server; server 2 (this server's backup) is out too.
  ASSERT_TRUE((*hosted)->routing().Update(1, {0, 2}).ok());
  EXPECT_TRUE((*hosted)->CheckPrimary(0).ok());
  EXPECT_TRUE((*hosted)->BackupsOf(0).empty());
  EXPECT_TRUE((*hosted)->BackupsOf(1).empty());
  EXPECT_TRUE(absl::IsInvalidArgument((*hosted)->routing().Update(2, {7})));
  EXPECT_EQ((*hosted)->routing_generation(), 1u);
}

}  // namespace
}  // namespace kestrel
