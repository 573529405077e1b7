#include "server/ps_service.h"

#include <algorithm>
#include <deque>
#include <thread>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/grpc_status.h"
#include "common/pull_wire.h"
#include "common/status.h"
#include "grpcpp/resource_quota.h"
#include "common/thread_pool.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/ps_handlers.h"
#include "server/server_metrics.h"

namespace kestrel {
namespace {

// Who may call what (common/peer_identity.h): workers move rows and create their tables; the scheduler
// checkpoints and restores; an admin (kestrel_ctl, tools) reads descriptions and statistics.
constexpr PeerRoles kDataRoles = RolesOf({PeerRole::kWorker});
constexpr PeerRoles kReadRoles = RolesOf({PeerRole::kWorker, PeerRole::kScheduler, PeerRole::kAdmin});
constexpr PeerRoles kAdminRoles = RolesOf({PeerRole::kScheduler});
// Replicate: only another server of the job (a primary forwarding an update it applied).
constexpr PeerRoles kServerRoles = RolesOf({PeerRole::kServer});

std::optional<int> OwnerOf(const RequestHeader& header) {
  return header.has_owner() ? std::optional<int>(header.owner()) : std::nullopt;
}

}  // namespace

PeerServers::PeerServers(std::shared_ptr<grpc::ChannelCredentials> credentials, int num_servers)
    : credentials_(credentials != nullptr ? std::move(credentials) : grpc::InsecureChannelCredentials()),
      num_servers_(static_cast<size_t>(std::max(num_servers, 0))),
      addresses_(num_servers_),
      stubs_(num_servers_) {}

void PeerServers::Resize(int num_servers) {
  absl::MutexLock lock(&mu_);
  num_servers_ = static_cast<size_t>(std::max(num_servers, 0));
  addresses_.resize(num_servers_);
  stubs_.resize(num_servers_);
}

void PeerServers::SetAddresses(const std::vector<std::string>& addresses) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < std::min(addresses.size(), num_servers_); ++i) {
    if (addresses[i] == addresses_[i]) continue;
    addresses_[i] = addresses[i];
    stubs_[i] = addresses[i].empty() ? nullptr
                                     : std::make_shared<grpc::GenericStub>(grpc::CreateChannel(addresses[i], credentials_));
  }
}

std::shared_ptr<grpc::GenericStub> PeerServers::Stub(int server) const {
  absl::MutexLock lock(&mu_);
  if (server < 0 || server >= static_cast<int>(stubs_.size())) return nullptr;
  return stubs_[server];
}

PsServiceImpl::PsServiceImpl(std::shared_ptr<HostedShards> hosted, ThreadPool* pool, ShardStore* store,
                             PeerServers* peers, absl::Duration forward_deadline)
    : job_id_(hosted->own().job_id()),
      pool_(pool),
      store_(store),
      peers_(peers),
      forward_deadline_(forward_deadline),
      pull_rpc_(ServerMetrics::Get().rpc().method("Pull")),
      push_rpc_(ServerMetrics::Get().rpc().method("Push")),
      pull_dense_rpc_(ServerMetrics::Get().rpc().method("PullDense")),
      push_dense_rpc_(ServerMetrics::Get().rpc().method("PushDense")),
      create_table_rpc_(ServerMetrics::Get().rpc().method("CreateTable")),
      describe_tables_rpc_(ServerMetrics::Get().rpc().method("DescribeTables")),
      stats_rpc_(ServerMetrics::Get().rpc().method("Stats")),
      checkpoint_rpc_(ServerMetrics::Get().rpc().method("Checkpoint")),
      restore_rpc_(ServerMetrics::Get().rpc().method("Restore")),
      replicate_rpc_(ServerMetrics::Get().rpc().method("Replicate")),
      copy_group_rpc_(ServerMetrics::Get().rpc().method("CopyGroup")),
      rescale_rpc_(ServerMetrics::Get().rpc().method("RescaleShard")),
      hosted_(std::move(hosted)),
      admin_(1, /*max_queued=*/16),
      stats_hook_([this] { ServerMetrics::Get().Refresh(this->hosted()->own()); }) {}

std::shared_ptr<HostedShards> PsServiceImpl::hosted() const {
  absl::MutexLock lock(&layout_mu_);
  return hosted_;
}

uint64_t PsServiceImpl::layout_generation() const {
  absl::MutexLock lock(&layout_mu_);
  return layout_generation_;
}

bool PsServiceImpl::left() const {
  absl::MutexLock lock(&layout_mu_);
  return left_;
}

void PsServiceImpl::SetJobView(uint64_t job_generation, const std::vector<uint64_t>& worker_generations,
                               uint64_t layout_generation, const std::vector<int>& worker_ids) {
  Hosted hosted;
  {
    absl::MutexLock lock(&layout_mu_);
    if (layout_generation < layout_generation_ || !CheckWorkerIds(worker_ids.size()).ok()) return;
    SetWorkerIdsLocked(worker_ids);
    job_view_set_ = true;
    job_generation_ = job_generation;
    worker_generations_ = worker_generations;
    hosted = hosted_;
  }
  hosted->SetJobView(job_generation, worker_generations);
}

void PsServiceImpl::SetGenerationListener(std::function<void()> listener) {
  Hosted hosted;
  {
    absl::MutexLock lock(&layout_mu_);
    generation_listener_ = listener;
    hosted = hosted_;
  }
  hosted->SetGenerationListener(std::move(listener));
}

void PsServiceImpl::SetSwitchListener(std::function<void(HostedShards&)> listener) {
  absl::MutexLock lock(&layout_mu_);
  switch_listener_ = std::move(listener);
}

void PsServiceImpl::AdoptLayout(std::shared_ptr<HostedShards> groups, uint64_t layout_generation,
                                const std::vector<int>& worker_ids) {
  std::function<void(HostedShards&)> listener;
  {
    absl::MutexLock lock(&layout_mu_);
    SetWorkerIdsLocked(worker_ids);
    if (job_view_set_) groups->SetJobView(job_generation_, worker_generations_);
    if (generation_listener_) groups->SetGenerationListener(generation_listener_);
    hosted_ = groups;
    layout_generation_ = layout_generation;
    listener = switch_listener_;
  }
  if (peers_ != nullptr) peers_->Resize(groups->partition().num_servers());
  if (listener) listener(*groups);
}

// Runs `work` on the handler pool (or inline on gRPC's callback thread without one); the call finishes with the
// status `work` hands its `done`, counted and timed in `rpc`. Handlers do CPU work only; nothing in them waits
// on other calls.
grpc::ServerUnaryReactor* PsServiceImpl::RunAsync(grpc::CallbackServerContext* context, RpcMetrics::Method& rpc,
                                                  PeerRoles allowed, const char* method,
                                                  std::function<void(const Hosted&, const Caller&, Done done)> work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const RpcMetrics::Call call = rpc.Begin();
  Done finish = [reactor, call](const absl::Status& status) {
    call.End(status);
    reactor->Finish(ToGrpcStatus(status));
  };
  absl::StatusOr<Caller> caller = AuthorizePeer(context->auth_context().get(), job_id_, allowed, method);
  if (!caller.ok()) {
    finish(hosted()->own().Count(caller.status()));
  } else if (pool_ == nullptr) {
    work(hosted(), *caller, std::move(finish));
  } else if (!pool_->TrySchedule([this, finish, work = std::move(work), caller = *std::move(caller)]() mutable {
               work(hosted(), caller, std::move(finish));
             })) {
    finish(hosted()->own().Count(absl::UnavailableError(absl::StrCat(
        "the server is busy: ", kMaxQueuedCalls, " calls are waiting for a handler thread; retry"))));
  }
  return reactor;
}

grpc::ServerUnaryReactor* PsServiceImpl::Run(grpc::CallbackServerContext* context, RpcMetrics::Method& rpc,
                                             PeerRoles allowed, const char* method,
                                             std::function<absl::Status(const Hosted&, const Caller&)> work) {
  return RunAsync(context, rpc, allowed, method,
                  [work = std::move(work)](const Hosted& hosted, const Caller& caller, Done done) {
                    done(work(hosted, caller));
                  });
}

grpc::ServerUnaryReactor* PsServiceImpl::RunAdmin(grpc::CallbackServerContext* context, RpcMetrics::Method& rpc,
                                                  const char* method, const RequestHeader& header,
                                                  std::function<absl::Status(const Hosted&)> work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const RpcMetrics::Call call = rpc.Begin();
  const absl::Status allowed = AuthorizePeer(context->auth_context().get(), job_id_, kAdminRoles, method).status();
  const bool queued = admin_.TrySchedule([this, reactor, &header, call, allowed, method, work = std::move(work)] {
    const Hosted hosted = this->hosted();
    Shard& own = hosted->own();
    absl::Status status = allowed.ok() ? own.CheckJob(ContextOf(header)) : own.Count(allowed);
    if (status.ok()) status = work(hosted);
    if (!status.ok()) KLOG(Warning) << method << " failed: " << status;
    call.End(status);
    reactor->Finish(ToGrpcStatus(status));
  });
  if (!queued) {  // a flood of admin calls: refused, not queued without bound
    const absl::Status busy = hosted()->own().Count(
        absl::UnavailableError("too many checkpoint, restore, copy and rescale calls are waiting; retry"));
    call.End(busy);
    reactor->Finish(ToGrpcStatus(busy));
  }
  return reactor;
}

absl::Status PsServiceImpl::CheckWorkerCaller(const Caller& caller, int worker_rank, const char* what) const {
  if (!caller.has_value() || caller->role != PeerRole::kWorker) return CheckClaimedRank(caller, worker_rank, what);
  int id = worker_rank;
  // Lock-free: every worker request with a certificate reads it.
  const std::shared_ptr<const std::vector<int>> ids = std::atomic_load(&worker_ids_);
  if (ids != nullptr && worker_rank >= 0 && static_cast<size_t>(worker_rank) < ids->size()) id = (*ids)[worker_rank];
  return CheckClaimedRank(caller, id, what);
}

void PsServiceImpl::SetWorkerIdsLocked(std::vector<int> ids) {
  std::atomic_store(&worker_ids_, ids.empty() ? nullptr : std::make_shared<const std::vector<int>>(std::move(ids)));
}

absl::Status PsServiceImpl::CheckWorkerIds(size_t count) {
  if (count <= static_cast<size_t>(kMaxWorkerIds)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("the layout names %d worker ids, more than the %d workers a job may have", count, kMaxWorkerIds));
}

absl::Status PsServiceImpl::CheckReplicated(const HostedShards& hosted) {
  if (hosted.replicated()) return absl::OkStatus();
  return hosted.own().Count(absl::FailedPreconditionError(
      "this job keeps one copy of each key range (--replicas=1): there is nothing to replicate to this server"));
}

absl::StatusOr<Shard*> PsServiceImpl::PrimaryGroup(const HostedShards& hosted, const RequestHeader& header) const {
  const Shard& own = hosted.own();
  if (left()) {
    return own.Count(absl::UnavailableError(absl::StrFormat(
        "server %d left the job in a rescale and serves nothing: ask the scheduler for the new layout and retry",
        hosted.server())));
  }
  absl::StatusOr<Shard*> group = hosted.Group(OwnerOf(header));
  if (!group.ok()) return own.Count(group.status());
  KESTREL_RETURN_IF_ERROR(own.Count(hosted.CheckPrimary((*group)->shard_index())));
  return group;
}

void PsServiceImpl::Forward(const HostedShards& hosted, const char* method, int owner,
                            const grpc::ByteBuffer& request, Done done) {
  const std::vector<int> backups = hosted.BackupsOf(owner);
  if (backups.empty()) return done(absl::OkStatus());
  struct Forwarding {
    explicit Forwarding(size_t n) : calls(n), pending(static_cast<int>(n)) {}
    struct Call {
      std::shared_ptr<grpc::GenericStub> stub;  // its channel lives until the call is done
      grpc::ClientContext context;
      grpc::ByteBuffer response;
    };
    grpc::ByteBuffer request;  // shares the received slices
    std::vector<Call> calls;
    Done done;
    absl::Mutex mu;
    int pending ABSL_GUARDED_BY(mu);
    absl::Status first_error ABSL_GUARDED_BY(mu);
  };
  auto state = std::make_shared<Forwarding>(backups.size());
  state->request = request;
  state->done = std::move(done);
  auto finished = [state, owner](int backup, absl::Status status) {
    bool last;
    absl::Status result;
    {
      absl::MutexLock lock(&state->mu);
      if (!status.ok() && state->first_error.ok()) {
        state->first_error = absl::UnavailableError(absl::StrFormat(
            "backup server %d of the ranges of server %d does not have the update (%s: %s); the push is not "
            "acknowledged: retry",
            backup, owner, absl::StatusCodeToString(status.code()), status.message()));
      }
      last = --state->pending == 0;
      result = state->first_error;
    }
    if (last) state->done(std::move(result));
  };
  const std::string path = absl::StrCat("/kestrel.ParameterServer/", method);
  for (size_t i = 0; i < backups.size(); ++i) {
    std::shared_ptr<grpc::GenericStub> stub = peers_ != nullptr ? peers_->Stub(backups[i]) : nullptr;
    if (stub == nullptr) {
      finished(backups[i], absl::UnavailableError("its address is not known yet"));
      continue;
    }
    Forwarding::Call& call = state->calls[i];
    call.stub = stub;
    call.context.set_deadline(absl::ToChronoTime(absl::Now() + forward_deadline_));
    stub->UnaryCall(&call.context, path, grpc::StubOptions(), &state->request, &call.response,
                    [finished, backup = backups[i]](grpc::Status status) { finished(backup, FromGrpcStatus(status)); });
  }
}

grpc::ServerUnaryReactor* PsServiceImpl::Pull(grpc::CallbackServerContext* context,
                                               const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  return Run(context, pull_rpc_, kDataRoles, "Pull",
             [this, request, response](const Hosted& hosted, const Caller& caller) -> absl::Status {
               const Shard& own = hosted->own();
               PullRequest parsed;
               grpc::ByteBuffer copy(*request);  // shares the slices; Deserialize consumes its argument
               grpc::Status status = grpc::SerializationTraits<PullRequest>::Deserialize(&copy, &parsed);
               if (!status.ok()) {
                 return own.Count(absl::InvalidArgumentError("malformed PullRequest: " + status.error_message()));
               }
               KESTREL_RETURN_IF_ERROR(own.Count(CheckWorkerCaller(caller, parsed.header().worker_rank(), "the Pull")));
               KESTREL_ASSIGN_OR_RETURN(Shard * group, PrimaryGroup(*hosted, parsed.header()));
               PullResponseWriter writer;
               absl::Status handled = HandlePullInto(*group, parsed, [&writer](size_t values, int dim, ValueType type) {
                 return writer.Allocate(values, dim, type);
               });
               if (handled.ok()) *response = writer.Finish();
               return handled;
             });
}

namespace {

// Serializes a push's answer into the raw response.
absl::Status WritePushResponse(const PushResponse& answer, grpc::ByteBuffer* response) {
  bool own_buffer;
  grpc::Status serialized = grpc::SerializationTraits<PushResponse>::Serialize(answer, response, &own_buffer);
  return serialized.ok() ? absl::OkStatus() : absl::InternalError(serialized.error_message());
}

}  // namespace

grpc::ServerUnaryReactor* PsServiceImpl::Push(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                              grpc::ByteBuffer* response) {
  return RunAsync(context, push_rpc_, kDataRoles, "Push",
                  [this, request, response](const Hosted& hosted, const Caller& caller, Done done) {
                    absl::Status status = [&]() -> absl::Status {
                      const Shard& own = hosted->own();
                      PushRequestView view;
                      KESTREL_RETURN_IF_ERROR(own.Count(ReadPushRequest(*request, &view)));
                      KESTREL_RETURN_IF_ERROR(
                          own.Count(CheckWorkerCaller(caller, view.header->worker_rank(), "the Push")));
                      KESTREL_ASSIGN_OR_RETURN(Shard * group, PrimaryGroup(*hosted, *view.header));
                      PushResponse answer;
                      KESTREL_RETURN_IF_ERROR(HandlePushFields(*group, /*dense=*/false, view, &answer));
                      KESTREL_RETURN_IF_ERROR(WritePushResponse(answer, response));
                      // Applied here (or a repeat): the backups get it too before the worker hears OK.
                      Forward(*hosted, "Replicate", group->shard_index(), *request, std::move(done));
                      return absl::OkStatus();
                    }();
                    if (!status.ok()) done(std::move(status));
                  });
}

grpc::ServerUnaryReactor* PsServiceImpl::Replicate(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  return Run(context, replicate_rpc_, kServerRoles, "Replicate",
             [request, response](const Hosted& hosted, const Caller&) -> absl::Status {
               const Shard& own = hosted->own();
               KESTREL_RETURN_IF_ERROR(CheckReplicated(*hosted));
               PushRequestView view;
               KESTREL_RETURN_IF_ERROR(own.Count(ReadPushRequest(*request, &view)));
               if (!view.header->has_owner()) {
                 return own.Count(absl::InvalidArgumentError("a replicated push must name its range group (owner)"));
               }
               KESTREL_ASSIGN_OR_RETURN(Shard * group, own.Count(hosted->Group(view.header->owner())));
               PushResponse answer;
               KESTREL_RETURN_IF_ERROR(HandlePushFields(*group, /*dense=*/false, view, &answer));
               return WritePushResponse(answer, response);
             });
}

grpc::ServerUnaryReactor* PsServiceImpl::PullDense(grpc::CallbackServerContext* context,
                                                   const PullRequest* request, PullResponse* response) {
  return Run(context, pull_dense_rpc_, kDataRoles, "PullDense",
             [=](const Hosted& hosted, const Caller& caller) -> absl::Status {
               KESTREL_RETURN_IF_ERROR(hosted->own().Count(
                   CheckWorkerCaller(caller, request->header().worker_rank(), "the PullDense")));
               KESTREL_ASSIGN_OR_RETURN(Shard * group, PrimaryGroup(*hosted, request->header()));
               return HandlePullDense(*group, *request, response);
             });
}

grpc::ServerUnaryReactor* PsServiceImpl::PushDense(grpc::CallbackServerContext* context,
                                                   const PushRequest* request, PushResponse* response) {
  return RunAsync(context, push_dense_rpc_, kDataRoles, "PushDense",
                  [=](const Hosted& hosted, const Caller& caller, Done done) {
                    absl::Status status = [&]() -> absl::Status {
                      KESTREL_RETURN_IF_ERROR(hosted->own().Count(
                          CheckWorkerCaller(caller, request->header().worker_rank(), "the PushDense")));
                      KESTREL_ASSIGN_OR_RETURN(Shard * group, PrimaryGroup(*hosted, request->header()));
                      KESTREL_RETURN_IF_ERROR(HandlePushDense(*group, *request, response));
                      if (hosted->BackupsOf(group->shard_index()).empty()) {
                        done(absl::OkStatus());
                        return absl::OkStatus();
                      }
                      grpc::ByteBuffer bytes;
                      bool own_buffer;
                      grpc::Status serialized =
                          grpc::SerializationTraits<PushRequest>::Serialize(*request, &bytes, &own_buffer);
                      if (!serialized.ok()) return absl::InternalError(serialized.error_message());
                      Forward(*hosted, "ReplicateDense", group->shard_index(), bytes, std::move(done));
                      return absl::OkStatus();
                    }();
                    if (!status.ok()) done(std::move(status));
                  });
}

grpc::ServerUnaryReactor* PsServiceImpl::ReplicateDense(grpc::CallbackServerContext* context,
                                                        const PushRequest* request, PushResponse* response) {
  return Run(context, replicate_rpc_, kServerRoles, "ReplicateDense",
             [=](const Hosted& hosted, const Caller&) -> absl::Status {
               const Shard& own = hosted->own();
               KESTREL_RETURN_IF_ERROR(CheckReplicated(*hosted));
               if (!request->header().has_owner()) {
                 return own.Count(absl::InvalidArgumentError("a replicated push must name its range group (owner)"));
               }
               KESTREL_ASSIGN_OR_RETURN(Shard * group, own.Count(hosted->Group(request->header().owner())));
               return HandlePushDense(*group, *request, response);
             });
}

grpc::ServerUnaryReactor* PsServiceImpl::CreateTable(grpc::CallbackServerContext* context,
                                                     const CreateTableRequest* request,
                                                     CreateTableResponse* response) {
  // Every copy of every group this server holds gets the table (a backup must be able to take over).
  return Run(context, create_table_rpc_, kDataRoles, "CreateTable",
             [=](const Hosted& hosted, const Caller&) -> absl::Status {
               bool created = false;
               for (Shard* group : hosted->shards()) {
                 KESTREL_RETURN_IF_ERROR(HandleCreateTable(*group, *request, response));
                 created |= response->created();
               }
               response->set_created(created);
               return absl::OkStatus();
             });
}

grpc::ServerUnaryReactor* PsServiceImpl::DescribeTables(grpc::CallbackServerContext* context,
                                                        const DescribeTablesRequest* request,
                                                        DescribeTablesResponse* response) {
  return Run(context, describe_tables_rpc_, kReadRoles, "DescribeTables",
             [=](const Hosted& hosted, const Caller&) -> absl::Status {
               KESTREL_ASSIGN_OR_RETURN(Shard * group,
                                        hosted->own().Count(hosted->Group(OwnerOf(request->header()))));
               return HandleDescribeTables(*group, *request, response);
             });
}

grpc::ServerUnaryReactor* PsServiceImpl::Stats(grpc::CallbackServerContext* context, const StatsRequest* request,
                                               StatsResponse* response) {
  return Run(context, stats_rpc_, kReadRoles, "Stats", [=](const Hosted& hosted, const Caller& caller) -> absl::Status {
    const Shard& own = hosted->own();
    // Fingerprints read every row of every table: an admin's (or the scheduler's) request, not a worker's.
    if (request->fingerprints() && caller.has_value() && caller->role == PeerRole::kWorker) {
      return own.Count(absl::PermissionDeniedError("a worker may not ask for fingerprints (admins only)"));
    }
    if (left()) {
      return own.Count(absl::UnavailableError(
          absl::StrFormat("server %d left the job in a rescale and holds no rows of it", hosted->server())));
    }
    KESTREL_ASSIGN_OR_RETURN(Shard * group, own.Count(hosted->Group(OwnerOf(request->header()))));
    return HandleStats(*group, *request, response);
  });
}

grpc::ServerUnaryReactor* PsServiceImpl::Checkpoint(grpc::CallbackServerContext* context,
                                                    const CheckpointShardRequest* request,
                                                    CheckpointShardResponse* response) {
  return RunAdmin(context, checkpoint_rpc_, "Checkpoint", request->header(),
                  [this, request, response](const Hosted& hosted) -> absl::Status {
                    Shard& own = hosted->own();
                    if (store_ == nullptr) {
                      return absl::FailedPreconditionError(absl::StrFormat(
                          "server %d was started without --checkpoint_dir: it cannot write checkpoints",
                          own.shard_index()));
                    }
                    if (left()) {
                      return absl::FailedPreconditionError(absl::StrFormat(
                          "server %d left the job in a rescale: it has nothing to checkpoint", own.shard_index()));
                    }
                    const absl::Time start = absl::Now();
                    KESTREL_ASSIGN_OR_RETURN(ShardCheckpoint written, store_->Checkpoint(own, request->name()));
                    ServerMetrics& metrics = ServerMetrics::Get();
                    metrics.checkpoint_duration().Observe(absl::ToDoubleSeconds(absl::Now() - start));
                    metrics.checkpoint_written_rows().Increment(static_cast<double>(written.rows_written()));
                    metrics.checkpoint_written_bytes().Increment(static_cast<double>(written.bytes_written()));
                    *response->mutable_shard() = std::move(written);
                    return absl::OkStatus();
                  });
}

absl::StatusOr<PsServiceImpl::Hosted> PsServiceImpl::GroupsForRestore(const HostedShards& hosted,
                                                                       const RestoreShardRequest& request) const {
  if (request.layout_generation() == 0) return std::shared_ptr<HostedShards>(nullptr);
  if (!hosted.options().has_value()) {
    return absl::FailedPreconditionError("this server's groups were not made by HostedShards::Create: no new layout");
  }
  absl::StatusOr<Partition> partition = Partition::Parse(request.partition());
  if (!partition.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the restore's partition: ", partition.status().message()));
  }
  if (request.layout_generation() == layout_generation() && request.rank() == hosted.server() &&
      request.partition() == hosted.partition().ToString()) {
    return std::shared_ptr<HostedShards>(nullptr);  // in that layout already (a retried restore): as usual
  }
  if (request.layout_generation() <= layout_generation()) {
    return absl::FailedPreconditionError(absl::StrFormat("layout %d is not after this server's layout %d",
                                                         request.layout_generation(), layout_generation()));
  }
  KESTREL_RETURN_IF_ERROR(CheckWorkerIds(request.worker_ids_size()));
  if (request.rank() < 0 || request.rank() >= partition->num_servers() || request.bsp_workers() < 0 ||
      request.bsp_workers() > kMaxWorkerIds) {
    return absl::InvalidArgumentError(absl::StrFormat("rank %d of a layout of %d servers (bsp workers %d)",
                                                      request.rank(), partition->num_servers(), request.bsp_workers()));
  }
  ShardOptions options = *hosted.options();
  options.shard_index = request.rank();
  options.bsp_workers = request.bsp_workers();
  KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<HostedShards> built, HostedShards::Create(options, *partition));
  return std::shared_ptr<HostedShards>(std::move(built));
}

grpc::ServerUnaryReactor* PsServiceImpl::Restore(grpc::CallbackServerContext* context,
                                                 const RestoreShardRequest* request, RestoreShardResponse* response) {
  return RunAdmin(context, restore_rpc_, "Restore", request->header(),
                  [this, request, response](const Hosted& served) -> absl::Status {
    // The scheduler moves the job's generation before it asks for the restore; this server hears of it
    // within a heartbeat (it asks at once).
    KESTREL_RETURN_IF_ERROR(
        served->own().Count(served->own().CheckRestoreGeneration(request->min_worker_generation(), absl::Seconds(5))));
    // A rollback into a new layout restores into that layout's groups, served once they hold the checkpoint.
    KESTREL_ASSIGN_OR_RETURN(Hosted next, served->own().Count(GroupsForRestore(*served, *request)));
    const Hosted& hosted = next != nullptr ? next : served;  // AdoptLayout gives new groups the job view
    // Bounded tables with a disk budget keep rows in the working store: the new own group restores through it,
    // as the served one would (the switch listener attaches it again, with the failure listener).
    if (next != nullptr && store_ != nullptr) next->own().SetColdTier(store_);
    Shard& own = hosted->own();
    const absl::Time start = absl::Now();
    auto empty = [](Shard::RowSink, Shard::SketchSink) { return absl::OkStatus(); };
    if (store_ != nullptr) {
      std::optional<CheckpointManifest> manifest;
      if (!request->name().empty()) {
        KESTREL_ASSIGN_OR_RETURN(CheckpointManifest read, store_->layout().ReadManifest(request->name()));
        manifest = std::move(read);
      }
      KESTREL_RETURN_IF_ERROR(store_->Restore(manifest, own, request->min_worker_generation()));
      // The backups' copies load the same checkpoint (their rows live in memory only).
      for (size_t g = 1; g < hosted->shards().size(); ++g) {
        Shard& group = *hosted->shards()[g];
        KESTREL_RETURN_IF_ERROR(
            manifest.has_value()
                ? ShardStore::LoadCheckpoint(store_->layout(), *manifest, group, request->min_worker_generation())
                : group.Restore({}, request->min_worker_generation(), empty));
      }
    } else if (request->name().empty()) {
      for (Shard* group : hosted->shards()) {
        KESTREL_RETURN_IF_ERROR(group->Restore({}, request->min_worker_generation(), empty));
      }
    } else {
      return absl::FailedPreconditionError(absl::StrFormat(
          "server %d was started without --checkpoint_dir: it cannot restore %s", own.shard_index(), request->name()));
    }
    if (next != nullptr) {
      AdoptLayout(next, request->layout_generation(),
                  {request->worker_ids().begin(), request->worker_ids().end()});
      KLOG(Info) << "serving the ranges of rank " << request->rank() << " of the layout of rescale "
                 << request->layout_generation() << " (restored "
                 << (request->name().empty() ? "empty tables" : request->name()) << ")";
    }
    ServerMetrics::Get().restore_duration().Observe(absl::ToDoubleSeconds(absl::Now() - start));
    uint64_t rows = 0;
    for (const TableStats& table : own.Stats().tables) rows += table.rows;
    response->set_rows(rows);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* PsServiceImpl::CopyGroup(grpc::CallbackServerContext* context,
                                                   const CopyGroupRequest* request, CopyGroupResponse* response) {
  return RunAdmin(context, copy_group_rpc_, "CopyGroup", request->header(),
                  [this, request, response](const Hosted& hosted) { return SendGroup(*hosted, *request, response); });
}

namespace {

constexpr size_t kPieceBytes = size_t{4} << 20;

// Streams rows to one server as GroupChunk pieces of about kPieceBytes, numbered 0, 1, 2, ... Rows are kept in
// one pending piece per range group, so rows of several groups arriving interleaved still travel in full pieces.
// `deliver` sends a finished piece (over gRPC, or into this server's own staging), in order, on the stream's own
// thread: reading the rows overlaps sending them, and the streams to different servers send at once. At most
// kInFlight finished pieces wait for it. Add and Finish are called from one thread.
class PieceStream {
 public:
  using Deliver = std::function<absl::Status(const GroupChunk&)>;
  static constexpr size_t kInFlight = 3;

  // `header`: every piece's fields but the rows, the sequence and `last`; `tables` go with piece 0.
  PieceStream(GroupChunk header, std::vector<TableConfig> tables, Deliver deliver)
      : header_(std::move(header)), tables_(std::move(tables)), deliver_(std::move(deliver)),
        sender_([this] { SendLoop(); }) {}
  ~PieceStream() {
    {
      absl::MutexLock lock(&mu_);
      closed_ = true;
    }
    sender_.join();
  }

  absl::Status Add(int owner, absl::string_view table, uint64_t key, absl::Span<const float> row) {
    GroupChunk& piece = pending_[owner];
    if (piece.table() != table) {
      if (!piece.keys().empty()) KESTREL_RETURN_IF_ERROR(Send(&piece, /*last=*/false));
      piece.set_table(std::string(table));
    }
    piece.set_owner(owner);
    piece.mutable_keys()->append(reinterpret_cast<const char*>(&key), sizeof(key));
    piece.mutable_rows()->append(reinterpret_cast<const char*>(row.data()), row.size() * sizeof(float));
    ++rows_;
    bytes_ += sizeof(key) + row.size() * sizeof(float);
    if (piece.keys().size() + piece.rows().size() < kPieceBytes) return absl::OkStatus();
    return Send(&piece, /*last=*/false);
  }
  // Sends every pending row, then the last piece, and waits until every piece was delivered: the first failure.
  absl::Status Finish() {
    for (auto& [owner, piece] : pending_) {
      if (!piece.keys().empty()) KESTREL_RETURN_IF_ERROR(Send(&piece, /*last=*/false));
    }
    GroupChunk last;
    last.set_owner(header_.owner());
    KESTREL_RETURN_IF_ERROR(Send(&last, /*last=*/true));
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](PieceStream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->queue_.empty() && !s->busy_; }, this));
    return error_;
  }
  uint64_t rows() const { return rows_; }
  uint64_t bytes() const { return bytes_; }

 private:
  // Queues `piece` for the sender thread (waiting while kInFlight are queued); the first failure so far.
  absl::Status Send(GroupChunk* piece, bool last) {
    GroupChunk sent = header_;
    sent.set_owner(piece->owner());
    sent.set_table(piece->table());
    sent.set_keys(std::move(*piece->mutable_keys()));
    sent.set_rows(std::move(*piece->mutable_rows()));
    sent.set_sequence(sequence_++);
    sent.set_last(last);
    if (sent.sequence() == 0) {
      for (const TableConfig& t : tables_) *sent.add_tables() = t;
    } else {
      sent.clear_partition();
    }
    piece->clear_keys();
    piece->clear_rows();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](PieceStream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
          return s->queue_.size() < kInFlight || !s->error_.ok();
        },
        this));
    if (!error_.ok()) return error_;
    queue_.push_back(std::move(sent));
    return absl::OkStatus();
  }

  void SendLoop() {
    while (true) {
      GroupChunk piece;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](PieceStream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return !s->queue_.empty() || s->closed_; },
            this));
        if (queue_.empty()) return;  // closed
        piece = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
      }
      const absl::Status status = error_ok() ? deliver_(piece) : absl::OkStatus();
      absl::MutexLock lock(&mu_);
      busy_ = false;
      if (!status.ok() && error_.ok()) error_ = status;
    }
  }
  bool error_ok() {
    absl::MutexLock lock(&mu_);
    return error_.ok();
  }

  const GroupChunk header_;
  const std::vector<TableConfig> tables_;
  const Deliver deliver_;
  std::map<int, GroupChunk> pending_;  // by range group (the adding thread's)
  uint64_t sequence_ = 0;
  uint64_t rows_ = 0, bytes_ = 0;
  absl::Mutex mu_;
  std::deque<GroupChunk> queue_ ABSL_GUARDED_BY(mu_);  // finished, not yet delivered
  bool busy_ ABSL_GUARDED_BY(mu_) = false;             // the sender thread is delivering one
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);             // the first failed delivery
  std::thread sender_;  // last: started once the members above exist
};

// Sends a piece to a server's ReceiveGroup.
PieceStream::Deliver SendTo(ParameterServer::Stub* stub, absl::Duration deadline, std::string what) {
  return [stub, deadline, what = std::move(what)](const GroupChunk& piece) -> absl::Status {
    GroupChunkResponse answer;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    absl::Status status = FromGrpcStatus(stub->ReceiveGroup(&context, piece, &answer));
    if (status.ok()) return status;
    return absl::Status(status.code(),
                        absl::StrFormat("sending piece %d to %s: %s", piece.sequence(), what, status.message()));
  };
}

}  // namespace

absl::Status PsServiceImpl::SendGroup(const HostedShards& hosted, const CopyGroupRequest& request,
                                      CopyGroupResponse* response) {
  KESTREL_RETURN_IF_ERROR(CheckReplicated(hosted));
  KESTREL_ASSIGN_OR_RETURN(Shard * group, hosted.own().Count(hosted.Group(request.owner())));
  if (request.target() == hosted.server() || request.target_address().empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("cannot copy the ranges of server %d to server %d at '%s'",
                                                      request.owner(), request.target(), request.target_address()));
  }
  auto stub = ParameterServer::NewStub(grpc::CreateChannel(
      request.target_address(), peers_ != nullptr ? peers_->credentials() : grpc::InsecureChannelCredentials()));
  GroupChunk header;
  header.mutable_header()->set_job_id(job_id_);
  header.mutable_header()->set_worker_rank(-1);
  header.set_owner(request.owner());
  PieceStream stream(header, group->DescribeTables(),
                     SendTo(stub.get(), forward_deadline_,
                            absl::StrFormat("server %d at %s", request.target(), request.target_address())));
  // One cut: no request runs on the group while it is read (the scheduler holds every worker anyway).
  KESTREL_RETURN_IF_ERROR(group->Exclusive([&](const std::vector<Table*>& tables) -> absl::Status {
    for (const Table* table : tables) {
      const std::string& name = table->config().name();
      KESTREL_RETURN_IF_ERROR(table->ForEachStoredRow([&](uint64_t key, absl::Span<const float> row) {
        return stream.Add(request.owner(), name, key, row);
      }));
    }
    return stream.Finish();
  }));
  response->set_rows(stream.rows());
  response->set_bytes(stream.bytes());
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* PsServiceImpl::ReceiveGroup(grpc::CallbackServerContext* context, const GroupChunk* request,
                                                      GroupChunkResponse* response) {
  return Run(context, copy_group_rpc_, kServerRoles, "ReceiveGroup",
             [=](const Hosted& hosted, const Caller&) -> absl::Status {
               if (request->layout_generation() == 0) KESTREL_RETURN_IF_ERROR(CheckReplicated(*hosted));
               KESTREL_RETURN_IF_ERROR(hosted->own().CheckJob(ContextOf(request->header())));
               uint64_t installed = 0;
               KESTREL_RETURN_IF_ERROR(hosted->own().Count(Receive(*hosted, *request, &installed)));
               response->set_rows(installed);
               return absl::OkStatus();
             });
}

absl::Status PsServiceImpl::StagePiece(const GroupChunk& chunk, IncomingCopy* copy) {
  if (chunk.sequence() == 0) {
    for (const Piece& piece : copy->pieces) staged_bytes_ -= piece.keys.size() + piece.rows.size();
    *copy = IncomingCopy();
    copy->owner = chunk.owner();
    copy->tables.assign(chunk.tables().begin(), chunk.tables().end());
  } else if (copy->done || copy->next_sequence != chunk.sequence()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "piece %d of rows for range group %d arrived out of order (expected piece %d%s)", chunk.sequence(),
        chunk.owner(), copy->next_sequence, copy->done ? ", after the last one" : ""));
  }
  if (!chunk.keys().empty() || !chunk.rows().empty()) {
    auto config = std::find_if(copy->tables.begin(), copy->tables.end(),
                               [&](const TableConfig& t) { return t.name() == chunk.table(); });
    if (config == copy->tables.end()) {
      return absl::InvalidArgumentError(absl::StrCat("piece of table '", chunk.table(), "', not in the copy"));
    }
    KESTREL_ASSIGN_OR_RETURN(int floats, Table::StoredFloats(*config));
    const size_t keys = chunk.keys().size() / sizeof(uint64_t);
    if (chunk.keys().size() % sizeof(uint64_t) != 0 || chunk.rows().size() != keys * floats * sizeof(float)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "piece of table '%s': %d bytes of keys and %d of rows are not whole rows of %d floats", chunk.table(),
          chunk.keys().size(), chunk.rows().size(), floats));
    }
    const uint64_t bytes = chunk.keys().size() + chunk.rows().size();
    if (staged_bytes_ + bytes > max_copy_bytes_) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "rows received for range group %d exceed the %d bytes this server stages", chunk.owner(), max_copy_bytes_));
    }
    staged_bytes_ += bytes;
    copy->pieces.push_back({chunk.owner(), chunk.table(), chunk.keys(), chunk.rows()});
  }
  copy->next_sequence = chunk.sequence() + 1;
  copy->done = chunk.last();
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> PsServiceImpl::Install(Shard& group, const std::vector<TableConfig>& tables,
                                                const std::vector<const Piece*>& pieces) {
  uint64_t installed = 0;
  KESTREL_RETURN_IF_ERROR(group.Restore(
      tables, /*min_worker_generation=*/0, [&](Shard::RowSink rows, Shard::SketchSink) -> absl::Status {
        std::vector<float> row;  // the bytes may sit unaligned in the piece
        for (const Piece* piece : pieces) {
          const size_t n = piece->keys.size() / sizeof(uint64_t);
          const size_t floats = piece->rows.size() / sizeof(float) / std::max<size_t>(n, 1);
          row.resize(floats);
          for (size_t i = 0; i < n; ++i) {
            uint64_t key;
            std::memcpy(&key, piece->keys.data() + i * sizeof(key), sizeof(key));
            std::memcpy(row.data(), piece->rows.data() + i * floats * sizeof(float), floats * sizeof(float));
            KESTREL_ASSIGN_OR_RETURN(bool took, rows(piece->table, key, row));
            if (!took) {
              return absl::InvalidArgumentError(absl::StrFormat(
                  "key 0x%016x of table '%s' is not in the ranges of server %d", key, piece->table,
                  group.shard_index()));
            }
            ++installed;
          }
        }
        return absl::OkStatus();
      }));
  return installed;
}

absl::Status PsServiceImpl::Receive(const HostedShards& hosted, const GroupChunk& chunk, uint64_t* installed) {
  if (chunk.layout_generation() > 0) return ReceiveRescale(hosted, chunk);
  // A group copy (re-replication): installed with its last piece.
  KESTREL_ASSIGN_OR_RETURN(Shard * group, hosted.Group(chunk.owner()));
  absl::MutexLock lock(&copy_mu_);
  if (chunk.sequence() != 0 && (!incoming_.has_value() || incoming_->owner != chunk.owner())) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "piece %d of a copy of the ranges of server %d arrived out of order (expected piece %d of server %d's)",
        chunk.sequence(), chunk.owner(), incoming_.has_value() ? incoming_->next_sequence : 0,
        incoming_.has_value() ? incoming_->owner : -1));
  }
  if (!incoming_.has_value()) incoming_.emplace();
  absl::Status staged = StagePiece(chunk, &*incoming_);
  if (!staged.ok() || !incoming_->done) {
    if (absl::IsResourceExhausted(staged)) DropCopyLocked();
    return staged;
  }
  std::vector<const Piece*> pieces;
  for (const Piece& piece : incoming_->pieces) pieces.push_back(&piece);
  absl::StatusOr<uint64_t> rows = Install(*group, incoming_->tables, pieces);
  KLOG(Info) << "installed a copy of the ranges of server " << incoming_->owner << ": "
             << (rows.ok() ? absl::StrCat(*rows, " rows") : rows.status().ToString());
  DropCopyLocked();
  if (!rows.ok()) return rows.status();
  *installed = *rows;
  return absl::OkStatus();
}

void PsServiceImpl::DropCopyLocked() {
  if (!incoming_.has_value()) return;
  for (const Piece& piece : incoming_->pieces) staged_bytes_ -= piece.keys.size() + piece.rows.size();
  incoming_.reset();
}

absl::Status PsServiceImpl::ReceiveRescale(const HostedShards& hosted, const GroupChunk& chunk) {
  if (chunk.sender() < 0 || chunk.sender() >= kMaxServers || chunk.owner() < 0 || chunk.owner() >= kMaxServers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rescale rows from server %d for range group %d: out of range", chunk.sender(), chunk.owner()));
  }
  if (chunk.layout_generation() <= layout_generation()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "rows of rescale %d arrived after this server switched to rescale %d", chunk.layout_generation(),
        layout_generation()));
  }
  std::shared_ptr<HostedShards> groups;
  {
    absl::MutexLock lock(&copy_mu_);
    const std::pair<uint64_t, uint64_t> key = {chunk.layout_generation(), chunk.attempt()};
    if (key <= aborted_) {
      return absl::AbortedError(absl::StrFormat("rows of rescale %d (attempt %d), which was aborted",
                                                chunk.layout_generation(), chunk.attempt()));
    }
    if (incoming_layout_.has_value()) {
      const std::pair<uint64_t, uint64_t> current = {incoming_layout_->generation, incoming_layout_->attempt};
      if (current > key) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "rows of rescale %d (attempt %d) arrived during rescale %d (attempt %d)", chunk.layout_generation(),
            chunk.attempt(), incoming_layout_->generation, incoming_layout_->attempt));
      }
      if (current < key) DropLayoutLocked();  // an earlier attempt's: superseded
    }
    IncomingLayout::Sender* sender = nullptr;
    if (incoming_layout_.has_value()) {
      auto it = incoming_layout_->senders.find(chunk.sender());
      if (it != incoming_layout_->senders.end()) sender = &it->second;
    }
    if (chunk.sequence() == 0) {
      if (sender != nullptr) {
        return absl::FailedPreconditionError(
            absl::StrFormat("rescale %d: server %d started sending twice", chunk.layout_generation(), chunk.sender()));
      }
      if (!incoming_layout_.has_value()) {
        // The first piece of this rescale: the new groups, with the tables, empty.
        if (!hosted.options().has_value()) {
          return absl::FailedPreconditionError("this server's groups were not made by HostedShards::Create: no rescale");
        }
        absl::StatusOr<Partition> partition = Partition::Parse(chunk.partition());
        if (!partition.ok()) {
          return absl::InvalidArgumentError(absl::StrCat("the rescale's partition: ", partition.status().message()));
        }
        if (chunk.recipient() < 0 || chunk.recipient() >= partition->num_servers()) {
          return absl::InvalidArgumentError(absl::StrFormat("rescale rows for server %d of a layout of %d servers",
                                                            chunk.recipient(), partition->num_servers()));
        }
        ShardOptions options = *hosted.options();
        options.shard_index = chunk.recipient();  // this server's rank in the new layout
        options.bsp_workers = chunk.bsp_workers();
        KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<HostedShards> built, HostedShards::Create(options, *partition));
        const std::vector<TableConfig> tables(chunk.tables().begin(), chunk.tables().end());
        for (Shard* group : built->shards()) {
          KESTREL_RETURN_IF_ERROR(
              group->Restore(tables, /*min_worker_generation=*/0, [](Shard::RowSink, Shard::SketchSink) {
                return absl::OkStatus();
              }));
        }
        incoming_layout_.emplace();
        incoming_layout_->generation = chunk.layout_generation();
        incoming_layout_->attempt = chunk.attempt();
        incoming_layout_->partition = chunk.partition();
        incoming_layout_->bsp_workers = chunk.bsp_workers();
        incoming_layout_->rank = chunk.recipient();
        incoming_layout_->groups = std::move(built);
      } else if (chunk.partition() != incoming_layout_->partition ||
                 chunk.bsp_workers() != incoming_layout_->bsp_workers ||
                 chunk.recipient() != incoming_layout_->rank) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "rescale %d: server %d names another layout than the others", chunk.layout_generation(), chunk.sender()));
      }
      // Every server holds the same tables: a sender naming others is refused.
      std::vector<std::string> names, held;
      for (const TableConfig& t : chunk.tables()) names.push_back(t.name());
      for (const TableConfig& t : incoming_layout_->groups->own().DescribeTables()) held.push_back(t.name());
      std::sort(names.begin(), names.end());
      if (names != held) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "rescale %d: server %d sends other tables than the others", chunk.layout_generation(), chunk.sender()));
      }
      sender = &incoming_layout_->senders[chunk.sender()];
    } else if (sender == nullptr || sender->done || sender->next_sequence != chunk.sequence()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "rescale %d: piece %d from server %d arrived out of order (expected piece %d%s)", chunk.layout_generation(),
          chunk.sequence(), chunk.sender(), sender != nullptr ? sender->next_sequence : 0,
          sender != nullptr && sender->done ? ", after its last one" : ""));
    }
    const uint64_t bytes = chunk.keys().size() + chunk.rows().size();
    if (incoming_layout_->bytes + bytes > max_copy_bytes_) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "rescale %d: the rows received exceed the %d bytes this server takes in a rescale",
          chunk.layout_generation(), max_copy_bytes_));
    }
    incoming_layout_->bytes += bytes;
    sender->next_sequence = chunk.sequence() + 1;
    groups = incoming_layout_->groups;
  }
  // Outside the lock: senders load at once (each table locks its own stripes). The piece counts as received
  // only once its rows are in (`done` is set below), so INSTALL never sees a group half loaded.
  if (!chunk.keys().empty() || !chunk.rows().empty()) {
    absl::StatusOr<Shard*> group = groups->Group(chunk.owner());
    absl::Status loaded = group.ok() ? (*group)->LoadRows(chunk.table(), chunk.keys(), chunk.rows()).status()
                                     : absl::InvalidArgumentError(absl::StrCat("rows for a range group this server "
                                                                               "does not hold: ",
                                                                               group.status().message()));
    if (!loaded.ok()) {
      absl::MutexLock lock(&copy_mu_);
      if (incoming_layout_.has_value() && incoming_layout_->groups == groups) DropLayoutLocked();  // half loaded
      return loaded;
    }
  }
  absl::MutexLock lock(&copy_mu_);
  if (!incoming_layout_.has_value() || incoming_layout_->groups != groups) {
    return absl::AbortedError(absl::StrFormat("rescale %d was dropped meanwhile", chunk.layout_generation()));
  }
  IncomingLayout::Sender& sender = incoming_layout_->senders[chunk.sender()];
  ++sender.loaded;
  if (chunk.last()) sender.done = true;
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* PsServiceImpl::RescaleShard(grpc::CallbackServerContext* context,
                                                      const RescaleShardRequest* request,
                                                      RescaleShardResponse* response) {
  return RunAdmin(context, rescale_rpc_, "RescaleShard", request->header(),
                  [this, request, response](const Hosted& hosted) -> absl::Status {
                    switch (request->phase()) {
                      case RescaleShardRequest::SEND:
                        return RescaleSend(*hosted, *request, response);
                      case RescaleShardRequest::INSTALL:
                        return RescaleInstall(*hosted, *request, response);
                      case RescaleShardRequest::SWITCH:
                        return RescaleSwitch(*hosted, *request);
                      case RescaleShardRequest::ABORT:
                        RescaleAbort(request->layout_generation(), request->attempt());
                        return absl::OkStatus();
                      case RescaleShardRequest::FENCE:
                        return RescaleFence(*hosted, *request, response);
                      case RescaleShardRequest::COMPLETE:
                        return RescaleComplete(*hosted, *request, response);
                      default:
                        return absl::InvalidArgumentError(absl::StrCat("unknown rescale phase ", request->phase()));
                    }
                  });
}

absl::Status PsServiceImpl::CheckNoDiskTier(const HostedShards& hosted) {
  for (const TableConfig& table : hosted.own().DescribeTables()) {
    if (table.capacity().max_disk_bytes() > 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "table '%s' keeps rows on disk (capacity.max_disk_bytes): the layout changes in memory only; resize "
          "the job with a checkpoint and --resume instead",
          table.name()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Partition> PsServiceImpl::CheckRescale(const HostedShards& hosted,
                                                      const RescaleShardRequest& request) const {
  if (!hosted.options().has_value()) {
    return absl::FailedPreconditionError("this server's groups were not made by HostedShards::Create: no rescale");
  }
  if (left()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("server %d left the job in an earlier rescale", hosted.server()));
  }
  if (request.layout_generation() <= layout_generation()) {
    return absl::FailedPreconditionError(absl::StrFormat("rescale %d is not after this server's layout %d",
                                                         request.layout_generation(), layout_generation()));
  }
  absl::StatusOr<Partition> partition = Partition::Parse(request.partition());
  if (!partition.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the rescale's partition: ", partition.status().message()));
  }
  KESTREL_RETURN_IF_ERROR(CheckNoDiskTier(hosted));
  return partition;
}

absl::Status PsServiceImpl::RescaleSend(const HostedShards& hosted, const RescaleShardRequest& request,
                                        RescaleShardResponse* response) {
  KESTREL_ASSIGN_OR_RETURN(const Partition next, CheckRescale(hosted, request));
  const int n = next.num_servers();
  if (request.server_addresses_size() != n) {
    return absl::InvalidArgumentError(absl::StrFormat("the rescale names %d addresses for %d servers",
                                                      request.server_addresses_size(), n));
  }
  const int self = hosted.server();   // the rank rows are sent from (of the old layout)
  const int next_rank = request.new_rank();  // and the one this server has in the new layout (-1: it leaves)
  if (next_rank < -1 || next_rank >= n) {
    return absl::InvalidArgumentError(absl::StrFormat("rescale %d names rank %d for this server in a layout of %d",
                                                      request.layout_generation(), next_rank, n));
  }
  const std::shared_ptr<grpc::ChannelCredentials> credentials =
      peers_ != nullptr ? peers_->credentials() : grpc::InsecureChannelCredentials();
  std::vector<std::unique_ptr<ParameterServer::Stub>> stubs(n);
  std::vector<std::unique_ptr<PieceStream>> streams(n);
  GroupChunk header;
  header.mutable_header()->set_job_id(job_id_);
  header.mutable_header()->set_worker_rank(-1);
  header.set_layout_generation(request.layout_generation());
  header.set_attempt(request.attempt());
  header.set_sender(self);
  header.set_partition(next.ToString());
  header.set_bsp_workers(request.bsp_workers());
  const std::vector<TableConfig> tables = hosted.own().DescribeTables();
  for (int t = 0; t < n; ++t) {
    PieceStream::Deliver deliver;
    if (t == next_rank) {  // rows staying here: staged as any sender's
      deliver = [this, &hosted](const GroupChunk& piece) {
        uint64_t unused = 0;
        return Receive(hosted, piece, &unused);
      };
    } else {
      if (request.server_addresses(t).empty()) {
        return absl::InvalidArgumentError(absl::StrFormat("the rescale names no address for server %d", t));
      }
      stubs[t] = ParameterServer::NewStub(grpc::CreateChannel(request.server_addresses(t), credentials));
      deliver = SendTo(stubs[t].get(), forward_deadline_,
                       absl::StrFormat("server %d at %s", t, request.server_addresses(t)));
    }
    GroupChunk to = header;
    to.set_recipient(t);
    streams[t] = std::make_unique<PieceStream>(std::move(to), tables, std::move(deliver));
  }
  // Every group this server is the primary of: its rows go to every copy of their range in the new layout.
  for (Shard* group : hosted.shards()) {
    if (!hosted.CheckPrimary(group->shard_index()).ok()) continue;
    KESTREL_RETURN_IF_ERROR(group->Exclusive([&](const std::vector<Table*>& group_tables) -> absl::Status {
      for (const Table* table : group_tables) {
        const std::string& name = table->config().name();
        KESTREL_RETURN_IF_ERROR(table->ForEachStoredRow([&](uint64_t key, absl::Span<const float> row) {
          const int owner = next.OwnerOf(key);
          for (int j = 0; j < next.replicas(); ++j) {
            KESTREL_RETURN_IF_ERROR(streams[next.ReplicaOfOwner(owner, j)]->Add(owner, name, key, row));
          }
          return absl::OkStatus();
        }));
      }
      return absl::OkStatus();
    }));
  }
  uint64_t rows = 0, bytes = 0;
  for (int t = 0; t < n; ++t) {
    KESTREL_RETURN_IF_ERROR(streams[t]->Finish());
    if (t == next_rank) continue;  // staying here
    rows += streams[t]->rows();
    bytes += streams[t]->bytes();
  }
  response->set_rows_sent(rows);
  response->set_bytes_sent(bytes);
  KLOG(Info) << "rescale " << request.layout_generation() << ": sent " << rows << " rows (" << bytes
             << " bytes) to other servers for a layout of " << n << " servers";
  return absl::OkStatus();
}

absl::Status PsServiceImpl::RescaleInstall(const HostedShards& hosted, const RescaleShardRequest& request,
                                           RescaleShardResponse* response) {
  KESTREL_ASSIGN_OR_RETURN(const Partition next, CheckRescale(hosted, request));
  const int self = request.new_rank();
  absl::MutexLock lock(&copy_mu_);
  if (self < 0) {  // leaving: nothing to build
    DropLayoutLocked();
    return absl::OkStatus();
  }
  if (!incoming_layout_.has_value() || incoming_layout_->generation != request.layout_generation() ||
      incoming_layout_->attempt != request.attempt()) {
    return absl::FailedPreconditionError(absl::StrFormat("no rows of rescale %d (attempt %d) were received",
                                                         request.layout_generation(), request.attempt()));
  }
  if (incoming_layout_->partition != request.partition()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rescale %d: the rows received were sent for another layout", request.layout_generation()));
  }
  if (incoming_layout_->rank != self) {
    return absl::InvalidArgumentError(absl::StrFormat("rescale %d: the rows received were sent to rank %d, not %d",
                                                      request.layout_generation(), incoming_layout_->rank, self));
  }
  std::vector<int> senders(request.from_servers().begin(), request.from_servers().end());
  if (senders.empty()) {
    for (int s = 0; s < request.senders(); ++s) senders.push_back(s);
  }
  for (int s : senders) {
    auto it = incoming_layout_->senders.find(s);
    if (it == incoming_layout_->senders.end() || !it->second.done || it->second.loaded != it->second.next_sequence) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "rescale %d: server %d has not sent all its rows", request.layout_generation(), s));
    }
  }
  if (incoming_layout_->senders.size() != senders.size()) {
    return absl::InvalidArgumentError(absl::StrFormat("rescale %d: rows from %d servers, expected %d",
                                                      request.layout_generation(), incoming_layout_->senders.size(),
                                                      senders.size()));
  }
  uint64_t rows = 0;
  for (Shard* group : incoming_layout_->groups->shards()) {
    for (const TableStats& table : group->Stats().tables) rows += table.rows;
  }
  next_generation_ = request.layout_generation();
  next_ = std::move(incoming_layout_->groups);
  incoming_layout_.reset();
  response->set_rows(rows);
  KLOG(Info) << "rescale " << request.layout_generation() << ": the groups of server " << self << " of "
             << next.num_servers() << " are complete (" << rows << " rows)";
  return absl::OkStatus();
}

absl::Status PsServiceImpl::SwitchInPlace(const HostedShards& hosted, const RescaleShardRequest& request) {
  if (left()) return absl::FailedPreconditionError("this server left the job in an earlier rescale");
  if (request.partition() != hosted.partition().ToString() || request.new_rank() != hosted.server()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rescale %d keeps the groups but names another layout (partition or rank %d; this server is rank %d)",
        request.layout_generation(), request.new_rank(), hosted.server()));
  }
  KESTREL_RETURN_IF_ERROR(CheckWorkerIds(request.worker_ids_size()));
  if (request.layout_generation() == layout_generation() &&
      hosted.own().bsp_workers() == request.bsp_workers()) {
    return absl::OkStatus();  // a repeat of this switch (the scheduler retried it)
  }
  if (request.layout_generation() < layout_generation()) {
    return absl::FailedPreconditionError(absl::StrFormat("rescale %d is not after this server's layout %d",
                                                         request.layout_generation(), layout_generation()));
  }
  for (Shard* group : hosted.shards()) KESTREL_RETURN_IF_ERROR(group->SetBspWorkers(request.bsp_workers()));
  {
    absl::MutexLock lock(&layout_mu_);
    layout_generation_ = request.layout_generation();
    SetWorkerIdsLocked({request.worker_ids().begin(), request.worker_ids().end()});
  }
  KLOG(Info) << "rescale " << request.layout_generation() << ": server " << hosted.server()
             << " keeps its ranges; BSP over " << request.bsp_workers() << " workers from now on";
  return absl::OkStatus();
}

absl::Status PsServiceImpl::RescaleSwitch(const HostedShards& hosted, const RescaleShardRequest& request) {
  if (request.keep_groups()) return SwitchInPlace(hosted, request);
  KESTREL_ASSIGN_OR_RETURN(const Partition next, CheckRescale(hosted, request));
  KESTREL_RETURN_IF_ERROR(CheckWorkerIds(request.worker_ids_size()));
  const int self = request.new_rank();
  if (self < 0) {
    absl::MutexLock lock(&layout_mu_);
    left_ = true;
    layout_generation_ = request.layout_generation();
    KLOG(Info) << "rescale " << request.layout_generation() << ": server " << hosted.server()
               << " is not in the new layout and serves nothing from now on";
    return absl::OkStatus();
  }
  if (next_ == nullptr || next_generation_ != request.layout_generation()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("rescale %d was not installed on server %d", request.layout_generation(), self));
  }
  Hosted groups = std::move(next_);
  next_generation_ = 0;
  if (groups->replicated()) KESTREL_RETURN_IF_ERROR(groups->routing().Update(request.routing_generation(), {}));
  // The working store held the old groups' rows: start it afresh (every row now held is dirty, so the next
  // checkpoint writes them all).
  if (store_ != nullptr) KESTREL_RETURN_IF_ERROR(store_->Rebase());
  AdoptLayout(groups, request.layout_generation(), {request.worker_ids().begin(), request.worker_ids().end()});
  // Replicated jobs forward to the other servers by their new ranks from now on.
  if (peers_ != nullptr) peers_->SetAddresses({request.server_addresses().begin(), request.server_addresses().end()});
  KLOG(Info) << "rescale " << request.layout_generation() << ": server " << hosted.server() << " serves the ranges of "
             << "rank " << self << " of " << next.num_servers() << " servers";
  return absl::OkStatus();
}

absl::Status PsServiceImpl::CheckSettle(const RescaleShardRequest& request) const {
  if (left()) return absl::FailedPreconditionError("this server left the job in an earlier rescale");
  if (request.layout_generation() <= layout_generation()) {
    return absl::FailedPreconditionError(absl::StrFormat("rescale %d is not after this server's layout %d",
                                                         request.layout_generation(), layout_generation()));
  }
  if (request.clock() < 0) return absl::InvalidArgumentError(absl::StrFormat("clock %d", request.clock()));
  return absl::OkStatus();
}

absl::Status PsServiceImpl::RescaleFence(const HostedShards& hosted, const RescaleShardRequest& request,
                                         RescaleShardResponse* response) {
  KESTREL_RETURN_IF_ERROR(CheckSettle(request));
  if (request.removed_workers().empty()) return absl::InvalidArgumentError("FENCE names no removed worker");
  const std::vector<int> removed(request.removed_workers().begin(), request.removed_workers().end());
  uint64_t applied = 0;
  for (Shard* group : hosted.shards()) {
    KESTREL_ASSIGN_OR_RETURN(const int n, group->FenceWorkers(removed, request.clock()));
    applied += n;
  }
  response->set_applied_with_removed(applied);
  KLOG(Info) << "rescale " << request.layout_generation() << ": workers " << absl::StrJoin(removed, ",")
             << " fenced off clock " << request.clock() << " (" << applied << " tables had applied it with them)";
  return absl::OkStatus();
}

absl::Status PsServiceImpl::RescaleComplete(const HostedShards& hosted, const RescaleShardRequest& request,
                                            RescaleShardResponse* response) {
  KESTREL_RETURN_IF_ERROR(CheckSettle(request));
  uint64_t completed = 0;
  for (Shard* group : hosted.shards()) {
    KESTREL_ASSIGN_OR_RETURN(const int n, group->CompleteClockWithout(request.clock()));
    completed += n;
  }
  response->set_completed(completed);
  KLOG(Info) << "rescale " << request.layout_generation() << ": clock " << request.clock()
             << " applied without the removed workers (" << completed << " tables)";
  return absl::OkStatus();
}

void PsServiceImpl::RescaleAbort(uint64_t generation, uint64_t attempt) {
  if (next_generation_ != 0 && next_generation_ <= generation) {
    next_.reset();
    next_generation_ = 0;
  }
  absl::MutexLock lock(&copy_mu_);
  aborted_ = std::max(aborted_, std::make_pair(generation, attempt));
  if (incoming_layout_.has_value() &&
      std::make_pair(incoming_layout_->generation, incoming_layout_->attempt) <= aborted_) {
    DropLayoutLocked();
  }
  KLOG(Info) << "rescale " << generation << " (attempt " << attempt << ") aborted: the layout stays as it was";
}

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Start(const PsServerOptions& options, Shard* shard,
                                                          ShardStore* store) {
  return Start(options, std::shared_ptr<HostedShards>(HostedShards::Single(shard)), store);
}

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Start(const PsServerOptions& options, HostedShards* hosted,
                                                          ShardStore* store) {
  return Start(options, HostedShards::Unowned(hosted), store);
}

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Start(const PsServerOptions& options,
                                                          std::shared_ptr<HostedShards> hosted, ShardStore* store) {
  std::unique_ptr<PsServer> server(new PsServer());

  grpc::EnableDefaultHealthCheckService(true);
  if (options.threads > 0) server->pool_ = std::make_unique<ThreadPool>(options.threads, kMaxQueuedCalls);
  server->peers_ = std::make_unique<PeerServers>(options.peer_credentials, hosted->partition().num_servers());
  server->service_ = std::make_unique<PsServiceImpl>(std::move(hosted), server->pool_.get(), store,
                                                     server->peers_.get(), options.forward_deadline);

  KESTREL_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                           MakeServerCredentials(options.tls, options.address));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, std::move(credentials), &server->port_);
  builder.RegisterService(server->service_.get());
  if (options.memory_quota_bytes < (int64_t{64} << 20) || options.max_concurrent_streams < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the server's memory quota must be at least 64 MiB and its concurrent streams at least 1, got ",
        options.memory_quota_bytes, " bytes and ", options.max_concurrent_streams));
  }
  grpc::ResourceQuota quota("kestrel_server");
  quota.Resize(static_cast<size_t>(options.memory_quota_bytes));
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.max_concurrent_streams);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.address));
  }
  auto* health = server->server_->GetHealthCheckService();
  if (health != nullptr) {
    health->SetServingStatus(true);
    health->SetServingStatus("kestrel.ParameterServer", true);
  }
  return server;
}

PsServer::~PsServer() {
  Shutdown(absl::ZeroDuration());
  Wait();
}

void PsServer::Shutdown(absl::Duration grace) {
  if (server_ == nullptr) return;
  if (auto* health = server_->GetHealthCheckService()) health->Shutdown();
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
}

void PsServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

}  // namespace kestrel
