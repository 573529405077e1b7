// The Scheduler service over real gRPC on loopback (in-process server).
#include "scheduler/scheduler_service.h"

#include <optional>
#include <string>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

constexpr char kJob[] = "job";

class SchedulerServiceTest : public ::testing::Test {
 protected:
  // Starts the scheduler. Tests that do not heartbeat use a long interval so nobody is declared dead.
  void Start(absl::Duration heartbeat_interval) {
    SchedulerOptions options;
    options.job_id = kJob;
    options.membership.num_servers = 1;
    options.membership.num_workers = 2;
    options.membership.heartbeat_interval = heartbeat_interval;
    options.membership.heartbeat_timeout = heartbeat_interval * 1.5;
    options.consistency = ConsistencyPolicy::Ssp(1);
    SchedulerServerOptions server_options;
    server_options.address = "127.0.0.1:0";
    auto server = SchedulerServer::Start(server_options, options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    stub_ = Scheduler::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials()));
  }

  std::unique_ptr<grpc::ClientContext> Context() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return context;
  }

  RegisterResponse Register(MemberRole role, const std::string& address) {
    RegisterRequest request;
    request.set_job_id(kJob);
    request.set_role(role);
    request.set_address(address);
    request.set_requested_rank(-1);
    RegisterResponse response;
    grpc::Status status = stub_->Register(Context().get(), request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  // An Advance of worker `w` (what its Register answered), with its generation and incarnation unless told
  // otherwise.
  grpc::Status Advance(const RegisterResponse& w, int64_t finished, std::optional<uint64_t> generation = std::nullopt,
                       std::optional<std::string> incarnation = std::nullopt) {
    AdvanceRequest request;
    request.set_job_id(kJob);
    request.set_rank(w.rank());
    request.set_finished(finished);
    request.set_generation(generation.value_or(w.generation()));
    request.set_incarnation(incarnation.value_or(w.incarnation()));
    AdvanceResponse response;
    return stub_->Advance(Context().get(), request, &response);
  }

  // A WaitToStart in flight: `answered` is notified with `status` and `response` filled.
  struct PendingWait {
    WaitToStartRequest request;
    WaitToStartResponse response;
    grpc::Status status;
    absl::Notification answered;
    std::unique_ptr<grpc::ClientContext> context;
  };
  std::unique_ptr<PendingWait> StartWait(const RegisterResponse& worker, int64_t clock) {
    auto wait = std::make_unique<PendingWait>();
    wait->request.set_job_id(kJob);
    wait->request.set_rank(worker.rank());
    wait->request.set_clock(clock);
    wait->request.set_generation(worker.generation());
    wait->request.set_incarnation(worker.incarnation());
    wait->context = Context();
    PendingWait* w = wait.get();
    stub_->async()->WaitToStart(w->context.get(), &w->request, &w->response, [w](grpc::Status s) {
      w->status = s;
      w->answered.Notify();
    });
    return wait;
  }

  // Polls `condition` for up to 10 s.
  static bool Eventually(const std::function<bool()>& condition) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      if (condition()) return true;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return condition();
  }

  std::unique_ptr<SchedulerServer> server_;
  std::unique_ptr<Scheduler::Stub> stub_;
};

TEST_F(SchedulerServiceTest, WaitIsAnsweredByTheAdvanceThatAllowsIt) {
  ASSERT_NO_FATAL_FAILURE(Start(absl::Seconds(10)));
  const RegisterResponse s = Register(ROLE_SERVER, "127.0.0.1:1");
  EXPECT_EQ(s.view().job_state(), "forming");
  const RegisterResponse w0 = Register(ROLE_WORKER, "");
  const RegisterResponse w1 = Register(ROLE_WORKER, "");
  EXPECT_EQ(w1.view().job_state(), "running");
  EXPECT_EQ(w1.view().server_addresses(0), "127.0.0.1:1");
  EXPECT_EQ(w1.view().consistency(), CONSISTENCY_SSP);
  EXPECT_NE(w1.view().config_fingerprint(), 0u);
  EXPECT_EQ(w1.view().config_fingerprint(), s.view().config_fingerprint());

  // SSP(1): worker 0 may start iterations 0 and 1 while worker 1 sits at 0; iteration 2 must wait.
  ASSERT_TRUE(Advance(w0, 1).ok());
  ASSERT_TRUE(Advance(w0, 2).ok());
  // A report that skips iterations is refused (it would release waits nobody earned).
  EXPECT_EQ(Advance(w1, 2).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(server_->service().clocks().ClockOf(w1.rank()), 0);
  auto wait = StartWait(w0, 2);
  ASSERT_TRUE(Eventually([&] { return server_->service().clocks().num_waiting() == 1; }));
  EXPECT_FALSE(wait->answered.HasBeenNotified());
  // Nobody but worker 1 itself can advance it: no incarnation, worker 0's, a made-up one, or a generation
  // from the future (which used to pass) are all refused and leave its clock where it was.
  EXPECT_EQ(Advance(w1, 1, std::nullopt, "").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Advance(w1, 1, std::nullopt, w0.incarnation()).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Advance(w1, 1, std::nullopt, std::string(16, 'x')).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Advance(w1, 1, ~uint64_t{0}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Advance(w1, 1, w1.generation() + 1).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(server_->service().clocks().ClockOf(w1.rank()), 0);
  EXPECT_FALSE(wait->answered.HasBeenNotified());
  ASSERT_TRUE(Advance(w1, 1).ok());
  ASSERT_TRUE(wait->answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(wait->status.ok()) << wait->status.error_message();
  EXPECT_EQ(wait->response.min_clock(), 1);
}

TEST_F(SchedulerServiceTest, NothingStartsBeforeTheJobHasFormed) {
  ASSERT_NO_FATAL_FAILURE(Start(absl::Seconds(10)));
  const RegisterResponse w0 = Register(ROLE_WORKER, "");
  // Iteration 0 never waits on clocks, but the job is still forming: the wait is held, not answered.
  auto wait = StartWait(w0, 0);
  ASSERT_TRUE(Eventually([&] { return server_->service().num_forming_waits() == 1; }));
  Register(ROLE_SERVER, "127.0.0.1:1");  // answered after the scheduler handled it: a release would be done
  EXPECT_EQ(server_->service().num_forming_waits(), 1u) << "a registration that leaves the job forming released it";
  EXPECT_FALSE(wait->answered.HasBeenNotified());
  Register(ROLE_WORKER, "");  // the last member: the job starts
  ASSERT_TRUE(wait->answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(wait->status.ok()) << wait->status.error_message();
  EXPECT_EQ(server_->service().num_forming_waits(), 0u);
}

TEST_F(SchedulerServiceTest, SilentWorkerIsDeclaredDeadAndOldGenerationRefused) {
  ASSERT_NO_FATAL_FAILURE(Start(absl::Milliseconds(100)));
  Register(ROLE_SERVER, "127.0.0.1:1");
  Register(ROLE_WORKER, "");
  const RegisterResponse w1 = Register(ROLE_WORKER, "");
  const uint64_t generation = w1.generation();
  // Nobody heartbeats: every member is declared dead within 2 intervals, and the generation moves on.
  ASSERT_TRUE(Eventually([&] {
    for (const Member& m : server_->service().membership().Members()) {
      if (m.alive) return false;
    }
    return true;
  }));
  EXPECT_EQ(server_->service().membership().state(), JobState::kRecovering);
  DescribeRequest describe;
  describe.set_job_id(kJob);
  DescribeResponse view;
  ASSERT_TRUE(stub_->Describe(Context().get(), describe, &view).ok());
  EXPECT_GT(view.view().generation(), generation);
  for (const MemberStatus& m : view.members()) EXPECT_FALSE(m.alive()) << m.rank();

  grpc::Status stale = Advance(w1, 1);
  EXPECT_EQ(stale.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(stale.error_message().find("register"), std::string::npos) << stale.error_message();

  HeartbeatRequest heartbeat;
  heartbeat.set_job_id(kJob);
  heartbeat.set_role(ROLE_WORKER);
  heartbeat.set_id(w1.rank());
  heartbeat.set_incarnation(w1.incarnation());
  HeartbeatResponse hb;
  EXPECT_EQ(stub_->Heartbeat(Context().get(), heartbeat, &hb).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(SchedulerServiceTest, WrongJobIsRefusedAndShutdownAnswersPendingWaits) {
  ASSERT_NO_FATAL_FAILURE(Start(absl::Seconds(10)));
  DescribeRequest describe;
  describe.set_job_id("other");
  DescribeResponse view;
  const grpc::Status refused = stub_->Describe(Context().get(), describe, &view);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // Neither job id appears: the whole message is fixed text.
  EXPECT_EQ(refused.error_message(), "the request's job id is not the one this scheduler runs (check --job_id)");

  Register(ROLE_SERVER, "127.0.0.1:1");
  const RegisterResponse w0 = Register(ROLE_WORKER, "");
  Register(ROLE_WORKER, "");
  auto wait = StartWait(w0, 5);  // far ahead: must wait
  ASSERT_TRUE(Eventually([&] { return server_->service().clocks().num_waiting() == 1; }));
  server_->Shutdown();
  ASSERT_TRUE(wait->answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(wait->status.error_code(), grpc::StatusCode::UNAVAILABLE);
  server_->Wait();
}

TEST(SchedulerServerOptionsTest, QuotaAndStreamBoundsAreValidated) {
  SchedulerOptions options;
  options.job_id = kJob;
  options.membership.num_servers = 1;
  options.membership.num_workers = 1;
  SchedulerServerOptions server_options;
  server_options.address = "127.0.0.1:0";
  server_options.memory_quota_bytes = 1024;
  EXPECT_EQ(SchedulerServer::Start(server_options, options).status().code(), absl::StatusCode::kInvalidArgument);
  server_options.memory_quota_bytes = SchedulerServerOptions().memory_quota_bytes;
  server_options.max_concurrent_streams = -1;
  EXPECT_EQ(SchedulerServer::Start(server_options, options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kestrel
