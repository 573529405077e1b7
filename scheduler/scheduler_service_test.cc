// The Scheduler service over real gRPC on loopback (in-process server).
#include "scheduler/scheduler_service.h"

#include <atomic>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "common/network_policy.h"
#include "proto/ps.grpc.pb.h"
#include "client/grpc_scheduler_client.h"
#include "client/liveness.h"
#include "client/scheduler_client.h"

namespace kestrel {
namespace {

constexpr char kJob[] = "job";

// A parameter server that only answers the scheduler's Checkpoint and Restore: a checkpoint is an empty
// directory under `root`, and every Restore is recorded.
class FakeServer final : public ParameterServer::Service {
 public:
  explicit FakeServer(std::string root) : root_(std::move(root)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    ApplyListenerNetworkPolicy(builder);  // as a real server: the scheduler's keepalive pings are welcome
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~FakeServer() override { server_->Shutdown(); }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // Every Restore so far: (checkpoint name, min_worker_generation).
  std::vector<std::pair<std::string, uint64_t>> restores() {
    absl::MutexLock lock(&mu_);
    return restores_;
  }

  grpc::Status Checkpoint(grpc::ServerContext*, const CheckpointShardRequest* request,
                          CheckpointShardResponse* response) override {
    std::filesystem::create_directories(std::filesystem::path(root_) / request->name());
    response->mutable_shard()->set_shard(0);
    return grpc::Status::OK;
  }
  grpc::Status AwaitCheckpoint(grpc::ServerContext* context, const AwaitCheckpointRequest*,
                               CheckpointShardResponse* response) override {
    if (hang_awaits_) {  // a server that never finishes writing: the call ends only when the caller cancels it
      awaiting_.Notify();
      while (!context->IsCancelled()) absl::SleepFor(absl::Milliseconds(5));
      cancelled_.Notify();
      return grpc::Status::CANCELLED;
    }
    response->mutable_shard()->set_shard(0);
    return grpc::Status::OK;
  }
  // AwaitCheckpoint hangs until cancelled; awaiting_ / cancelled_ say when one arrived and when it was cancelled.
  std::atomic<bool> hang_awaits_{false};
  absl::Notification awaiting_;
  absl::Notification cancelled_;
  grpc::Status Restore(grpc::ServerContext*, const RestoreShardRequest* request, RestoreShardResponse*) override {
    absl::MutexLock lock(&mu_);
    restores_.emplace_back(request->name(), request->min_worker_generation());
    return grpc::Status::OK;
  }

 private:
  const std::string root_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  std::vector<std::pair<std::string, uint64_t>> restores_ ABSL_GUARDED_BY(mu_);
};

class SchedulerServiceTest : public ::testing::Test {
 protected:
  // Starts the scheduler. Tests that do not heartbeat use a long interval so nobody is declared dead.
  // `checkpoint`: checkpoints and rollbacks (default: none).
  void Start(absl::Duration heartbeat_interval, CheckpointOptions checkpoint = CheckpointOptions()) {
    SchedulerOptions options;
    options.job_id = kJob;
    options.membership.num_servers = 1;
    options.membership.num_workers = 2;
    options.membership.heartbeat_interval = heartbeat_interval;
    options.membership.heartbeat_timeout = HeartbeatTimeoutFor(heartbeat_interval);
    options.consistency = ConsistencyPolicy::Ssp(1);
    options.lease_clocks = 0;  // the barrier: WaitToStart answers only what the slowest worker's clock allows
    options.checkpoint = std::move(checkpoint);
    SchedulerServerOptions server_options;
    server_options.address = "127.0.0.1:0";
    auto server = SchedulerServer::Start(server_options, options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    const std::string address = "127.0.0.1:" + std::to_string(server_->port());
    stub_ = Scheduler::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    SchedulerClientOptions client_options;
    client_options.job_id = kJob;
    client_ = NewGrpcSchedulerClient(address, client_options, nullptr);
  }

  // Starts the scheduler with checkpoints every 2 clocks under `root`, registers server `ps` and two workers, and
  // brings both workers to clock 2 (the first cut).
  void StartCheckpointedJob(const std::string& root, const FakeServer& ps, RegisterResponse* w0, RegisterResponse* w1) {
    CheckpointOptions checkpoint;
    checkpoint.dir = root;
    checkpoint.every_clocks = 2;
    ASSERT_NO_FATAL_FAILURE(Start(absl::Seconds(10), checkpoint));
    Register(ROLE_SERVER, ps.address());
    *w0 = Register(ROLE_WORKER, "", 0);
    *w1 = Register(ROLE_WORKER, "", 1);
    ASSERT_NO_FATAL_FAILURE(AdvanceTo(*w0, 0, 2));
    ASSERT_NO_FATAL_FAILURE(AdvanceTo(*w1, 0, 2));
  }

  std::unique_ptr<grpc::ClientContext> Context() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return context;
  }

  RegisterResponse Register(MemberRole role, const std::string& address, int id = -1) {
    RegisterRequest request;
    request.set_job_id(kJob);
    request.set_role(role);
    request.set_address(address);
    request.set_requested_rank(id);
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

  DescribeResponse Describe() {
    DescribeRequest request;
    request.set_job_id(kJob);
    DescribeResponse response;
    grpc::Status status = stub_->Describe(Context().get(), request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  // Worker `w` (what its Register or Rejoin answered) asks for a rollback, with its generation unless told
  // otherwise.
  absl::StatusOr<RequestRollbackResponse> RequestRollback(const RegisterResponse& w,
                                                          std::optional<uint64_t> generation = std::nullopt,
                                                          const std::string& reason = "allreduce failed") {
    return client_->RequestRollback(w.id(), w.incarnation(), generation.value_or(w.generation()), reason);
  }

  // Advances worker `w` from clock `from` to `to`, one iteration at a time.
  void AdvanceTo(const RegisterResponse& w, int64_t from, int64_t to) {
    for (int64_t c = from + 1; c <= to; ++c) {
      grpc::Status status = Advance(w, c);
      ASSERT_TRUE(status.ok()) << status.error_message();
    }
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
  std::unique_ptr<SchedulerClient> client_;
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

// Under leases a worker reports Advance once per lease; its heartbeats carry its progress for status only.
TEST_F(SchedulerServiceTest, HeartbeatProgressShowsInStatusButMovesNoClock) {
  ASSERT_NO_FATAL_FAILURE(Start(absl::Seconds(10)));
  Register(ROLE_SERVER, "127.0.0.1:1");
  const RegisterResponse w0 = Register(ROLE_WORKER, "");
  Register(ROLE_WORKER, "");
  ASSERT_TRUE(Advance(w0, 1).ok());
  absl::StatusOr<HeartbeatResponse> beat = client_->Heartbeat(ROLE_WORKER, w0.id(), w0.incarnation(), 0, 5);
  ASSERT_TRUE(beat.ok()) << beat.status();
  beat = client_->Heartbeat(ROLE_WORKER, w0.id(), w0.incarnation(), 0, 3);  // a late heartbeat: never backwards
  ASSERT_TRUE(beat.ok()) << beat.status();
  const DescribeResponse d = Describe();
  bool seen = false;
  for (const MemberStatus& m : d.members()) {
    if (m.role() != ROLE_WORKER || m.id() != w0.id()) continue;
    seen = true;
    EXPECT_EQ(m.clock(), 1);
    EXPECT_EQ(m.progress(), 5);
  }
  EXPECT_TRUE(seen);
  EXPECT_EQ(server_->service().clocks().ClockOf(w0.rank()), 1);
  EXPECT_EQ(d.min_clock(), 0);
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

// A scheduler shutting down while a server still writes a copy-on-write checkpoint cancels its wait for it
// instead of blocking its exit until the admin deadline.
TEST_F(SchedulerServiceTest, ShutdownCancelsTheWaitForACheckpointBeingWritten) {
  const std::string root = ::testing::TempDir() + "/shutdown_pending";
  std::filesystem::remove_all(root);
  FakeServer ps(root);
  ps.hang_awaits_ = true;
  RegisterResponse w0, w1;
  ASSERT_NO_FATAL_FAILURE(StartCheckpointedJob(root, ps, &w0, &w1));
  ASSERT_TRUE(ps.awaiting_.WaitForNotificationWithTimeout(absl::Seconds(30))) << "no checkpoint was cut";
  EXPECT_EQ(Describe().checkpoints_committed(), 0u) << "committed before every part was written";
  client_.reset();
  stub_.reset();
  server_.reset();  // the scheduler's shutdown: it would wait out the admin deadline (10 min) without the cancel
  EXPECT_TRUE(ps.cancelled_.WaitForNotificationWithTimeout(absl::Seconds(30)));
}

TEST_F(SchedulerServiceTest, WorkerRequestedRollbackRestoresTheLastCheckpointOnce) {
  const std::string root = ::testing::TempDir() + "/requested_rollback";
  std::filesystem::remove_all(root);
  FakeServer ps(root);
  RegisterResponse w0, w1;
  ASSERT_NO_FATAL_FAILURE(StartCheckpointedJob(root, ps, &w0, &w1));
  ASSERT_TRUE(Eventually([&] { return Describe().latest_checkpoint_clock() == 2; }));
  ASSERT_NO_FATAL_FAILURE(AdvanceTo(w0, 2, 3));
  ASSERT_NO_FATAL_FAILURE(AdvanceTo(w1, 2, 3));
  auto wait = StartWait(w0, 5);  // held at the next scheduled cut (4)
  ASSERT_TRUE(Eventually([&] { return server_->service().clocks().num_waiting() == 1; }));
  const uint64_t generation = Describe().view().generation();

  // A wrong incarnation, a generation from the future and an over-long reason are refused, and change nothing.
  RegisterResponse impostor = w1;
  impostor.set_incarnation(w0.incarnation());
  EXPECT_EQ(RequestRollback(impostor).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(RequestRollback(w1, w1.generation() + 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RequestRollback(w1, std::nullopt, std::string(1025, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
  const uint64_t steps = server_->service().job_controller().steps();
  ASSERT_TRUE(Eventually([&] { return server_->service().job_controller().steps() > steps + 1; }));
  EXPECT_FALSE(server_->service().membership().rolling_back());
  EXPECT_EQ(Describe().view().generation(), generation);
  EXPECT_EQ(Describe().rollbacks(), 0u);
  EXPECT_FALSE(wait->answered.HasBeenNotified());

  // Worker 0's request rolls the job back: every wait is aborted, the server restores the checkpoint of clock 2.
  absl::StatusOr<RequestRollbackResponse> asked = RequestRollback(w0);
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_TRUE(asked->rolled_back());
  EXPECT_EQ(asked->generation(), w0.generation());
  ASSERT_TRUE(wait->answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(wait->status.error_code(), grpc::StatusCode::ABORTED);
  ASSERT_TRUE(Eventually([&] {
    const DescribeResponse d = Describe();
    return d.rollbacks() == 1 && d.view().job_state() == "running";
  }));
  const DescribeResponse after = Describe();
  EXPECT_GT(after.view().generation(), generation);
  EXPECT_EQ(after.min_clock(), 2);
  ASSERT_EQ(ps.restores().size(), 1u);
  EXPECT_EQ(ps.restores()[0].first, after.latest_checkpoint());
  EXPECT_EQ(ps.restores()[0].second, after.view().generation());

  // Worker 1 asks for the same failure with its old generation: answered, nothing changes.
  asked = RequestRollback(w1);
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_FALSE(asked->rolled_back());
  EXPECT_GT(asked->generation(), w1.generation());
  EXPECT_EQ(asked->rollbacks(), 1u);
  // Both rejoin at the checkpoint's clock, with the rollback's generation; the old one is refused.
  for (const RegisterResponse* w : {&w0, &w1}) {
    absl::StatusOr<RegisterResponse> rejoined = client_->Rejoin(w->id(), w->incarnation());
    ASSERT_TRUE(rejoined.ok()) << rejoined.status();
    EXPECT_EQ(rejoined->clock(), 2);
    EXPECT_EQ(rejoined->rollbacks(), 1u);
    EXPECT_EQ(rejoined->generation(), after.view().generation());
    EXPECT_EQ(Advance(*w, 3).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
  const uint64_t steps_after = server_->service().job_controller().steps();
  ASSERT_TRUE(Eventually([&] { return server_->service().job_controller().steps() > steps_after + 1; }));
  EXPECT_EQ(Describe().rollbacks(), 1u);
  EXPECT_EQ(Describe().view().generation(), after.view().generation());
  EXPECT_EQ(ps.restores().size(), 1u);
}

TEST_F(SchedulerServiceTest, RequestedRollbackWithoutACheckpointRestartsFromEmptyTablesAtClockZero) {
  FakeServer ps(::testing::TempDir());
  ASSERT_NO_FATAL_FAILURE(Start(absl::Seconds(10)));
  Register(ROLE_SERVER, ps.address());
  const RegisterResponse w0 = Register(ROLE_WORKER, "", 0);
  // The job is still forming: nothing to roll back.
  absl::StatusOr<RequestRollbackResponse> asked = RequestRollback(w0);
  EXPECT_EQ(asked.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(asked.status().message().find("forming"), std::string::npos) << asked.status();
  const RegisterResponse w1 = Register(ROLE_WORKER, "", 1);
  ASSERT_NO_FATAL_FAILURE(AdvanceTo(w0, 0, 2));
  ASSERT_NO_FATAL_FAILURE(AdvanceTo(w1, 0, 1));

  asked = RequestRollback(w1);
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_TRUE(asked->rolled_back());
  ASSERT_TRUE(Eventually([&] {
    const DescribeResponse d = Describe();
    return d.rollbacks() == 1 && d.view().job_state() == "running";
  }));
  ASSERT_EQ(ps.restores().size(), 1u);
  EXPECT_EQ(ps.restores()[0].first, "") << "no checkpoint: empty tables";
  absl::StatusOr<RegisterResponse> r0 = client_->Rejoin(w0.id(), w0.incarnation());
  absl::StatusOr<RegisterResponse> r1 = client_->Rejoin(w1.id(), w1.incarnation());
  ASSERT_TRUE(r0.ok() && r1.ok()) << r0.status() << " " << r1.status();
  EXPECT_EQ(r0->clock(), 0);
  EXPECT_EQ(r1->clock(), 0);

  // Once every worker has finished, a rollback is refused.
  for (const RegisterResponse& w : {*r0, *r1}) {
    AdvanceRequest done;
    done.set_job_id(kJob);
    done.set_rank(w.rank());
    done.set_finished(1);
    done.set_generation(w.generation());
    done.set_incarnation(w.incarnation());
    done.set_done(true);
    AdvanceResponse response;
    ASSERT_TRUE(stub_->Advance(Context().get(), done, &response).ok());
  }
  asked = RequestRollback(*r0);
  EXPECT_EQ(asked.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(asked.status().message().find("finished"), std::string::npos) << asked.status();
  EXPECT_EQ(Describe().rollbacks(), 1u);
}

TEST_F(SchedulerServiceTest, RequestedRollbackIsRefusedWhileARescaleIsPending) {
  ASSERT_NO_FATAL_FAILURE(Start(absl::Seconds(10)));
  Register(ROLE_SERVER, "127.0.0.1:1");
  const RegisterResponse w0 = Register(ROLE_WORKER, "", 0);
  Register(ROLE_WORKER, "", 1);
  // A rescale to 3 workers waits for the third to register.
  ScaleRequest scale;
  scale.set_job_id(kJob);
  scale.set_servers(1);
  scale.set_workers(3);
  ScaleResponse scaled;
  grpc::Status scale_status;
  absl::Notification scale_answered;
  std::unique_ptr<grpc::ClientContext> scale_context = Context();
  stub_->async()->Scale(scale_context.get(), &scale, &scaled, [&](grpc::Status s) {
    scale_status = s;
    scale_answered.Notify();
  });
  ASSERT_TRUE(Eventually([&] { return server_->service().membership().pending_scale().has_value(); }));
  absl::StatusOr<RequestRollbackResponse> asked = RequestRollback(w0);
  EXPECT_EQ(asked.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(asked.status().message().find("rescale"), std::string::npos) << asked.status();
  EXPECT_FALSE(server_->service().membership().rolling_back());
  server_->Shutdown();  // answers the rescale still waiting
  ASSERT_TRUE(scale_answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(scale_status.ok());
  server_->Wait();
}

TEST_F(SchedulerServiceTest, WorkerAddressesFollowRegistrations) {
  ASSERT_NO_FATAL_FAILURE(Start(absl::Seconds(10)));
  Register(ROLE_SERVER, "127.0.0.1:1");
  const RegisterResponse w0 = Register(ROLE_WORKER, "10.0.0.1:29500", 0);
  EXPECT_EQ(w0.view().worker_addresses_size(), 2);
  EXPECT_EQ(w0.view().worker_addresses(0), "10.0.0.1:29500");
  EXPECT_EQ(w0.view().worker_addresses(1), "") << "not registered yet";
  Register(ROLE_WORKER, "", 1);
  DescribeResponse d = Describe();
  ASSERT_EQ(d.view().worker_addresses_size(), 2);
  EXPECT_EQ(d.view().worker_addresses(0), "10.0.0.1:29500");
  EXPECT_EQ(d.view().worker_addresses(1), "");

  // Everyone is declared dead; worker 0's replacement registers from elsewhere.
  server_->service().ExpireSilent(MonotonicNow() + absl::Hours(1));
  EXPECT_EQ(Describe().view().worker_addresses(0), "") << "a dead worker's address is withdrawn";
  Register(ROLE_WORKER, "10.0.0.2:29500", 0);
  d = Describe();
  EXPECT_EQ(d.view().worker_addresses(0), "10.0.0.2:29500");
  EXPECT_EQ(d.view().worker_addresses(1), "");

  RegisterRequest too_long;
  too_long.set_job_id(kJob);
  too_long.set_role(ROLE_WORKER);
  too_long.set_address(std::string(kMaxAddressBytes + 1, 'a'));
  too_long.set_requested_rank(1);
  RegisterResponse refused;
  EXPECT_EQ(stub_->Register(Context().get(), too_long, &refused).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
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
