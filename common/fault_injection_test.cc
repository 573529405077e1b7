#include "common/fault_injection.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace kestrel {
namespace {

// Each child of EXPECT_EXIT reads the environment it sets on its first CrashPoint (this parent never calls one).

TEST(FaultInjectionTest, DiesAtTheSelectedHitOfThePoint) {
  EXPECT_EXIT(
      {
        setenv("KESTREL_FAULT_POINT", "test.point@3", 1);
        CrashPoint("test.point");
        CrashPoint("test.other");
        CrashPoint("test.point");
        fprintf(stderr, "alive after two hits\n");
        CrashPoint("test.point");
        _exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "alive after two hits");
}

TEST(FaultInjectionTest, WithoutTheVariableNothingDies) {
  EXPECT_EXIT(
      {
        unsetenv("KESTREL_FAULT_POINT");
        for (int i = 0; i < 5; ++i) CrashPoint("test.point");
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(FaultInjectionTest, OnceFileKillsOnlyTheFirstProcess) {
  const std::string once = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/fault_once";
  unlink(once.c_str());
  auto hit = [&] {
    setenv("KESTREL_FAULT_POINT", "test.point", 1);
    setenv("KESTREL_FAULT_ONCE", once.c_str(), 1);
    CrashPoint("test.point");
    _exit(0);
  };
  EXPECT_EXIT(hit(), ::testing::KilledBySignal(SIGKILL), "") << "the first process dies";
  ASSERT_EQ(access(once.c_str(), F_OK), 0) << "the first process left " << once;
  EXPECT_EXIT(hit(), ::testing::ExitedWithCode(0), "") << "a later one (a replacement) lives on";
  unlink(once.c_str());
}

}  // namespace
}  // namespace kestrel
