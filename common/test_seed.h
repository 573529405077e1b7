// The seed of a randomized test, printed with the test's output so that any run can be replayed from it.
//
//   TEST(FooTest, RandomKills) {
//     const TestSeed seed;  // prints "seed=N (replay: KESTREL_TEST_SEED=N)"
//     std::mt19937 rng(seed.value());
//     ...
//   }
//
// A drawn seed comes from the environment variable KESTREL_TEST_SEED when it is set and not empty (a decimal
// number), else from std::random_device. Replay a run with the seed it printed, and only the test that printed it:
//
//   bazel test //tests:recovery_test --test_env=KESTREL_TEST_SEED=N --test_filter=RecoveryTest.Name
//
// Property tests with a seed written in the test use TestSeed(7): it is printed the same way and never taken
// from the environment (their expectations may depend on it). Test-only.
#ifndef KESTREL_COMMON_TEST_SEED_H_
#define KESTREL_COMMON_TEST_SEED_H_

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace kestrel {

// The environment variable a drawn TestSeed is read from.
inline constexpr char kTestSeedVariable[] = "KESTREL_TEST_SEED";

// One test's seed. Construction prints it (stdout, which the test log keeps, and the test's XML properties as
// "seed"), and for as long as the object lives every failure of the test carries the same line, so keep it for
// the whole test body. A KESTREL_TEST_SEED that is not a number fails the test (and a seed is drawn instead).
// Not copyable; use from the test's own thread.
class TestSeed {
 public:
  // Drawn: KESTREL_TEST_SEED when set and not empty, else fresh from std::random_device.
  TestSeed();
  // Fixed in the test: `seed`, whatever the environment says.
  explicit TestSeed(uint64_t seed);

  TestSeed(const TestSeed&) = delete;
  TestSeed& operator=(const TestSeed&) = delete;

  uint64_t value() const { return seed_; }
  // What was printed: "seed=N (replay: KESTREL_TEST_SEED=N)", or "seed=N (fixed in the test)".
  const std::string& description() const { return description_; }

 private:
  // `origin`: how it was chosen when fixed; empty for a drawn seed (the replay line).
  TestSeed(uint64_t seed, std::string origin);

  const uint64_t seed_;
  const std::string description_;
  const ::testing::ScopedTrace trace_;
};

}  // namespace kestrel

#endif  // KESTREL_COMMON_TEST_SEED_H_
