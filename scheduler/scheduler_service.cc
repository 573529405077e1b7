#include "scheduler/scheduler_service.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_status.h"
#include "common/hash.h"
#include "common/logging.h"
#include "common/network_policy.h"
#include "common/partition.h"
#include "common/status.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/health_check_service_interface.h"
#include "scheduler/scheduler_metrics.h"
#include "scheduler/server_admin_client.h"

namespace kestrel {
namespace {

Role RoleOf(MemberRole role) { return role == ROLE_SERVER ? Role::kServer : Role::kWorker; }

// The longest reason a RequestRollback may give.
constexpr size_t kMaxRollbackReasonBytes = 1024;

// The rank whose id is `id` in `ids` (a layout's ids, by rank), or -1.
int RankOfId(const std::vector<int>& ids, int id) {
  const auto at = std::find(ids.begin(), ids.end(), id);
  return at != ids.end() ? static_cast<int>(at - ids.begin()) : -1;
}

grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context, const RpcMetrics::Call& call,
                                const absl::Status& status) {
  call.End(status);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SchedulerServiceImpl>> SchedulerServiceImpl::Create(const SchedulerOptions& options) {
  if (options.job_id.empty()) return absl::InvalidArgumentError("the scheduler needs a job id");
  absl::StatusOr<Partition> partition = options.partition.empty()
                                            ? Partition::Uniform(options.membership.num_servers)
                                            : Partition::Parse(options.partition);
  if (!partition.ok()) return partition.status();
  if (partition->num_servers() != options.membership.num_servers) {
    return absl::InvalidArgumentError(absl::StrFormat("the partition has %d servers, the job %d",
                                                      partition->num_servers(), options.membership.num_servers));
  }
  auto membership = Membership::Create(options.membership, partition->ToString());
  if (!membership.ok()) return membership.status();
  int lease_clocks = options.lease_clocks;
  if (lease_clocks > 0 && options.checkpoint.elastic_timeout > absl::ZeroDuration() &&
      options.consistency.mode == CONSISTENCY_ASP) {
    // ASP reads wait for no clock, so no server knows where a dead worker's pushes end (docs/elasticity.md).
    KLOG(Warning) << "elastic ASP jobs run with the scheduler as every iteration's barrier: --lease_clocks="
                  << lease_clocks << " is not used (a dead worker's removal needs its exact clock)";
    lease_clocks = 0;
  }
  auto clocks = ClockTable::Create(options.membership.num_workers, options.consistency, lease_clocks);
  if (!clocks.ok()) return clocks.status();
  std::unique_ptr<SchedulerServiceImpl> service(
      new SchedulerServiceImpl(options, std::move(membership).value(), std::move(clocks).value()));
  SchedulerServiceImpl* raw = service.get();
  KESTREL_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> admin_credentials,
                           MakeChannelCredentials(options.tls));
  service->admin_ = NewGrpcServerAdmin(options.job_id, options.admin_deadline, std::move(admin_credentials));
  ClusterView view;
  service->FillView(&view);
  JobDescription job;
  job.job_id = options.job_id;
  job.partition = view.partition();
  job.consistency = options.consistency;
  job.num_servers = options.membership.num_servers;
  job.num_workers = options.membership.num_workers;
  job.config_fingerprint = view.config_fingerprint();
  service->job_controller_ = std::make_unique<JobController>(
      options.checkpoint, job, service->membership_.get(), service->clocks_.get(), service->admin_.get(),
      [raw](absl::Status status) {
        KLOG(Error) << "the job cannot continue: " << status;
        if (raw->options_.on_fatal) raw->options_.on_fatal(status);
      });
  service->clocks_->SetListener([raw] { raw->job_controller_->Wake(); });
  service->metrics_hook_ = ScrapeHook([raw] {
    const CheckpointStatus checkpoints = raw->job_controller_->status();
    SchedulerMetrics::Get().Refresh(*raw->membership_, *raw->clocks_,
                                    checkpoints.latest.empty() ? std::nullopt
                                                               : std::optional<int64_t>(checkpoints.latest_clock));
    SchedulerMetrics::Get().under_replicated_ranges().Set(raw->UnderReplicatedRanges());
  });
  return service;
}

absl::Status SchedulerServiceImpl::StartJobController() { return job_controller_->Start(); }

SchedulerServiceImpl::SchedulerServiceImpl(const SchedulerOptions& options, std::unique_ptr<Membership> membership,
                                           std::unique_ptr<ClockTable> clocks)
    : options_(options),
      membership_(std::move(membership)),
      clocks_(std::move(clocks)),
      register_rpc_(SchedulerMetrics::Get().rpc().method("Register")),
      heartbeat_rpc_(SchedulerMetrics::Get().rpc().method("Heartbeat")),
      wait_to_start_rpc_(SchedulerMetrics::Get().rpc().method("WaitToStart")),
      advance_rpc_(SchedulerMetrics::Get().rpc().method("Advance")),
      describe_rpc_(SchedulerMetrics::Get().rpc().method("Describe")),
      rejoin_rpc_(SchedulerMetrics::Get().rpc().method("Rejoin")),
      request_rollback_rpc_(SchedulerMetrics::Get().rpc().method("RequestRollback")),
      request_checkpoint_rpc_(SchedulerMetrics::Get().rpc().method("RequestCheckpoint")),
      scale_rpc_(SchedulerMetrics::Get().rpc().method("Scale")) {}

absl::Status SchedulerServiceImpl::CheckJob(const std::string& job_id) const {
  if (job_id == options_.job_id) return absl::OkStatus();
  // Neither job id is echoed: a caller probing for the job's name learns nothing.
  return absl::FailedPreconditionError("the request's job id is not the one this scheduler runs (check --job_id)");
}

int SchedulerServiceImpl::UnderReplicatedRanges() const {
  const JobLayout layout = membership_->layout();
  const RoutingState routing = membership_->routing();
  absl::StatusOr<Partition> partition = Partition::Parse(layout.partition);
  if (!partition.ok()) return 0;
  std::vector<bool> out(partition->num_servers(), false);
  for (int s : routing.out_of_service) {
    if (s < partition->num_servers()) out[s] = true;
  }
  absl::StatusOr<Routing> r = Routing::Create(*partition, std::move(out));
  return r.ok() ? r->UnderReplicatedRanges() : 0;
}

bool SchedulerServiceImpl::Replicated() const {
  absl::StatusOr<Partition> partition = Partition::Parse(membership_->layout().partition);
  return partition.ok() && partition->replicas() > 1;
}

void SchedulerServiceImpl::FillView(ClusterView* view) const {
  const JobLayout layout = membership_->layout();
  view->set_generation(membership_->generation());
  view->set_job_state(JobStateName(membership_->state()));
  view->set_num_servers(layout.num_servers);
  view->set_num_workers(layout.num_workers);
  view->set_layout_generation(layout.generation);
  for (std::string& a : membership_->LiveServerAddresses()) view->add_server_addresses(std::move(a));
  for (std::string& a : membership_->LiveAddresses(Role::kWorker)) view->add_worker_addresses(std::move(a));
  view->set_partition(layout.partition);
  view->set_consistency(options_.consistency.mode);
  view->set_staleness(options_.consistency.staleness);
  view->set_lease_clocks(clocks_->lease_clocks());
  view->set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.membership.heartbeat_interval));
  const RoutingState routing = membership_->routing();
  view->set_routing_generation(routing.generation);
  for (int s : routing.out_of_service) view->add_out_of_service(s);
  for (int id : layout.server_ids) view->add_server_ids(id);
  for (int id : layout.worker_ids) view->add_worker_ids(id);
  uint64_t fingerprint = Hash64(options_.job_id);
  fingerprint = HashCombine(fingerprint, Hash64(layout.partition));
  fingerprint = HashCombine(fingerprint, static_cast<uint64_t>(layout.num_servers));
  fingerprint = HashCombine(fingerprint, static_cast<uint64_t>(layout.num_workers));
  // The mode as its place in bsp, ssp, asp (0, 1, 2): the fingerprints of committed checkpoints stay valid.
  fingerprint = HashCombine(fingerprint, static_cast<uint64_t>(options_.consistency.mode - CONSISTENCY_BSP));
  fingerprint = HashCombine(fingerprint, static_cast<uint64_t>(options_.consistency.staleness));
  view->set_config_fingerprint(fingerprint);
}

namespace {

// Who may call what: members register and heartbeat; workers run the clock; an admin (kestrel_ctl) requests
// checkpoints; anyone of the job may read its description.
constexpr PeerRoles kMemberRoles = RolesOf({PeerRole::kWorker, PeerRole::kServer});
constexpr PeerRoles kWorkerRoles = RolesOf({PeerRole::kWorker});
constexpr PeerRoles kDescribeRoles = RolesOf({PeerRole::kWorker, PeerRole::kServer, PeerRole::kAdmin});
constexpr PeerRoles kCheckpointRoles = RolesOf({PeerRole::kAdmin});
constexpr PeerRoles kScaleRoles = RolesOf({PeerRole::kAdmin});

}  // namespace

absl::Status SchedulerServiceImpl::CheckCaller(grpc::CallbackServerContext* context, const std::string& job_id,
                                               PeerRoles allowed, const char* method,
                                               std::optional<MemberRole> claimed_role, std::optional<int> claimed_rank,
                                               std::optional<PeerIdentity>* caller) const {
  KESTREL_RETURN_IF_ERROR(CheckJob(job_id));
  KESTREL_ASSIGN_OR_RETURN(std::optional<PeerIdentity> identity,
                           AuthorizePeer(context->auth_context().get(), options_.job_id, allowed, method));
  if (identity.has_value() && (identity->role == PeerRole::kWorker || identity->role == PeerRole::kServer)) {
    const MemberRole role = identity->role == PeerRole::kServer ? ROLE_SERVER : ROLE_WORKER;
    if (claimed_role.has_value() && *claimed_role != role) {
      return absl::PermissionDeniedError(absl::StrCat(method, " claims another role than the certificate's (",
                                                      PeerRoleName(identity->role), ")"));
    }
    if (claimed_rank.has_value()) KESTREL_RETURN_IF_ERROR(CheckClaimedRank(identity, *claimed_rank, method));
  }
  if (caller != nullptr) *caller = std::move(identity);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* SchedulerServiceImpl::Register(grpc::CallbackServerContext* context,
                                                         const RegisterRequest* request,
                                                         RegisterResponse* response) {
  const RpcMetrics::Call call = register_rpc_.Begin();
  std::optional<PeerIdentity> peer;
  absl::Status status =
      CheckCaller(context, request->job_id(), kMemberRoles, "Register", request->role(), std::nullopt, &peer);
  // With a certificate, "any free rank" (-1) means the certificate's rank, and any other must be it.
  int requested_rank = request->requested_rank();
  if (status.ok() && peer.has_value() && requested_rank == -1) requested_rank = peer->rank;
  if (status.ok()) status = CheckClaimedRank(peer, requested_rank, "Register");
  if (status.ok()) {
    auto registration =
        membership_->Register(RoleOf(request->role()), request->address(), requested_rank, MonotonicNow());
    status = registration.status();
    if (status.ok()) {
      response->set_rank(registration->rank);
      response->set_id(registration->id);
      response->set_incarnation(registration->incarnation);
      response->set_generation(registration->generation);
      response->set_joining(registration->joining);
      FillView(response->mutable_view());
      if (request->role() == ROLE_WORKER && !registration->joining) {
        response->set_clock(clocks_->ClockOf(registration->rank));
        if (auto state = job_controller_->StateFor(registration->rank, response->clock())) *response->mutable_state() = *state;
      }
      response->set_rollbacks(job_controller_->status().rollbacks);
      job_controller_->Wake();
      if (registration->state != JobState::kForming && !registration->joining) {
        std::vector<std::function<void()>> waits;
        {
          absl::MutexLock lock(&forming_mu_);
          waits.swap(forming_waits_);
        }
        for (auto& wait : waits) wait();
        // Flushed after CancelWaits() ran? Then they must not stay queued in the ClockTable.
        if (shutting_down_.load()) clocks_->CancelAll(absl::UnavailableError("the scheduler is shutting down"));
      }
      KLOG(Info) << RoleName(RoleOf(request->role())) << " " << registration->id << " registered as rank "
                 << registration->rank << " from "
                 << (request->address().empty() ? context->peer() : request->address()) << " (generation "
                 << registration->generation << ", job " << JobStateName(registration->state)
                 << (registration->joining ? ", joining in a rescale" : "") << ")";
    }
  }
  return Reply(context, call, status);
}

grpc::ServerUnaryReactor* SchedulerServiceImpl::Heartbeat(grpc::CallbackServerContext* context,
                                                          const HeartbeatRequest* request,
                                                          HeartbeatResponse* response) {
  const RpcMetrics::Call call = heartbeat_rpc_.Begin();
  absl::Status status =
      CheckCaller(context, request->job_id(), kMemberRoles, "Heartbeat", request->role(), request->id());
  if (status.ok()) {
    int rank = -1;
    auto generation = membership_->Heartbeat(RoleOf(request->role()), request->id(), request->incarnation(),
                                             MonotonicNow(), request->routing_generation(), &rank);
    status = generation.status();
    if (absl::IsOutOfRange(status)) {  // a rescale removed it: it exits
      response->set_removed(true);
      status = absl::OkStatus();
    } else if (status.ok()) {
      const JobLayout layout = membership_->layout();
      // The rank as of that layout (a rescale may have renumbered the member since the heartbeat was taken).
      const int in_layout =
          RankOfId(request->role() == ROLE_SERVER ? layout.server_ids : layout.worker_ids, request->id());
      if (in_layout != -1) rank = in_layout;
      if (request->role() == ROLE_WORKER && request->progress() > 0) {
        absl::MutexLock lock(&progress_mu_);
        int64_t& progress = progress_[request->id()];
        progress = std::max(progress, request->progress());
      }
      response->set_generation(*generation);
      response->set_rank(rank);
      response->set_job_state(JobStateName(membership_->state()));
      response->set_layout_generation(layout.generation);
      for (uint64_t g : layout.worker_generations) response->add_worker_generations(g);
      // Only once a rescale renumbered some worker (empty: every worker's id is its rank).
      bool renumbered = false;
      for (size_t r = 0; r < layout.worker_ids.size(); ++r) renumbered |= layout.worker_ids[r] != static_cast<int>(r);
      if (renumbered) {
        for (int id : layout.worker_ids) response->add_worker_ids(id);
      }
      if (Replicated()) {  // members re-route from it
        const RoutingState routing = membership_->routing();
        response->set_routing_generation(routing.generation);
        for (int s : routing.out_of_service) response->add_out_of_service(s);
        for (std::string& a : membership_->LiveServerAddresses()) response->add_server_addresses(std::move(a));
      }
    }
  }
  return Reply(context, call, status);
}

absl::Status SchedulerServiceImpl::CheckWorkerRank(const std::optional<PeerIdentity>& caller, const JobLayout& layout,
                                                   int rank, uint64_t layout_generation, const char* method) const {
  if (layout_generation < layout.generation) {
    return absl::AbortedError(absl::StrFormat(
        "the job was rescaled (rescale %d; this worker trains in the layout of rescale %d): rejoin",
        layout.generation, layout_generation));
  }
  if (rank < 0 || rank >= static_cast<int>(layout.worker_ids.size())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("worker rank %d is not in [0, %d)", rank, layout.worker_ids.size()));
  }
  // The certificate names the worker's id, which is its rank unless a rescale renumbered it.
  return CheckClaimedRank(caller, layout.worker_ids[rank], method);
}

grpc::ServerUnaryReactor* SchedulerServiceImpl::WaitToStart(grpc::CallbackServerContext* context,
                                                            const WaitToStartRequest* request,
                                                            WaitToStartResponse* response) {
  const RpcMetrics::Call call = wait_to_start_rpc_.Begin();
  // Read before the generation check: a rollback between the check and the queuing (it moves the generation,
  // then cancels every wait) answers this request instead of leaving it queued on the abandoned timeline.
  const uint64_t epoch = clocks_->epoch();
  std::optional<PeerIdentity> caller;
  absl::Status status =
      CheckCaller(context, request->job_id(), kWorkerRoles, "WaitToStart", std::nullopt, std::nullopt, &caller);
  if (status.ok()) {
    status = CheckWorkerRank(caller, membership_->layout(), request->rank(), request->layout_generation(),
                             "WaitToStart");
  }
  if (status.ok()) status = membership_->CheckWorker(request->rank(), request->incarnation(), request->generation());
  if (!status.ok()) return Reply(context, call, status);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // Answered now or by the Advance() that allows it: never blocks this thread.
  auto wait = [this, reactor, request, response, call, epoch] {
    clocks_->WaitToStart(
        request->rank(), request->clock(),
        [this, reactor, request, response, call](absl::Status s) {
          if (s.ok()) {
            response->set_min_clock(clocks_->MinClock());
            response->set_permitted_through(clocks_->PermittedThrough(request->clock()));
          }
          call.End(s);
          reactor->Finish(ToGrpcStatus(s));
        },
        epoch);
  };
  {
    absl::MutexLock lock(&forming_mu_);
    if (shutting_down_.load()) {
      const absl::Status unavailable = absl::UnavailableError("the scheduler is shutting down");
      call.End(unavailable);
      reactor->Finish(ToGrpcStatus(unavailable));
      return reactor;
    }
    if (membership_->state() == JobState::kForming) {
      forming_waits_.push_back(std::move(wait));  // issued by the Register() that completes the job
      return reactor;
    }
  }
  wait();
  // A wait queued after CancelWaits() ran must not be left unanswered (shutdown would hang on it).
  if (shutting_down_.load()) CancelWaits();
  return reactor;
}

grpc::ServerUnaryReactor* SchedulerServiceImpl::Advance(grpc::CallbackServerContext* context,
                                                        const AdvanceRequest* request, AdvanceResponse* response) {
  const RpcMetrics::Call call = advance_rpc_.Begin();
  const uint64_t epoch = clocks_->epoch();  // before the checks, as WaitToStart reads it
  std::optional<PeerIdentity> caller;
  absl::Status status =
      CheckCaller(context, request->job_id(), kWorkerRoles, "Advance", std::nullopt, std::nullopt, &caller);
  if (status.ok()) {
    status = CheckWorkerRank(caller, membership_->layout(), request->rank(), request->layout_generation(), "Advance");
  }
  if (status.ok()) status = membership_->CheckWorker(request->rank(), request->incarnation(), request->generation());
  if (status.ok() && request->has_state() && request->state().clock() == request->finished()) {
    job_controller_->RecordWorkerState(request->rank(), request->state());  // before the Advance that may cut
  }
  if (status.ok()) status = clocks_->Advance(request->rank(), request->finished());
  if (status.ok() && request->done() && !request->leaving()) {
    auto state = membership_->MarkWorkerDone(request->rank());
    status = state.status();
    if (status.ok() && *state == JobState::kFinished) {
      KLOG(Info) << "every worker has finished: job '" << options_.job_id << "' finished at clock "
                 << clocks_->MinClock();
    }
  }
  if (status.ok() && request->leaving()) {
    status = request->done() ? membership_->MarkWorkerLeft(request->rank())
                             : absl::InvalidArgumentError("leaving is only allowed with done");
    if (status.ok()) KLOG(Info) << "worker rank " << request->rank() << " left the finished job";
  }
  if (status.ok()) response->set_min_clock(clocks_->MinClock());
  if (status.ok() && request->renew() && !request->done()) {
    if (std::optional<int64_t> through = clocks_->TryLease(request->rank(), request->finished(), epoch)) {
      response->set_permitted_through(*through);
    }
  }
  return Reply(context, call, status);
}

grpc::ServerUnaryReactor* SchedulerServiceImpl::Describe(grpc::CallbackServerContext* context,
                                                         const DescribeRequest* request,
                                                         DescribeResponse* response) {
  const RpcMetrics::Call call = describe_rpc_.Begin();
  absl::Status status =
      CheckCaller(context, request->job_id(), kDescribeRoles, "Describe", std::nullopt, std::nullopt);
  if (status.ok()) {
    FillView(response->mutable_view());
    for (const Member& m : membership_->Members()) {
      MemberStatus* s = response->add_members();
      s->set_role(m.role == Role::kServer ? ROLE_SERVER : ROLE_WORKER);
      s->set_rank(m.rank);
      s->set_id(m.id);
      s->set_address(m.address);
      s->set_alive(m.alive);
      if (m.role == Role::kWorker) {
        s->set_clock(clocks_->ClockOf(m.rank));
        absl::MutexLock lock(&progress_mu_);
        auto it = progress_.find(m.id);
        s->set_progress(std::max(s->clock(), it == progress_.end() ? 0 : it->second));
      }
    }
    response->set_min_clock(clocks_->MinClock());
    const CheckpointStatus checkpoints = job_controller_->status();
    response->set_latest_checkpoint(checkpoints.latest);
    response->set_latest_checkpoint_clock(checkpoints.latest_clock);
    response->set_checkpoints_committed(checkpoints.committed);
    response->set_rollbacks(checkpoints.rollbacks);
    response->set_final_model_settled(checkpoints.final_model_settled);
    const RoutingState routing = membership_->routing();
    response->set_failovers(routing.failovers);
    response->set_rereplications(routing.rereplications);
    response->set_under_replicated_ranges(UnderReplicatedRanges());
    response->set_elastic_removals(checkpoints.elastic_removals);
    response->set_checkpoints_failed(checkpoints.failed);
    response->set_last_checkpoint_failure(checkpoints.last_failure);
    response->set_final_checkpoint_failed(checkpoints.final_checkpoint_failed);
  }
  return Reply(context, call, status);
}

grpc::ServerUnaryReactor* SchedulerServiceImpl::Rejoin(grpc::CallbackServerContext* context,
                                                       const RejoinRequest* request, RegisterResponse* response) {
  const RpcMetrics::Call call = rejoin_rpc_.Begin();
  absl::Status status = CheckCaller(context, request->job_id(), kWorkerRoles, "Rejoin", std::nullopt, request->id());
  // Only the live holder of the id may rejoin (this also counts as its heartbeat).
  bool removed = false;
  int rank = -1;
  if (status.ok()) {
    status = membership_->Heartbeat(Role::kWorker, request->id(), request->incarnation(), MonotonicNow(), 0, &rank)
                 .status();
    if (absl::IsOutOfRange(status)) {  // a rescale left this worker out: it exits
      removed = true;
      status = absl::OkStatus();
    }
  }
  if (status.ok() && removed) {
    response->set_rank(-1);
    response->set_removed(true);
    response->set_layout_generation(membership_->layout().generation);
    KLOG(Info) << "worker " << request->id() << " was left out by a rescale: it exits";
    return Reply(context, call, status);
  }
  if (status.ok() && (membership_->rolling_back() || membership_->state() == JobState::kForming)) {
    status = absl::UnavailableError("the job is rolling back to its last checkpoint; retry shortly");
  }
  const JobLayout layout = membership_->layout();
  // The rank as of that layout (a rescale may have renumbered the worker meanwhile).
  if (status.ok()) rank = RankOfId(layout.worker_ids, request->id());
  if (status.ok() && (rank < 0 || rank >= layout.num_workers)) {
    status = absl::UnavailableError("this worker joins in a rescale that is not done yet; retry shortly");
  }
  if (status.ok()) {
    response->set_rank(rank);
    response->set_id(request->id());
    response->set_incarnation(request->incarnation());
    response->set_generation(layout.worker_generations[rank]);
    FillView(response->mutable_view());
    response->set_clock(clocks_->ClockOf(rank));
    if (auto state = job_controller_->StateFor(rank, response->clock())) *response->mutable_state() = *state;
    response->set_rollbacks(job_controller_->status().rollbacks);
    response->set_layout_generation(layout.generation);
    KLOG(Info) << "worker " << request->id() << " rejoins as rank " << rank << " at clock " << response->clock()
               << " (generation " << response->generation() << ", layout " << layout.generation << ")";
  }
  return Reply(context, call, status);
}

grpc::ServerUnaryReactor* SchedulerServiceImpl::RequestRollback(grpc::CallbackServerContext* context,
                                                                const RequestRollbackRequest* request,
                                                                RequestRollbackResponse* response) {
  const RpcMetrics::Call call = request_rollback_rpc_.Begin();
  absl::Status status =
      CheckCaller(context, request->job_id(), kWorkerRoles, "RequestRollback", std::nullopt, request->id());
  if (status.ok() && request->reason().size() > kMaxRollbackReasonBytes) {
    status = absl::InvalidArgumentError(absl::StrFormat("a rollback's reason must be at most %d bytes, got %d",
                                                        kMaxRollbackReasonBytes, request->reason().size()));
  }
  // Only the live holder of the id may ask (this also counts as its heartbeat).
  if (status.ok()) {
    status = membership_->Heartbeat(Role::kWorker, request->id(), request->incarnation(), MonotonicNow()).status();
  }
  const JobLayout layout = membership_->layout();
  const int rank = RankOfId(layout.worker_ids, request->id());
  if (status.ok() && rank == -1) {
    status = absl::FailedPreconditionError(absl::StrFormat(
        "worker %d joins in a rescale that is not done yet: it has no timeline to roll back", request->id()));
  }
  const uint64_t current = status.ok() ? layout.worker_generations[rank] : 0;
  if (status.ok() && request->generation() > current) {
    status = absl::InvalidArgumentError(absl::StrFormat(
        "rollback request of generation %d from worker %d, ahead of the generation %d its requests carry: stamp "
        "the generation Register or Rejoin answered",
        request->generation(), request->id(), current));
  }
  // A rollback (or a rescale that renumbered this worker) since the request's generation, or one in progress,
  // already discards that timeline: every worker asking for the same failure gets the same answer.
  const bool served = status.ok() && (request->generation() < current || membership_->rolling_back());
  if (status.ok() && !served) {
    const JobState state = membership_->state();
    if (state == JobState::kForming || state == JobState::kFinished) {
      status = absl::FailedPreconditionError(
          absl::StrCat("the job is ", JobStateName(state), ", not running: there is nothing to roll back"));
    } else if (membership_->pending_scale().has_value()) {
      status = absl::FailedPreconditionError(
          "a rescale is in progress: the job cannot roll back before it is done (the workers then rejoin in the new "
          "layout)");
    }
  }
  if (status.ok()) {
    // The reason is the client's text: escaped, so it cannot forge log lines.
    std::string why = absl::StrFormat("worker %d (rank %d, generation %d) asked for a rollback: %s", request->id(),
                                      rank, request->generation(), absl::CHexEscape(request->reason()));
    if (served) {
      KLOG(Info) << why << ": its timeline is already discarded (generation " << current << " now)";
    } else {
      KLOG(Warning) << why;
      job_controller_->RequestRollback(request->generation(), std::move(why));
    }
    response->set_rolled_back(!served);
    response->set_generation(current);
    response->set_rollbacks(job_controller_->status().rollbacks);
  }
  return Reply(context, call, status);
}

grpc::ServerUnaryReactor* SchedulerServiceImpl::RequestCheckpoint(grpc::CallbackServerContext* context,
                                                                  const RequestCheckpointRequest* request,
                                                                  RequestCheckpointResponse* response) {
  const RpcMetrics::Call call = request_checkpoint_rpc_.Begin();
  absl::Status status =
      CheckCaller(context, request->job_id(), kCheckpointRoles, "RequestCheckpoint", std::nullopt, std::nullopt);
  if (status.ok()) {
    absl::StatusOr<int64_t> clock = job_controller_->Request();
    status = clock.status();
    if (status.ok()) response->set_clock(*clock);
  }
  return Reply(context, call, status);
}

grpc::ServerUnaryReactor* SchedulerServiceImpl::Scale(grpc::CallbackServerContext* context,
                                                      const ScaleRequest* request, ScaleResponse* response) {
  const RpcMetrics::Call call = scale_rpc_.Begin();
  absl::Status status = CheckCaller(context, request->job_id(), kScaleRoles, "Scale", std::nullopt, std::nullopt);
  if (status.ok() && (request->join_timeout_ms() < 0 || request->join_timeout_ms() > 86400000)) {
    status = absl::InvalidArgumentError("join_timeout_ms must be in [0, 1 day]");
  }
  if (!status.ok()) return Reply(context, call, status);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Duration join_timeout =
      request->join_timeout_ms() > 0 ? absl::Milliseconds(request->join_timeout_ms()) : absl::Minutes(5);
  // Answered by the job controller once the rescale is done; no gRPC thread waits for it.
  ScaleTarget target{request->servers(), request->workers(),
                     {request->remove_servers().begin(), request->remove_servers().end()},
                     {request->remove_workers().begin(), request->remove_workers().end()}};
  status = job_controller_->Scale(
      std::move(target), join_timeout,
      [reactor, response, call](absl::StatusOr<ScaleResult> result) {
        if (result.ok()) {
          response->set_clock(result->clock);
          response->set_layout_generation(result->layout_generation);
          response->set_held_seconds(absl::ToDoubleSeconds(result->held));
          response->set_moved_seconds(absl::ToDoubleSeconds(result->moved));
          response->set_rows_moved(result->rows_moved);
          response->set_bytes_moved(result->bytes_moved);
          response->set_fingerprint_before(result->fingerprint_before);
          response->set_fingerprint_after(result->fingerprint_after);
        }
        call.End(result.status());
        reactor->Finish(ToGrpcStatus(result.status()));
      },
      request->verify(), request->at_clock());
  if (!status.ok()) {
    call.End(status);
    reactor->Finish(ToGrpcStatus(status));
  } else {
    KLOG(Info) << "rescale requested: " << request->servers() << " servers, " << request->workers() << " workers";
  }
  return reactor;
}

void SchedulerServiceImpl::ExpireSilent(absl::Time now) {
  const absl::Duration stalled = membership_->stalled();
  const std::vector<Member> expired = membership_->ExpireSilent(now);
  if (const int64_t deaf = membership_->deaf_periods(); deaf != deaf_periods_logged_.exchange(deaf)) {
    KLOG(Warning) << "the scheduler heard no member for longer than the heartbeat timeout (it was cut off, or "
                  << "everyone stopped at once): nobody was declared dead meanwhile, and every member has the deaf "
                  << "grace to be heard again";
  }
  if (const absl::Duration stall = membership_->stalled() - stalled; stall > absl::ZeroDuration()) {
    KLOG(Warning) << "the scheduler did not run for about " << absl::FormatDuration(stall)
                  << " (a pause or stall): members are judged by the time it was running";
  }
  if (!expired.empty()) job_controller_->Wake();
  for (const Member& m : expired) {
    KLOG(Warning) << RoleName(m.role) << " rank " << m.rank << " (id " << m.id << ")"
                  << (m.address.empty() ? "" : " at ") << m.address << " declared dead: silent for "
                  << absl::FormatDuration(now - m.last_heartbeat) << "; job generation "
                  << membership_->generation() << ", " << JobStateName(membership_->state());
  }
}

void SchedulerServiceImpl::CancelWaits() {
  job_controller_->Stop();
  std::vector<std::function<void()>> forming;
  {
    absl::MutexLock lock(&forming_mu_);
    shutting_down_.store(true);
    forming.swap(forming_waits_);
  }
  for (auto& wait : forming) wait();  // into the ClockTable, cancelled just below
  const size_t n = clocks_->CancelAll(absl::UnavailableError("the scheduler is shutting down"));
  if (n > 0) KLOG(Info) << "cancelled " << n << " pending WaitToStart calls";
}

size_t SchedulerServiceImpl::num_forming_waits() {
  absl::MutexLock lock(&forming_mu_);
  return forming_waits_.size();
}

absl::StatusOr<std::unique_ptr<SchedulerServer>> SchedulerServer::Start(const SchedulerServerOptions& server_options,
                                                                        const SchedulerOptions& options) {
  if (server_options.memory_quota_bytes < (int64_t{16} << 20) || server_options.max_concurrent_streams < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the scheduler's memory quota must be at least 16 MiB and its concurrent streams at least 1, got ",
        server_options.memory_quota_bytes, " bytes and ", server_options.max_concurrent_streams));
  }
  auto service = SchedulerServiceImpl::Create(options);
  if (!service.ok()) return service.status();
  if (absl::Status started = (*service)->StartJobController(); !started.ok()) return started;
  std::unique_ptr<SchedulerServer> server(new SchedulerServer());
  server->service_ = std::move(service).value();
  grpc::EnableDefaultHealthCheckService(true);
  KESTREL_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                           MakeServerCredentials(options.tls, server_options.address));
  grpc::ResourceQuota quota("kestrel_scheduler");
  quota.Resize(static_cast<size_t>(server_options.memory_quota_bytes));
  grpc::ServerBuilder builder;
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, server_options.max_concurrent_streams);
  ApplyListenerNetworkPolicy(builder);
  builder.AddListeningPort(server_options.address, std::move(credentials), &server->port_);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", server_options.address));
  }
  if (auto* health = server->server_->GetHealthCheckService()) {
    health->SetServingStatus(true);
    health->SetServingStatus("kestrel.Scheduler", true);
  }
  const absl::Duration period = options.membership.heartbeat_interval / 4;
  SchedulerServer* raw = server.get();
  server->expiry_ = std::thread([raw, period] {
    while (!raw->stop_.WaitForNotificationWithTimeout(period)) raw->service_->ExpireSilent(MonotonicNow());
  });
  return server;
}

SchedulerServer::~SchedulerServer() {
  Shutdown();
  Wait();
}

void SchedulerServer::Shutdown() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (expiry_.joinable()) expiry_.join();
  if (service_ != nullptr) service_->CancelWaits();
  if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
}

void SchedulerServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

}  // namespace kestrel
