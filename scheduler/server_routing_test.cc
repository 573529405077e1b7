#include "scheduler/server_routing.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

bool Covered(const std::vector<bool>&) { return true; }

TEST(ServerRoutingTest, FailOverTakesTheDeadAndLostOutOfServiceOnlyWhenCovered) {
  ServerRouting routing(3);
  EXPECT_EQ(routing.state().generation, 0u);
  EXPECT_TRUE(routing.FailOver({false, false, false}, Covered).empty()) << "nobody is dead";

  std::vector<bool> seen;
  EXPECT_TRUE(routing
                  .FailOver({false, true, false},
                            [&](const std::vector<bool>& out) {
                              seen = out;
                              return false;
                            })
                  .empty());
  EXPECT_EQ(seen, (std::vector<bool>{false, true, false}));
  EXPECT_EQ(routing.state().generation, 0u) << "refused: nothing changes";

  EXPECT_EQ(routing.FailOver({false, true, false}, Covered), std::vector<int>{1});
  const RoutingState state = routing.state();
  EXPECT_EQ(state.generation, 1u);
  EXPECT_EQ(state.out_of_service, std::vector<int>{1});
  EXPECT_EQ(state.failovers, 1u);
  EXPECT_TRUE(routing.out_of_service(1));
  EXPECT_FALSE(routing.out_of_service(0));
  EXPECT_TRUE(routing.FailOver({false, true, false}, Covered).empty()) << "already out of service";
}

// A server declared dead while in service stays lost (its replacement holds none of its rows) until a failover or
// a rollback; one out of service loses nothing when it dies.
TEST(ServerRoutingTest, ALostServerIsRememberedUntilAFailoverOrRollback) {
  ServerRouting routing(2);
  routing.Died(0);
  EXPECT_TRUE(routing.AnyLost());
  routing.ForgetLost();
  EXPECT_FALSE(routing.AnyLost());

  routing.Died(0);
  EXPECT_EQ(routing.FailOver({false, false}, Covered), std::vector<int>{0}) << "lost, though its replacement lives";
  EXPECT_FALSE(routing.AnyLost());
  routing.Died(0);
  EXPECT_FALSE(routing.AnyLost()) << "a server out of service serves nothing";
}

TEST(ServerRoutingTest, PutBackAndRollbackAndRescaleEachMoveTheGeneration) {
  ServerRouting routing(3);
  ASSERT_EQ(routing.FailOver({true, false, true}, Covered), (std::vector<int>{0, 2}));
  EXPECT_TRUE(routing.AnyOutOfServiceBut({0}));
  EXPECT_FALSE(routing.AnyOutOfServiceBut({0, 2}));

  for (auto [rank, alive] : {std::make_pair(0, false), std::make_pair(1, true), std::make_pair(-1, true),
                             std::make_pair(3, true)}) {
    EXPECT_TRUE(absl::IsFailedPrecondition(routing.PutBackInService(rank, alive).status())) << rank;
  }
  absl::StatusOr<uint64_t> back = routing.PutBackInService(0, true);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, 2u);
  EXPECT_EQ(routing.state().out_of_service, std::vector<int>{2});
  EXPECT_EQ(routing.state().rereplications, 1u);

  routing.AllBackInService();
  EXPECT_TRUE(routing.state().out_of_service.empty());
  EXPECT_EQ(routing.state().generation, 3u);
  routing.AllBackInService();
  EXPECT_EQ(routing.state().generation, 3u) << "nobody was out: the routing did not change";

  routing.Died(1);
  EXPECT_EQ(routing.Relayout(4), 4u);
  EXPECT_FALSE(routing.AnyLost());
  EXPECT_FALSE(routing.AnyOutOfServiceBut({}));
  EXPECT_EQ(routing.state().failovers, 2u) << "failovers are counted for the job's life";
  EXPECT_EQ(routing.FailOver({false, false, false, true}, Covered), std::vector<int>{3}) << "four ranks now";
}

}  // namespace
}  // namespace kestrel
