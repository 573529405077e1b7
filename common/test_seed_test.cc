// TestSeed: a drawn seed is taken from KESTREL_TEST_SEED when set, a fixed one never is, and both are printed
// as the line a failure carries.
#include "common/test_seed.h"

#include <cstdlib>
#include <optional>
#include <string>

#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

// Sets KESTREL_TEST_SEED (unset for nullptr) for the life of the object, then restores it.
class SeedVariable {
 public:
  explicit SeedVariable(const char* value) {
    if (const char* old = std::getenv(kTestSeedVariable); old != nullptr) old_ = old;
    Set(value);
  }
  ~SeedVariable() { Set(old_.has_value() ? old_->c_str() : nullptr); }

 private:
  static void Set(const char* value) {
    value != nullptr ? setenv(kTestSeedVariable, value, 1) : unsetenv(kTestSeedVariable);
  }
  std::optional<std::string> old_;
};

TEST(TestSeedTest, DrawnSeedIsReadFromTheEnvironmentAndPrintedForReplay) {
  SeedVariable variable("18446744073709551615");
  ::testing::internal::CaptureStdout();
  const TestSeed seed;
  const std::string printed = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(seed.value(), 18446744073709551615u);
  EXPECT_EQ(seed.description(), "seed=18446744073709551615 (replay: KESTREL_TEST_SEED=18446744073709551615)");
  EXPECT_EQ(printed, "TestSeedTest.DrawnSeedIsReadFromTheEnvironmentAndPrintedForReplay: " + seed.description() +
                         "\n");
}

TEST(TestSeedTest, DrawnSeedWithoutTheVariableIsFresh) {
  SeedVariable variable(nullptr);
  const TestSeed a;
  const TestSeed b;
  const TestSeed c;
  // Three 32-bit draws from std::random_device all equal: about one chance in 2^64.
  EXPECT_FALSE(a.value() == b.value() && b.value() == c.value()) << a.value();
  EXPECT_EQ(a.description(), "seed=" + std::to_string(a.value()) +
                                 " (replay: KESTREL_TEST_SEED=" + std::to_string(a.value()) + ")");
  SeedVariable empty("");
  const TestSeed d;  // empty counts as unset: no failure
}

TEST(TestSeedTest, FixedSeedIgnoresTheEnvironment) {
  SeedVariable variable("5");
  const TestSeed seed(7);
  EXPECT_EQ(seed.value(), 7u);
  EXPECT_EQ(seed.description(), "seed=7 (fixed in the test)");
}

TEST(TestSeedTest, AVariableThatIsNotANumberFailsTheTest) {
  SeedVariable variable("12abc");
  EXPECT_NONFATAL_FAILURE({ const TestSeed seed; }, "KESTREL_TEST_SEED=\"12abc\" is not a seed");
}

TEST(TestSeedTest, FailuresCarryTheSeed) {
  SeedVariable variable("42");
  // The seed's line is in the trace of every failure while the TestSeed lives.
  EXPECT_NONFATAL_FAILURE(
      {
        const TestSeed seed;
        ADD_FAILURE() << "inside";
      },
      "seed=42 (replay: KESTREL_TEST_SEED=42)");
}

}  // namespace
}  // namespace kestrel
