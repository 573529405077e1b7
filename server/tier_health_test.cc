#include "server/tier_health.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

TEST(TierHealthTest, HealthyUntilAFailureIsRecorded) {
  TierHealth health(/*owner=*/4);
  int told = 0;
  health.SetListener([&told](const absl::Status&) { ++told; });
  EXPECT_TRUE(health.Check().ok());
  EXPECT_TRUE(health.Failed(absl::OkStatus()).ok());
  EXPECT_TRUE(health.Check().ok());
  EXPECT_EQ(told, 0);
}

TEST(TierHealthTest, TheFirstFailureIsWhatEveryoneGetsUntilReset) {
  TierHealth health(/*owner=*/4);
  std::vector<absl::Status> told;
  health.SetListener([&told](const absl::Status& status) { told.push_back(status); });
  const absl::Status first = health.Failed(absl::UnavailableError("disk full"));
  EXPECT_EQ(first.code(), absl::StatusCode::kFailedPrecondition) << first;
  EXPECT_TRUE(absl::StrContains(first.message(), "shard 4: its disk tier failed")) << first;
  EXPECT_TRUE(absl::StrContains(first.message(), "disk full")) << first;
  EXPECT_EQ(health.Check(), first);
  const absl::Status second = health.Failed(absl::DataLossError("torn page"));
  EXPECT_EQ(second, first) << "the first failure is the one named";
  ASSERT_EQ(told.size(), 2u) << "the listener hears every failure";
  EXPECT_EQ(told[0], absl::UnavailableError("disk full"));
  EXPECT_EQ(told[1], absl::DataLossError("torn page"));

  health.Reset();
  EXPECT_TRUE(health.Check().ok());
  const absl::Status again = health.Failed(absl::DataLossError("torn page"));
  EXPECT_TRUE(absl::StrContains(again.message(), "torn page")) << again;
  EXPECT_EQ(told.size(), 3u) << "the listener stays across a Reset";
}

TEST(TierHealthTest, WithoutAListenerFailuresAreStillRecorded) {
  TierHealth health(0);
  EXPECT_EQ(health.Failed(absl::InternalError("x")).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(health.Check().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(TierHealthTest, ConcurrentFailuresAgreeOnOneError) {
  TierHealth health(1);
  std::atomic<int> told{0};
  health.SetListener([&told](const absl::Status&) { ++told; });
  constexpr int kThreads = 8;
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&health, &errors, t] {
      errors[t] = std::string(health.Failed(absl::UnavailableError(absl::StrCat("failure ", t))).message());
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::string& error : errors) EXPECT_EQ(error, errors[0]);
  EXPECT_EQ(std::string(health.Check().message()), errors[0]);
  EXPECT_EQ(told.load(), kThreads);
}

}  // namespace
}  // namespace kestrel
