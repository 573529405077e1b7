#include "common/server_addresses.h"

#include "gtest/gtest.h"

namespace kestrel {
namespace {

TEST(ServerAddressesTest, AnEmptyEntryKeepsTheLastAddressButIsNotAlive) {
  ServerAddresses addresses(3);
  EXPECT_EQ(addresses.Last(), (std::vector<std::string>{"", "", ""}));
  EXPECT_EQ(addresses.IfAlive(0), "");
  addresses.Update({"a:1", "b:1", "c:1"});
  const uint64_t v = addresses.version();
  EXPECT_EQ(addresses.IfAlive(1), "b:1");
  addresses.Update({"a:1", "", "c:1"});  // b died
  EXPECT_EQ(addresses.version(), v);    // no address changed
  EXPECT_EQ(addresses.Last()[1], "b:1");
  EXPECT_EQ(addresses.IfAlive(1), "");
  addresses.Update({"a:1", "b:2", "c:1", "d:1"});  // its replacement elsewhere; more entries than servers
  EXPECT_EQ(addresses.version(), v + 1);
  EXPECT_EQ(addresses.Last(), (std::vector<std::string>{"a:1", "b:2", "c:1"}));
  EXPECT_EQ(addresses.IfAlive(1), "b:2");
  EXPECT_EQ(addresses.IfAlive(3), "");
  EXPECT_EQ(addresses.IfAlive(-1), "");
}

TEST(ServerAddressesTest, ResizeDropsAndAddsRanks) {
  ServerAddresses addresses(2);
  addresses.Update({"a:1", "b:1"});
  addresses.Resize(3);
  EXPECT_EQ(addresses.num_servers(), 3);
  EXPECT_EQ(addresses.Last(), (std::vector<std::string>{"a:1", "b:1", ""}));
  EXPECT_EQ(addresses.IfAlive(2), "");
  addresses.Resize(1);
  EXPECT_EQ(addresses.Last(), (std::vector<std::string>{"a:1"}));
  EXPECT_EQ(addresses.IfAlive(1), "");
}

}  // namespace
}  // namespace kestrel
