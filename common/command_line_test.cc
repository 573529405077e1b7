#include "common/command_line.h"

#include "gtest/gtest.h"

namespace kestrel {
namespace {

TEST(CommandLineTest, HelpListsKestrelFlagsNotAbseils) {
  EXPECT_TRUE(ListedInHelp("server/main.cc"));
  EXPECT_TRUE(ListedInHelp("common/tls_flags.cc"));
  EXPECT_FALSE(ListedInHelp("absl/flags/parse.cc"));
  EXPECT_FALSE(ListedInHelp("/build/abseil/absl/log/flags.cc"));
}

}  // namespace
}  // namespace kestrel
