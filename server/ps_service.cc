#include "server/ps_service.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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

PsServiceImpl::PsServiceImpl(HostedShards* hosted, ThreadPool* pool, ShardStore* store, PeerServers* peers,
                             absl::Duration forward_deadline)
    : hosted_(hosted),
      shard_(&hosted->own()),
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
      admin_(1, /*max_queued=*/16),
      stats_hook_([shard = shard_] { ServerMetrics::Get().Refresh(*shard); }) {}

// Runs `work` on the handler pool (or inline on gRPC's callback thread without one); the call finishes with the
// status `work` hands its `done`, counted and timed in `rpc`. Handlers do CPU work only; nothing in them waits
// on other calls.
grpc::ServerUnaryReactor* PsServiceImpl::RunAsync(grpc::CallbackServerContext* context, RpcMetrics::Method& rpc,
                                                  PeerRoles allowed, const char* method,
                                                  std::function<void(const Caller&, Done done)> work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const RpcMetrics::Call call = rpc.Begin();
  Done finish = [reactor, call](const absl::Status& status) {
    call.End(status);
    reactor->Finish(ToGrpcStatus(status));
  };
  absl::StatusOr<Caller> caller = AuthorizePeer(context->auth_context().get(), shard_->job_id(), allowed, method);
  if (!caller.ok()) {
    finish(shard_->Count(caller.status()));
  } else if (pool_ == nullptr) {
    work(*caller, std::move(finish));
  } else if (!pool_->TrySchedule([finish, work = std::move(work), caller = *std::move(caller)]() mutable {
               work(caller, std::move(finish));
             })) {
    finish(shard_->Count(absl::UnavailableError(absl::StrCat(
        "the server is busy: ", kMaxQueuedCalls, " calls are waiting for a handler thread; retry"))));
  }
  return reactor;
}

grpc::ServerUnaryReactor* PsServiceImpl::Run(grpc::CallbackServerContext* context, RpcMetrics::Method& rpc,
                                             PeerRoles allowed, const char* method,
                                             std::function<absl::Status(const Caller&)> work) {
  return RunAsync(context, rpc, allowed, method,
                  [work = std::move(work)](const Caller& caller, Done done) { done(work(caller)); });
}

absl::Status PsServiceImpl::CheckReplicated() const {
  if (hosted_->replicated()) return absl::OkStatus();
  return shard_->Count(absl::FailedPreconditionError(
      "this job keeps one copy of each key range (--replicas=1): there is nothing to replicate to this server"));
}

absl::StatusOr<Shard*> PsServiceImpl::PrimaryGroup(const RequestHeader& header) const {
  absl::StatusOr<Shard*> group = hosted_->Group(OwnerOf(header));
  if (!group.ok()) return shard_->Count(group.status());
  KESTREL_RETURN_IF_ERROR(shard_->Count(hosted_->CheckPrimary((*group)->shard_index())));
  return group;
}

void PsServiceImpl::Forward(const char* method, int owner, const grpc::ByteBuffer& request, Done done) {
  const std::vector<int> backups = hosted_->BackupsOf(owner);
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
  return Run(context, pull_rpc_, kDataRoles, "Pull", [this, request, response](const Caller& caller) -> absl::Status {
    PullRequest parsed;
    grpc::ByteBuffer copy(*request);  // shares the slices; Deserialize consumes its argument
    grpc::Status status = grpc::SerializationTraits<PullRequest>::Deserialize(&copy, &parsed);
    if (!status.ok()) {
      return shard_->Count(absl::InvalidArgumentError("malformed PullRequest: " + status.error_message()));
    }
    KESTREL_RETURN_IF_ERROR(shard_->Count(CheckClaimedRank(caller, parsed.header().worker_rank(), "the Pull")));
    KESTREL_ASSIGN_OR_RETURN(Shard * group, PrimaryGroup(parsed.header()));
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
  return RunAsync(context, push_rpc_, kDataRoles, "Push", [this, request, response](const Caller& caller, Done done) {
    absl::Status status = [&]() -> absl::Status {
      PushRequestView view;
      KESTREL_RETURN_IF_ERROR(shard_->Count(ReadPushRequest(*request, &view)));
      KESTREL_RETURN_IF_ERROR(shard_->Count(CheckClaimedRank(caller, view.header->worker_rank(), "the Push")));
      KESTREL_ASSIGN_OR_RETURN(Shard * group, PrimaryGroup(*view.header));
      PushResponse answer;
      KESTREL_RETURN_IF_ERROR(HandlePushFields(*group, /*dense=*/false, view, &answer));
      KESTREL_RETURN_IF_ERROR(WritePushResponse(answer, response));
      // Applied here (or a repeat): the backups get it too before the worker hears OK.
      Forward("Replicate", group->shard_index(), *request, std::move(done));
      return absl::OkStatus();
    }();
    if (!status.ok()) done(std::move(status));
  });
}

grpc::ServerUnaryReactor* PsServiceImpl::Replicate(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  return Run(context, replicate_rpc_, kServerRoles, "Replicate",
             [this, request, response](const Caller&) -> absl::Status {
               KESTREL_RETURN_IF_ERROR(CheckReplicated());
               PushRequestView view;
               KESTREL_RETURN_IF_ERROR(shard_->Count(ReadPushRequest(*request, &view)));
               if (!view.header->has_owner()) {
                 return shard_->Count(absl::InvalidArgumentError("a replicated push must name its range group (owner)"));
               }
               KESTREL_ASSIGN_OR_RETURN(Shard * group, shard_->Count(hosted_->Group(view.header->owner())));
               PushResponse answer;
               KESTREL_RETURN_IF_ERROR(HandlePushFields(*group, /*dense=*/false, view, &answer));
               return WritePushResponse(answer, response);
             });
}

grpc::ServerUnaryReactor* PsServiceImpl::PullDense(grpc::CallbackServerContext* context,
                                                   const PullRequest* request, PullResponse* response) {
  return Run(context, pull_dense_rpc_, kDataRoles, "PullDense", [=](const Caller& caller) -> absl::Status {
    KESTREL_RETURN_IF_ERROR(
        shard_->Count(CheckClaimedRank(caller, request->header().worker_rank(), "the PullDense")));
    KESTREL_ASSIGN_OR_RETURN(Shard * group, PrimaryGroup(request->header()));
    return HandlePullDense(*group, *request, response);
  });
}

grpc::ServerUnaryReactor* PsServiceImpl::PushDense(grpc::CallbackServerContext* context,
                                                   const PushRequest* request, PushResponse* response) {
  return RunAsync(context, push_dense_rpc_, kDataRoles, "PushDense", [=](const Caller& caller, Done done) {
    absl::Status status = [&]() -> absl::Status {
      KESTREL_RETURN_IF_ERROR(
          shard_->Count(CheckClaimedRank(caller, request->header().worker_rank(), "the PushDense")));
      KESTREL_ASSIGN_OR_RETURN(Shard * group, PrimaryGroup(request->header()));
      KESTREL_RETURN_IF_ERROR(HandlePushDense(*group, *request, response));
      if (hosted_->BackupsOf(group->shard_index()).empty()) {
        done(absl::OkStatus());
        return absl::OkStatus();
      }
      grpc::ByteBuffer bytes;
      bool own_buffer;
      grpc::Status serialized = grpc::SerializationTraits<PushRequest>::Serialize(*request, &bytes, &own_buffer);
      if (!serialized.ok()) return absl::InternalError(serialized.error_message());
      Forward("ReplicateDense", group->shard_index(), bytes, std::move(done));
      return absl::OkStatus();
    }();
    if (!status.ok()) done(std::move(status));
  });
}

grpc::ServerUnaryReactor* PsServiceImpl::ReplicateDense(grpc::CallbackServerContext* context,
                                                        const PushRequest* request, PushResponse* response) {
  return Run(context, replicate_rpc_, kServerRoles, "ReplicateDense", [=](const Caller&) -> absl::Status {
    KESTREL_RETURN_IF_ERROR(CheckReplicated());
    if (!request->header().has_owner()) {
      return shard_->Count(absl::InvalidArgumentError("a replicated push must name its range group (owner)"));
    }
    KESTREL_ASSIGN_OR_RETURN(Shard * group, shard_->Count(hosted_->Group(request->header().owner())));
    return HandlePushDense(*group, *request, response);
  });
}

grpc::ServerUnaryReactor* PsServiceImpl::CreateTable(grpc::CallbackServerContext* context,
                                                     const CreateTableRequest* request,
                                                     CreateTableResponse* response) {
  // Every copy of every group this server holds gets the table (a backup must be able to take over).
  return Run(context, create_table_rpc_, kDataRoles, "CreateTable", [=](const Caller&) -> absl::Status {
    bool created = false;
    for (Shard* group : hosted_->shards()) {
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
  return Run(context, describe_tables_rpc_, kReadRoles, "DescribeTables", [=](const Caller&) -> absl::Status {
    KESTREL_ASSIGN_OR_RETURN(Shard * group, shard_->Count(hosted_->Group(OwnerOf(request->header()))));
    return HandleDescribeTables(*group, *request, response);
  });
}

grpc::ServerUnaryReactor* PsServiceImpl::Stats(grpc::CallbackServerContext* context, const StatsRequest* request,
                                               StatsResponse* response) {
  return Run(context, stats_rpc_, kReadRoles, "Stats", [=](const Caller& caller) -> absl::Status {
    // Fingerprints read every row of every table: an admin's (or the scheduler's) request, not a worker's.
    if (request->fingerprints() && caller.has_value() && caller->role == PeerRole::kWorker) {
      return shard_->Count(absl::PermissionDeniedError("a worker may not ask for fingerprints (admins only)"));
    }
    KESTREL_ASSIGN_OR_RETURN(Shard * group, shard_->Count(hosted_->Group(OwnerOf(request->header()))));
    return HandleStats(*group, *request, response);
  });
}

grpc::ServerUnaryReactor* PsServiceImpl::Checkpoint(grpc::CallbackServerContext* context,
                                                    const CheckpointShardRequest* request,
                                                    CheckpointShardResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const RpcMetrics::Call call = checkpoint_rpc_.Begin();
  const absl::Status allowed =
      AuthorizePeer(context->auth_context().get(), shard_->job_id(), kAdminRoles, "Checkpoint").status();
  const bool queued = admin_.TrySchedule([this, reactor, request, response, call, allowed] {
    absl::Status status = allowed.ok() ? shard_->CheckJob(ContextOf(request->header())) : shard_->Count(allowed);
    if (status.ok() && store_ == nullptr) {
      status = absl::FailedPreconditionError(absl::StrFormat(
          "server %d was started without --checkpoint_dir: it cannot write checkpoints", shard_->shard_index()));
    }
    if (status.ok()) {
      const absl::Time start = absl::Now();
      absl::StatusOr<ShardCheckpoint> written = store_->Checkpoint(*shard_, request->name());
      status = written.status();
      if (written.ok()) {
        ServerMetrics& metrics = ServerMetrics::Get();
        metrics.checkpoint_duration().Observe(absl::ToDoubleSeconds(absl::Now() - start));
        metrics.checkpoint_written_rows().Increment(static_cast<double>(written->rows_written()));
        metrics.checkpoint_written_bytes().Increment(static_cast<double>(written->bytes_written()));
        *response->mutable_shard() = *std::move(written);
      }
    }
    if (!status.ok()) KLOG(Warning) << "checkpoint " << request->name() << " failed: " << status;
    call.End(status);
    reactor->Finish(ToGrpcStatus(status));
  });
  if (!queued) {  // a flood of admin calls: refused, not queued without bound
    const absl::Status busy =
        shard_->Count(absl::UnavailableError("too many checkpoint and restore calls are waiting; retry"));
    call.End(busy);
    reactor->Finish(ToGrpcStatus(busy));
  }
  return reactor;
}

grpc::ServerUnaryReactor* PsServiceImpl::Restore(grpc::CallbackServerContext* context,
                                                 const RestoreShardRequest* request, RestoreShardResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const RpcMetrics::Call call = restore_rpc_.Begin();
  const absl::Status allowed =
      AuthorizePeer(context->auth_context().get(), shard_->job_id(), kAdminRoles, "Restore").status();
  const bool queued = admin_.TrySchedule([this, reactor, request, response, call, allowed] {
    absl::Status status = allowed.ok() ? shard_->CheckJob(ContextOf(request->header())) : shard_->Count(allowed);
    if (status.ok()) {
      // The scheduler moves the job's generation before it asks for the restore; this server hears of it
      // within a heartbeat (it asks at once).
      status = shard_->Count(shard_->CheckRestoreGeneration(request->min_worker_generation(), absl::Seconds(5)));
    }
    const absl::Time start = absl::Now();
    if (status.ok()) {
      if (store_ != nullptr) {
        std::optional<CheckpointManifest> manifest;
        if (!request->name().empty()) {
          absl::StatusOr<CheckpointManifest> read = store_->layout().ReadManifest(request->name());
          status = read.status();
          if (read.ok()) manifest = *std::move(read);
        }
        if (status.ok()) status = store_->Restore(manifest, *shard_, request->min_worker_generation());
        // The backups' copies load the same checkpoint (their rows live in memory only).
        for (size_t g = 1; status.ok() && g < hosted_->shards().size(); ++g) {
          Shard& group = *hosted_->shards()[g];
          status = manifest.has_value()
                       ? ShardStore::LoadCheckpoint(store_->layout(), *manifest, group, request->min_worker_generation())
                       : group.Restore({}, request->min_worker_generation(),
                                       [](Shard::RowSink, Shard::SketchSink) { return absl::OkStatus(); });
        }
      } else if (request->name().empty()) {
        for (Shard* group : hosted_->shards()) {
          status = group->Restore({}, request->min_worker_generation(),
                                  [](Shard::RowSink, Shard::SketchSink) { return absl::OkStatus(); });
          if (!status.ok()) break;
        }
      } else {
        status = absl::FailedPreconditionError(absl::StrFormat(
            "server %d was started without --checkpoint_dir: it cannot restore %s", shard_->shard_index(),
            request->name()));
      }
    }
    if (status.ok()) {
      ServerMetrics::Get().restore_duration().Observe(absl::ToDoubleSeconds(absl::Now() - start));
      uint64_t rows = 0;
      for (const TableStats& table : shard_->Stats().tables) rows += table.rows;
      response->set_rows(rows);
    } else {
      KLOG(Error) << "restoring " << (request->name().empty() ? "empty tables" : request->name())
                  << " failed: " << status;
    }
    call.End(status);
    reactor->Finish(ToGrpcStatus(status));
  });
  if (!queued) {  // a flood of admin calls: refused, not queued without bound
    const absl::Status busy =
        shard_->Count(absl::UnavailableError("too many checkpoint and restore calls are waiting; retry"));
    call.End(busy);
    reactor->Finish(ToGrpcStatus(busy));
  }
  return reactor;
}

grpc::ServerUnaryReactor* PsServiceImpl::CopyGroup(grpc::CallbackServerContext* context,
                                                   const CopyGroupRequest* request, CopyGroupResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const RpcMetrics::Call call = copy_group_rpc_.Begin();
  const absl::Status allowed =
      AuthorizePeer(context->auth_context().get(), shard_->job_id(), kAdminRoles, "CopyGroup").status();
  const bool queued = admin_.TrySchedule([this, reactor, request, response, call, allowed] {
    absl::Status status = allowed.ok() ? shard_->CheckJob(ContextOf(request->header())) : shard_->Count(allowed);
    if (status.ok()) status = SendGroup(*request, response);
    if (!status.ok()) KLOG(Warning) << "copying the ranges of server " << request->owner() << " failed: " << status;
    call.End(status);
    reactor->Finish(ToGrpcStatus(status));
  });
  if (!queued) {
    const absl::Status busy =
        shard_->Count(absl::UnavailableError("too many checkpoint, restore and copy calls are waiting; retry"));
    call.End(busy);
    reactor->Finish(ToGrpcStatus(busy));
  }
  return reactor;
}

absl::Status PsServiceImpl::SendGroup(const CopyGroupRequest& request, CopyGroupResponse* response) {
  KESTREL_RETURN_IF_ERROR(CheckReplicated());
  KESTREL_ASSIGN_OR_RETURN(Shard * group, shard_->Count(hosted_->Group(request.owner())));
  if (request.target() == hosted_->server() || request.target_address().empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("cannot copy the ranges of server %d to server %d at '%s'",
                                                      request.owner(), request.target(), request.target_address()));
  }
  auto stub = ParameterServer::NewStub(grpc::CreateChannel(
      request.target_address(), peers_ != nullptr ? peers_->credentials() : grpc::InsecureChannelCredentials()));
  constexpr size_t kPieceBytes = size_t{4} << 20;
  GroupChunk piece;
  uint64_t sequence = 0;
  auto send = [&](bool last) -> absl::Status {
    piece.mutable_header()->set_job_id(shard_->job_id());
    piece.mutable_header()->set_worker_rank(-1);
    piece.set_owner(request.owner());
    piece.set_sequence(sequence++);
    piece.set_last(last);
    GroupChunkResponse answer;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + forward_deadline_));
    absl::Status status = FromGrpcStatus(stub->ReceiveGroup(&context, piece, &answer));
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrFormat("sending piece %d to server %d at %s: %s", sequence - 1,
                                                         request.target(), request.target_address(), status.message()));
    }
    piece.Clear();
    return absl::OkStatus();
  };
  // One cut: no request runs on the group while it is read (the scheduler holds every worker anyway).
  return group->Exclusive([&](const std::vector<Table*>& tables) -> absl::Status {
    for (const Table* table : tables) *piece.add_tables() = table->config();
    for (const Table* table : tables) {
      piece.set_table(table->config().name());
      KESTREL_RETURN_IF_ERROR(table->ForEachStoredRow([&](uint64_t key, absl::Span<const float> row) -> absl::Status {
        piece.mutable_keys()->append(reinterpret_cast<const char*>(&key), sizeof(key));
        piece.mutable_rows()->append(reinterpret_cast<const char*>(row.data()), row.size() * sizeof(float));
        response->set_rows(response->rows() + 1);
        response->set_bytes(response->bytes() + sizeof(key) + row.size() * sizeof(float));
        if (piece.keys().size() + piece.rows().size() < kPieceBytes) return absl::OkStatus();
        KESTREL_RETURN_IF_ERROR(send(/*last=*/false));
        piece.set_table(table->config().name());
        return absl::OkStatus();
      }));
      if (!piece.keys().empty()) KESTREL_RETURN_IF_ERROR(send(/*last=*/false));
    }
    return send(/*last=*/true);
  });
}

grpc::ServerUnaryReactor* PsServiceImpl::ReceiveGroup(grpc::CallbackServerContext* context, const GroupChunk* request,
                                                      GroupChunkResponse* response) {
  return Run(context, copy_group_rpc_, kServerRoles, "ReceiveGroup", [=](const Caller&) -> absl::Status {
    KESTREL_RETURN_IF_ERROR(CheckReplicated());
    KESTREL_RETURN_IF_ERROR(shard_->CheckJob(ContextOf(request->header())));
    uint64_t installed = 0;
    KESTREL_RETURN_IF_ERROR(shard_->Count(Receive(*request, &installed)));
    response->set_rows(installed);
    return absl::OkStatus();
  });
}

absl::Status PsServiceImpl::Receive(const GroupChunk& chunk, uint64_t* installed) {
  KESTREL_ASSIGN_OR_RETURN(Shard * group, hosted_->Group(chunk.owner()));
  absl::MutexLock lock(&copy_mu_);
  if (chunk.sequence() == 0) {
    incoming_.emplace();
    incoming_->owner = chunk.owner();
    incoming_->tables.assign(chunk.tables().begin(), chunk.tables().end());
  } else if (!incoming_.has_value() || incoming_->owner != chunk.owner() ||
             incoming_->next_sequence != chunk.sequence()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "piece %d of a copy of the ranges of server %d arrived out of order (expected piece %d of server %d's)",
        chunk.sequence(), chunk.owner(), incoming_.has_value() ? incoming_->next_sequence : 0,
        incoming_.has_value() ? incoming_->owner : -1));
  }
  IncomingCopy& copy = *incoming_;
  if (!chunk.keys().empty() || !chunk.rows().empty()) {
    auto config = std::find_if(copy.tables.begin(), copy.tables.end(),
                               [&](const TableConfig& t) { return t.name() == chunk.table(); });
    if (config == copy.tables.end()) {
      return absl::InvalidArgumentError(absl::StrCat("piece of table '", chunk.table(), "', not in the copy"));
    }
    KESTREL_ASSIGN_OR_RETURN(int floats, Table::StoredFloats(*config));
    const size_t keys = chunk.keys().size() / sizeof(uint64_t);
    if (chunk.keys().size() % sizeof(uint64_t) != 0 || chunk.rows().size() != keys * floats * sizeof(float)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "piece of table '%s': %d bytes of keys and %d of rows are not whole rows of %d floats", chunk.table(),
          chunk.keys().size(), chunk.rows().size(), floats));
    }
    if (copy.bytes + chunk.keys().size() + chunk.rows().size() > max_copy_bytes_) {
      incoming_.reset();
      return absl::ResourceExhaustedError(absl::StrFormat(
          "a copy of the ranges of server %d exceeds the %d bytes this server stages", chunk.owner(), max_copy_bytes_));
    }
    copy.bytes += chunk.keys().size() + chunk.rows().size();
    copy.pieces.push_back({chunk.table(), chunk.keys(), chunk.rows()});
  }
  copy.next_sequence = chunk.sequence() + 1;
  if (!chunk.last()) return absl::OkStatus();
  absl::Status status = group->Restore(
      copy.tables, /*min_worker_generation=*/0, [&](Shard::RowSink rows, Shard::SketchSink) -> absl::Status {
        std::vector<float> row;  // the bytes may sit unaligned in the piece
        for (const IncomingCopy::Piece& piece : copy.pieces) {
          const size_t n = piece.keys.size() / sizeof(uint64_t);
          const size_t floats = piece.rows.size() / sizeof(float) / std::max<size_t>(n, 1);
          row.resize(floats);
          for (size_t i = 0; i < n; ++i) {
            uint64_t key;
            std::memcpy(&key, piece.keys.data() + i * sizeof(key), sizeof(key));
            std::memcpy(row.data(), piece.rows.data() + i * floats * sizeof(float), floats * sizeof(float));
            KESTREL_ASSIGN_OR_RETURN(bool took, rows(piece.table, key, row));
            if (!took) {
              return absl::InvalidArgumentError(absl::StrFormat(
                  "key 0x%016x of table '%s' is not in the ranges of server %d", key, piece.table, copy.owner));
            }
            ++*installed;
          }
        }
        return absl::OkStatus();
      });
  KLOG(Info) << "installed a copy of the ranges of server " << copy.owner << ": " << *installed << " rows ("
             << status << ")";
  incoming_.reset();
  return status;
}

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Start(const PsServerOptions& options, Shard* shard,
                                                          ShardStore* store) {
  std::unique_ptr<HostedShards> single = HostedShards::Single(shard);
  HostedShards* hosted = single.get();
  KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<PsServer> server, Start(options, hosted, store));
  server->single_ = std::move(single);
  return server;
}

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Start(const PsServerOptions& options, HostedShards* hosted,
                                                          ShardStore* store) {
  std::unique_ptr<PsServer> server(new PsServer());

  grpc::EnableDefaultHealthCheckService(true);
  if (options.threads > 0) server->pool_ = std::make_unique<ThreadPool>(options.threads, kMaxQueuedCalls);
  server->peers_ = std::make_unique<PeerServers>(options.peer_credentials, hosted->partition().num_servers());
  server->service_ = std::make_unique<PsServiceImpl>(hosted, server->pool_.get(), store, server->peers_.get(),
                                                     options.forward_deadline);

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
