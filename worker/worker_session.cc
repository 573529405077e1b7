#include "worker/worker_session.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/registration.h"
#include "client/routing_announcement.h"
#include "common/logging.h"
#include "common/retry.h"
#include "common/status.h"
#include "worker/scheduler_gate.h"

namespace kestrel {
namespace {

// Passes every call to `gate`, and after each Advance sets `clock` (may be null) to the clock this worker has
// reached and tells `heartbeater` (may be null; it must outlive the gate's users), whose heartbeats carry it to
// the scheduler's status (under leases Advance reaches the scheduler once per lease). As thread-safe as `gate`.
class MeteredGate final : public ClockGate {
 public:
  MeteredGate(std::unique_ptr<ClockGate> gate, prometheus::Gauge* clock, Heartbeater* heartbeater)
      : gate_(std::move(gate)), clock_(clock), heartbeater_(heartbeater) {}

  absl::Status WaitToStart(int64_t clock) override { return gate_->WaitToStart(clock); }
  absl::Status Advance(int64_t finished, bool done, const WorkerState& state) override {
    absl::Status status = gate_->Advance(finished, done, state);
    if (status.ok()) {
      if (clock_ != nullptr) clock_->Set(static_cast<double>(finished));
      if (heartbeater_ != nullptr) heartbeater_->SetProgress(finished);
    }
    return status;
  }
  absl::Status StopAt(int64_t clock, const WorkerState& state) override {
    absl::Status status = gate_->StopAt(clock, state);
    if (heartbeater_ != nullptr) heartbeater_->SetProgress(clock);
    if (clock_ != nullptr) clock_->Set(static_cast<double>(clock));
    return status;
  }
  absl::Status WaitAllFinished(int64_t iterations) override { return gate_->WaitAllFinished(iterations); }
  int64_t KnownMinClock() const override { return gate_->KnownMinClock(); }
  std::optional<int64_t> WaitClock(int64_t clock) const override { return gate_->WaitClock(clock); }
  bool Leased() const override { return gate_->Leased(); }
  bool PermittedNow(int64_t clock) const override { return gate_->PermittedNow(clock); }

 private:
  const std::unique_ptr<ClockGate> gate_;
  prometheus::Gauge* const clock_;
  Heartbeater* const heartbeater_;
};

}  // namespace

WorkerSession::WorkerSession(WorkerSessionOptions options) : options_(std::move(options)) {}

WorkerSession::~WorkerSession() {
  heartbeater_.reset();  // its callbacks read the members below
  gate_.reset();
  row_cache_.reset();
  ps_.reset();
}

absl::StatusOr<std::unique_ptr<WorkerSession>> WorkerSession::Join(WorkerSessionOptions options) {
  if (options.scheduler.empty()) return absl::InvalidArgumentError("no scheduler address (host:port) given");
  if (options.connector == nullptr) return absl::InvalidArgumentError("no connector given");
  std::unique_ptr<WorkerSession> session(new WorkerSession(std::move(options)));
  if (absl::Status registered = session->Register(); !registered.ok()) return registered;
  return session;
}

absl::Status WorkerSession::Register() {
  SchedulerClientOptions scheduler_options;
  scheduler_options.job_id = options_.job_id;
  scheduler_ = options_.connector->Scheduler(options_.scheduler, scheduler_options);
  const absl::Time deadline = absl::Now() + options_.scheduler_timeout;
  // OUT_OF_RANGE: an elastic job removed this worker.
  KESTREL_ASSIGN_OR_RETURN(Registered registered,
                           RegisterWithRetry(*scheduler_, options_.scheduler, ROLE_WORKER, options_.address,
                                             options_.id, options_.scheduler_timeout));
  const RegisterResponse* const reg = &registered.answer;
  // The id (the rank the certificate names) is this process's for life; the rank is its place in the job's
  // layout, which a rescale that removes a lower rank renumbers (docs/elasticity.md).
  id_ = reg->id();
  incarnation_ = reg->incarnation();
  SetLogGeneration(reg->generation());
  SetLogIdentity(absl::StrCat("worker[", id_, "]"));
  KLOG(Info) << "registered as worker " << id_ << " (rank " << reg->rank() << ", generation " << reg->generation()
             << ", " << reg->clock() << " iterations already done)";
  announced_generation_.store(reg->generation());
  std::function<void(absl::Status)> refused = options_.on_refused;
  if (refused == nullptr) {
    refused = [](absl::Status status) {
      KLOG(Error) << "the scheduler refused this worker: " << status << "; exiting";
      std::_Exit(3);
    };
  }
  heartbeater_ = std::make_unique<Heartbeater>(
      scheduler_.get(), ROLE_WORKER, id_, incarnation_, absl::Milliseconds(reg->view().heartbeat_interval_ms()) / 2,
      [this, refused](absl::Status status) {
        if (!left_.load()) refused(std::move(status));
      },
      [this](const HeartbeatResponse& answer) {
        if (answer.rank() >= 0 && answer.rank() < answer.worker_generations_size()) {
          announced_generation_.store(answer.worker_generations(answer.rank()));
        }
        std::shared_ptr<RoutingTable> table;
        {
          absl::MutexLock lock(&routing_mu_);
          table = routing_;
        }
        if (table != nullptr) {
          ApplyRouting(*table, answer.routing_generation(), answer.out_of_service());
          table->addresses().Update({answer.server_addresses().begin(), answer.server_addresses().end()});
        }
      });
  // Wait until every server has joined.
  ClusterView formed;
  while (true) {
    absl::StatusOr<DescribeResponse> d = scheduler_->Describe();
    if (d.ok() && d->view().job_state() != "forming") {
      formed = d->view();
      break;
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("the job did not form within the scheduler timeout (",
                                                      d.ok() ? d->view().job_state() : d.status().ToString(), ")"));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  if (!reg->joining()) {
    TakeAnswer(*reg);
    pass_.view = formed;  // the registration's view may be from before every server joined
    pass_.layout_generation = formed.layout_generation();
    return OpenPass();
  }
  // A rank of a rescale not done yet: its share of the data is known once it is.
  KLOG(Info) << "joining the job in a rescale: waiting for it";
  while (true) {
    absl::StatusOr<RegisterResponse> joined = scheduler_->Rejoin(id_, incarnation_);
    if (joined.ok() && joined->removed()) {
      return absl::OutOfRangeError("the rescale this worker was to join was given up");
    }
    if (joined.ok()) {
      TakeAnswer(*joined);
      return OpenPass();
    }
    if (!IsTransient(joined.status())) {
      return absl::FailedPreconditionError(
          absl::StrCat("the rescale this worker was to join did not happen: ", joined.status().ToString()));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

void WorkerSession::TakeAnswer(const RegisterResponse& answer) {
  pass_.view = answer.view();
  pass_.rank = answer.rank();
  pass_.generation = answer.generation();
  pass_.rollbacks = answer.rollbacks();
  pass_.layout_generation = answer.layout_generation();
  pass_.clock = answer.clock();
  pass_.state = answer.state();
}

absl::Status WorkerSession::OpenPass() {
  const ClusterView& view = pass_.view;
  absl::StatusOr<Partition> partition = Partition::Parse(view.partition());
  if (!partition.ok()) {
    return absl::InternalError(absl::StrCat("the scheduler's partition is invalid: ", partition.status().message()));
  }
  absl::StatusOr<ConsistencyPolicy> consistency = ConsistencyPolicy::FromProto(view.consistency(), view.staleness());
  if (!consistency.ok()) {
    return absl::InternalError(
        absl::StrCat("the scheduler announced no valid consistency: ", consistency.status().message()));
  }
  pass_.partition = *partition;
  pass_.consistency = *consistency;
  pass_.num_workers = view.num_workers();
  pass_.num_servers = view.num_servers();
  // The previous pass's gate, cache and client go first (the cache wraps the client).
  gate_.reset();
  row_cache_.reset();
  ps_.reset();
  std::shared_ptr<RoutingTable> table;
  if (partition->replicas() > 1) {
    table = std::make_shared<RoutingTable>(*partition);
    ApplyRouting(*table, view.routing_generation(), view.out_of_service());
    table->addresses().Update({view.server_addresses().begin(), view.server_addresses().end()});
  }
  {
    absl::MutexLock lock(&routing_mu_);
    routing_ = table;
  }
  PsClientOptions ps_options;
  ps_options.job_id = options_.job_id;
  ps_options.worker_rank = pass_.rank;
  // Server-enforced clocks: the servers count every worker's pushes per clock, so SSP pushes send empty parts
  // where they have no key, as BSP's do.
  const bool leased = view.lease_clocks() > 0;
  ps_options.bsp_pushes = consistency->bsp() || (leased && consistency->mode == CONSISTENCY_SSP);
  ps_options.routing = table;
  const uint64_t generation = pass_.generation;
  ps_options.give_up = [this, generation] { return announced_generation_.load() != generation; };
  std::vector<std::string> servers(view.server_addresses().begin(), view.server_addresses().end());
  absl::StatusOr<std::unique_ptr<PsClient>> client =
      options_.connector->Servers(ps_options, *partition, servers);
  if (!client.ok()) {
    return absl::Status(client.status().code(), absl::StrCat("cannot create the parameter-server client: ",
                                                             client.status().message()));
  }
  ps_ = *std::move(client);
  ps_->SetGeneration(generation);
  // The row cache, wrapping the client: under SSP(s >= 1) rows serve reads for s clocks past the min clock of
  // their pull; under ASP for asp_cache_clocks of this worker's clocks. A new one per pass: a rollback's rows
  // are gone. Not under SSP with leases: there each step's reads travel in the Step that carries its pushes
  // (worker/trainer.h), so cached rows would save bytes but no round trip, and the cache's separate calls would
  // cost one per table and server (LR demo: 1.9x slower with it).
  const int cache_bound = consistency->row_cache_bound(options_.asp_cache_clocks);
  const bool fused_reads = leased && consistency->mode == CONSISTENCY_SSP;
  if (options_.row_cache && cache_bound > 0 && !fused_reads) {
    RowCacheOptions cache_options;
    cache_options.bound = cache_bound;
    cache_options.max_rows = static_cast<size_t>(std::max<int64_t>(1, options_.row_cache_rows));
    row_cache_ = std::make_unique<RowCache>(ps_.get(), cache_options);
  }
  std::optional<WorkerState> reported;  // set when the servers are ahead of the scheduler's last report
  if (leased) {
    // The servers, not the scheduler's last report (up to a lease behind), know where this rank's pushes end: a
    // replacement continues at the first clock not complete on every server (BSP: on every table for every
    // worker; the servers answer a pull of a clock applied since with the rows from before it).
    absl::StatusOr<std::vector<StatsResponse>> stats = ps_->Stats();
    if (!stats.ok()) return stats.status();
    int64_t complete = std::numeric_limits<int64_t>::max();
    for (const StatsResponse& s : *stats) complete = std::min(complete, s.complete_clocks());
    if (!stats->empty() && complete > pass_.clock) {
      KLOG(Info) << "the servers hold this rank's updates through clock " << complete << " (the scheduler's last "
                 << "report: " << pass_.clock << "): continuing there";
      reported = pass_.state;  // where the scheduler last heard this rank's reader was (its clock: the report's)
      pass_.clock = complete;
      pass_.state.Clear();  // the reader re-reads the epoch and skips to it
    }
  }
  std::optional<int> read_lag;  // the staleness the servers enforce on reads
  if (leased && consistency->mode != CONSISTENCY_ASP) read_lag = consistency->bsp() ? 0 : consistency->staleness;
  gate_ = NewSchedulerGate(scheduler_.get(), pass_.rank, generation, incarnation_, pass_.rollbacks,
                           pass_.layout_generation, absl::Milliseconds(20), leased, read_lag,
                           options_.recovery_timeout);
  if (options_.clock_gauge != nullptr) options_.clock_gauge->Set(static_cast<double>(pass_.clock));
  gate_ = std::make_unique<MeteredGate>(std::move(gate_), options_.clock_gauge, heartbeater_.get());
  if (reported.has_value()) {
    // The scheduler learns the clock before this rank asks to start it: a hold there (a checkpoint's cut) waits
    // for every rank's report of it, which would otherwise never come. The state keeps its own, earlier clock,
    // so the scheduler does not record it as this clock's (it derives the reader's place: StandingAt).
    absl::Status told = gate_->Advance(pass_.clock, /*done=*/false, *reported);
    if (!told.ok()) return told;
  }
  return absl::OkStatus();
}

PsClient* WorkerSession::client() const {
  return row_cache_ != nullptr ? static_cast<PsClient*>(row_cache_.get()) : ps_.get();
}

absl::Status WorkerSession::Recover(const absl::Status& error) {
  // Did the job roll back or get rescaled? Ask until it has (the scheduler may not have noticed the dead server
  // yet), it is clear it has not (the job runs on without a rollback: the error was this worker's own), or
  // time runs out.
  KLOG(Warning) << "training stopped: " << error << "; asking the scheduler whether the job rolls back";
  const absl::Time give_up = absl::Now() + options_.recovery_timeout;
  const absl::Time grace = absl::Now() + absl::Milliseconds(3 * pass_.view.heartbeat_interval_ms());
  absl::StatusOr<RegisterResponse> rejoined;
  while (true) {
    rejoined = scheduler_->Rejoin(id_, incarnation_);
    if (rejoined.ok() && rejoined->removed()) {
      left_.store(true);
      return absl::OutOfRangeError(absl::StrCat("a rescale left worker ", id_,
                                                " out of the job: its share of the data goes to the others"));
    }
    if (rejoined.ok() &&
        (rejoined->rollbacks() > pass_.rollbacks || rejoined->layout_generation() > pass_.layout_generation)) {
      break;
    }
    if (absl::IsFailedPrecondition(rejoined.status())) {
      return absl::FailedPreconditionError(
          absl::StrCat("the scheduler refused this worker: ", rejoined.status().message()));
    }
    // Running (or finished) past the grace with no rollback: the error was this worker's own.
    const bool running = rejoined.ok() && (rejoined->view().job_state() == "running" ||
                                           rejoined->view().job_state() == "finished");
    if ((running && absl::Now() > grace) || absl::Now() > give_up) return error;
    absl::SleepFor(absl::Milliseconds(100));
  }
  const bool rolled_back = rejoined->rollbacks() > pass_.rollbacks;
  if (!rolled_back) {
    KLOG(Info) << "the job was rescaled to " << rejoined->view().num_servers() << " servers and "
               << rejoined->view().num_workers() << " workers (rescale " << rejoined->layout_generation()
               << "); continuing from clock " << rejoined->clock() << " in the new layout";
  }
  if (rejoined->rank() != pass_.rank) {
    KLOG(Info) << "worker " << id_ << " is rank " << rejoined->rank() << " of the new layout (was " << pass_.rank
               << "): a lower rank was removed";
  }
  TakeAnswer(*rejoined);
  pass_.rolled_back = rolled_back;
  SetLogGeneration(pass_.generation);
  if (rolled_back) {
    KLOG(Info) << "the job rolled back to clock " << pass_.clock << "; continuing from there (generation "
               << pass_.generation << ")";
  }
  return OpenPass();
}

absl::Status WorkerSession::RequestRollback(const std::string& reason) {
  absl::StatusOr<RequestRollbackResponse> answer =
      scheduler_->RequestRollback(id_, incarnation_, pass_.generation, reason);
  if (!answer.ok()) return answer.status();
  KLOG(Warning) << "asked the job to roll back to its last checkpoint (" << reason << "): "
                << (answer->rolled_back() ? "it rolls back" : "a rollback since this pass serves it");
  return absl::OkStatus();
}

absl::Status WorkerSession::Leave(int64_t finished) {
  left_.store(true);
  absl::Status s;
  for (int attempt = 0; attempt < 5; ++attempt) {  // else the scheduler counts us alive until it times out
    s = scheduler_->Leave(pass_.rank, finished, pass_.generation, incarnation_, pass_.layout_generation);
    if (s.ok() || !IsTransient(s)) break;
    absl::SleepFor(absl::Milliseconds(100) * (1 << attempt));
  }
  return s;
}

}  // namespace kestrel
