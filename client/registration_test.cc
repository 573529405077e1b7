#include "client/registration.h"

#include <deque>

#include "gtest/gtest.h"

namespace kestrel {
namespace {

// Answers Register from a script; every other call is unimplemented.
class ScriptedScheduler final : public SchedulerClient {
 public:
  explicit ScriptedScheduler(std::deque<absl::StatusOr<RegisterResponse>> answers) : answers_(std::move(answers)) {}
  int calls = 0;

  absl::StatusOr<RegisterResponse> Register(MemberRole, const std::string&, int) override {
    ++calls;
    absl::StatusOr<RegisterResponse> answer = answers_.front();
    if (answers_.size() > 1) answers_.pop_front();
    return answer;
  }
  absl::StatusOr<HeartbeatResponse> Heartbeat(MemberRole, int, const std::string&, uint64_t, int64_t) override {
    return absl::UnimplementedError("");
  }
  absl::StatusOr<int64_t> WaitToStart(int, int64_t, uint64_t, const std::string&, uint64_t, int64_t*) override {
    return absl::UnimplementedError("");
  }
  absl::StatusOr<int64_t> Advance(int, int64_t, uint64_t, const std::string&, bool, const WorkerState*, uint64_t,
                                  int64_t*) override {
    return absl::UnimplementedError("");
  }
  absl::Status Leave(int, int64_t, uint64_t, const std::string&, uint64_t) override {
    return absl::UnimplementedError("");
  }
  absl::StatusOr<DescribeResponse> Describe() override { return absl::UnimplementedError(""); }
  absl::StatusOr<RegisterResponse> Rejoin(int, const std::string&) override { return absl::UnimplementedError(""); }
  absl::StatusOr<RequestRollbackResponse> RequestRollback(int, const std::string&, uint64_t,
                                                          const std::string&) override {
    return absl::UnimplementedError("");
  }
  absl::StatusOr<int64_t> RequestCheckpoint() override { return absl::UnimplementedError(""); }
  absl::StatusOr<ScaleResponse> Scale(ScaleRequest, absl::Duration) override { return absl::UnimplementedError(""); }

 private:
  std::deque<absl::StatusOr<RegisterResponse>> answers_;
};

RegisterResponse Rank(int rank) {
  RegisterResponse r;
  r.set_rank(rank);
  return r;
}

TEST(RegisterWithRetryTest, RetriesWhileTheSchedulerIsDownOrThePredecessorIsAlive) {
  ScriptedScheduler scheduler({absl::UnavailableError("not up"), absl::AlreadyExistsError("predecessor"), Rank(3)});
  absl::StatusOr<Registered> r =
      RegisterWithRetry(scheduler, "sched:1", ROLE_WORKER, "", 3, absl::Seconds(30));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->answer.rank(), 3);
  EXPECT_EQ(scheduler.calls, 3);
  EXPECT_LE(r->sent, std::chrono::steady_clock::now());
}

TEST(RegisterWithRetryTest, AnswersOutOfRangeAsIsAndOtherRefusalsAtOnceNamingTheScheduler) {
  ScriptedScheduler removed({absl::OutOfRangeError("removed by an elastic rescale")});
  absl::StatusOr<Registered> r = RegisterWithRetry(removed, "sched:1", ROLE_SERVER, "h:1", 0, absl::Seconds(30));
  EXPECT_EQ(r.status(), absl::OutOfRangeError("removed by an elastic rescale"));

  ScriptedScheduler refused({absl::InvalidArgumentError("id 9 is out of range")});
  r = RegisterWithRetry(refused, "sched:1", ROLE_SERVER, "h:1", 9, absl::Seconds(30));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "cannot register with the scheduler at sched:1: id 9 is out of range");
  EXPECT_EQ(refused.calls, 1);
}

TEST(RegisterWithRetryTest, GivesUpAtTheTimeoutWithTheLastAnswer) {
  ScriptedScheduler down({absl::UnavailableError("connection refused")});
  const absl::Time start = absl::Now();
  absl::StatusOr<Registered> r = RegisterWithRetry(down, "sched:1", ROLE_WORKER, "", -1, 3 * kRegisterRetry);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("connection refused"), absl::string_view::npos);
  EXPECT_GE(down.calls, 2);
  EXPECT_LE(down.calls, 3);
  EXPECT_GE(absl::Now() - start, kRegisterRetry);
}

}  // namespace
}  // namespace kestrel
