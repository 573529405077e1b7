// The seed of a randomized test: drawn or fixed, printed, and carried by the test's failures.
#include "common/test_seed.h"

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kestrel {
namespace {

// KESTREL_TEST_SEED when it is set (and not empty), else a fresh seed.
uint64_t DrawSeed() {
  if (const char* env = std::getenv(kTestSeedVariable); env != nullptr && *env != '\0') {
    uint64_t seed = 0;
    if (absl::SimpleAtoi(env, &seed)) return seed;
    ADD_FAILURE() << kTestSeedVariable << "=\"" << env << "\" is not a seed (a decimal number from 0 to 2^64 - 1)";
  }
  return std::random_device{}();
}

}  // namespace

TestSeed::TestSeed() : TestSeed(DrawSeed(), "") {}

TestSeed::TestSeed(uint64_t seed) : TestSeed(seed, "fixed in the test") {}

TestSeed::TestSeed(uint64_t seed, std::string origin)
    : seed_(seed),
      description_(absl::StrCat("seed=", seed, " (",
                                origin.empty() ? absl::StrCat("replay: ", kTestSeedVariable, "=", seed) : origin,
                                ")")),
      trace_(__FILE__, __LINE__, description_) {
  std::string line = description_;
  if (const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info(); test != nullptr) {
    line = absl::StrCat(test->test_suite_name(), ".", test->name(), ": ", line);
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  ::testing::Test::RecordProperty("seed", absl::StrCat(seed));
}

}  // namespace kestrel
