#include "client/registration.h"

#include <deque>

#include "client/scheduler_client_testing.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

// Answers Register from a script (the last answer repeats).
struct ScriptedScheduler {
  explicit ScriptedScheduler(std::deque<absl::StatusOr<RegisterResponse>> answers) : answers(std::move(answers)) {
    client.register_ = [this](MemberRole, const std::string&, int) {
      absl::StatusOr<RegisterResponse> answer = this->answers.front();
      if (this->answers.size() > 1) this->answers.pop_front();
      return answer;
    };
  }
  std::deque<absl::StatusOr<RegisterResponse>> answers;
  SchedulerClientForTests client;
};

RegisterResponse Rank(int rank) {
  RegisterResponse r;
  r.set_rank(rank);
  return r;
}

TEST(RegisterWithRetryTest, RetriesWhileTheSchedulerIsDownOrThePredecessorIsAlive) {
  ScriptedScheduler scheduler({absl::UnavailableError("not up"), absl::AlreadyExistsError("predecessor"), Rank(3)});
  absl::StatusOr<Registered> r =
      RegisterWithRetry(scheduler.client, "sched:1", ROLE_WORKER, "", 3, absl::Seconds(30));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->answer.rank(), 3);
  EXPECT_EQ(scheduler.client.registers, 3);
  EXPECT_LE(r->sent, std::chrono::steady_clock::now());
}

TEST(RegisterWithRetryTest, AnswersOutOfRangeAsIsAndOtherRefusalsAtOnceNamingTheScheduler) {
  ScriptedScheduler removed({absl::OutOfRangeError("removed by an elastic rescale")});
  absl::StatusOr<Registered> r = RegisterWithRetry(removed.client, "sched:1", ROLE_SERVER, "h:1", 0, absl::Seconds(30));
  EXPECT_EQ(r.status(), absl::OutOfRangeError("removed by an elastic rescale"));

  ScriptedScheduler refused({absl::InvalidArgumentError("id 9 is out of range")});
  r = RegisterWithRetry(refused.client, "sched:1", ROLE_SERVER, "h:1", 9, absl::Seconds(30));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "cannot register with the scheduler at sched:1: id 9 is out of range");
  EXPECT_EQ(refused.client.registers, 1);
}

TEST(RegisterWithRetryTest, GivesUpAtTheTimeoutWithTheLastAnswer) {
  ScriptedScheduler down({absl::UnavailableError("connection refused")});
  const absl::Time start = absl::Now();
  absl::StatusOr<Registered> r = RegisterWithRetry(down.client, "sched:1", ROLE_WORKER, "", -1, 3 * kRegisterRetry);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("connection refused"), absl::string_view::npos);
  EXPECT_GE(down.client.registers, 2);
  EXPECT_LE(down.client.registers, 3);
  EXPECT_GE(absl::Now() - start, kRegisterRetry);
}

}  // namespace
}  // namespace kestrel
