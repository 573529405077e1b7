#include "scheduler/job_controller.h"

#include <utility>

#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/partition.h"

namespace kestrel {
namespace {

// How often the controller looks when nothing wakes it.
constexpr absl::Duration kPoll = absl::Milliseconds(50);

}  // namespace

JobController::JobController(CheckpointOptions options, JobDescription job, Membership* membership,
                             ClockTable* clocks, ServerAdmin* admin, std::function<void(absl::Status)> on_fatal)
    : ctx_(std::move(options), std::move(job), membership, clocks, admin, std::move(on_fatal)),
      checkpointer_(&ctx_),
      recovery_(&ctx_, &checkpointer_),
      rescaler_(
          &ctx_, &checkpointer_, [this] { Wake(); }, [this](const std::string& why) { RollBack(why); }) {}

JobController::~JobController() { Stop(); }

absl::Status JobController::Start() {
  {
    absl::StatusOr<Partition> partition = ctx_.job.partition.empty() ? Partition::Uniform(ctx_.job.num_servers)
                                                                     : Partition::Parse(ctx_.job.partition);
    if (!partition.ok()) return partition.status();
    ctx_.partition = *std::move(partition);
  }
  absl::StatusOr<std::optional<CheckpointManifest>> resume = checkpointer_.Open();
  if (!resume.ok()) return resume.status();
  if (resume->has_value()) {
    recovery_.Resume(**resume);
  } else {
    ctx_.cut = checkpointer_.NextScheduledCut(-1);
    ctx_.clocks->SetHold(ctx_.cut);
  }
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void JobController::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  rescaler_.Shutdown();
}

void JobController::Wake() {
  absl::MutexLock lock(&mu_);
  woken_ = true;
}

void JobController::RecordWorkerState(int rank, const WorkerState& state) {
  absl::MutexLock lock(&ctx_.mu);
  if (rank >= 0 && rank < static_cast<int>(ctx_.worker_states.size())) ctx_.worker_states[rank] = state;
}

std::optional<WorkerState> JobController::StateFor(int rank, int64_t clock) const {
  absl::MutexLock lock(&ctx_.mu);
  if (rank < 0 || rank >= static_cast<int>(ctx_.worker_states.size())) return std::nullopt;
  const WorkerState& state = ctx_.worker_states[rank];
  // Without a reader position the state still matters when it carries an epoch plan (a worker-count change at
  // an epoch's start: the epoch starts afresh, in the plan's schedule).
  if (state.clock() != clock || (!state.has_reader() && !state.has_plan())) return std::nullopt;
  return state;
}

absl::StatusOr<int64_t> JobController::Request() {
  absl::StatusOr<int64_t> cut = checkpointer_.Request();
  if (cut.ok()) Wake();
  return cut;
}

void JobController::RequestRollback(uint64_t generation, std::string why) {
  {
    absl::MutexLock lock(&mu_);
    if (rollback_request_.has_value()) {
      KLOG(Info) << why << ": joins the rollback already asked for (" << rollback_request_->why << ")";
      return;
    }
    rollback_request_ = RollbackRequest{generation, std::move(why)};
  }
  Wake();
}

CheckpointStatus JobController::status() const {
  absl::MutexLock lock(&ctx_.mu);
  return ctx_.status;
}

absl::Status JobController::Scale(ScaleTarget target, absl::Duration join_timeout,
                                  std::function<void(absl::StatusOr<ScaleResult>)> done, bool verify,
                                  int64_t at_clock) {
  return rescaler_.Scale(std::move(target), join_timeout, std::move(done), verify, at_clock);
}

void JobController::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(
                               +[](JobController* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) {
                                 return c->woken_ || c->stop_;
                               },
                               this),
                           kPoll);
      if (stop_) return;
      woken_ = false;
    }
    if (!ctx_.failed) Step();
    steps_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void JobController::Step() {
  Membership* const membership = ctx_.membership;
  const JobState state = membership->state();
  // A server died: with a copy of each of its ranges elsewhere, those take over; else its rows since the last
  // checkpoint are gone, and everyone rolls back to that checkpoint.
  if (!membership->rolling_back() && state != JobState::kForming && membership->AnyServerDead() &&
      recovery_.FailOver()) {
    return;  // the next step sees the job as it is now
  }
  if (!membership->rolling_back() && state != JobState::kForming && membership->AnyServerDead()) {
    if (!recovery_.MustRollBack(state)) return;
    RollBack("a parameter server died");
  }
  RollBackIfRequested(state);
  if (membership->rolling_back()) {
    if (membership->AllServersAlive() || recovery_.DropDeadServers()) recovery_.Restore();
    return;
  }
  rescaler_.RemoveDead();
  if (rescaler_.Drive()) return;
  if (state == JobState::kFinished) {
    checkpointer_.SettleFinalModel();
    return;
  }
  if (state == JobState::kRunning && recovery_.ReReplicate()) return;
  if (state == JobState::kRunning) checkpointer_.CutScheduled();
}

void JobController::RollBack(const std::string& why) {
  rescaler_.Abandon(why);
  recovery_.StartRollback(why);
}

void JobController::RollBackIfRequested(JobState state) {
  std::optional<RollbackRequest> request;
  {
    absl::MutexLock lock(&mu_);
    request.swap(rollback_request_);
  }
  if (!request.has_value()) return;
  if (ctx_.membership->rolling_back() || request->generation < recovery_.rollback_generation()) {
    KLOG(Info) << request->why << ": the job rolls back (or rolled back) already";
    return;
  }
  if (state == JobState::kForming || state == JobState::kFinished) {
    KLOG(Warning) << request->why << ": not rolled back, the job is " << JobStateName(state);
    return;
  }
  RollBack(request->why);
}

}  // namespace kestrel
