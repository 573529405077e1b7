#include "server/ps_service.h"

#include <algorithm>

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

}  // namespace

PsServiceImpl::PsServiceImpl(Shard* shard, ThreadPool* pool, ShardStore* store)
    : shard_(shard),
      pool_(pool),
      store_(store),
      pull_rpc_(ServerMetrics::Get().rpc().method("Pull")),
      push_rpc_(ServerMetrics::Get().rpc().method("Push")),
      pull_dense_rpc_(ServerMetrics::Get().rpc().method("PullDense")),
      push_dense_rpc_(ServerMetrics::Get().rpc().method("PushDense")),
      create_table_rpc_(ServerMetrics::Get().rpc().method("CreateTable")),
      describe_tables_rpc_(ServerMetrics::Get().rpc().method("DescribeTables")),
      stats_rpc_(ServerMetrics::Get().rpc().method("Stats")),
      checkpoint_rpc_(ServerMetrics::Get().rpc().method("Checkpoint")),
      restore_rpc_(ServerMetrics::Get().rpc().method("Restore")),
      admin_(1, /*max_queued=*/16),
      stats_hook_([shard] { ServerMetrics::Get().Refresh(*shard); }) {}

// Runs `work` on the handler pool (or inline on gRPC's callback thread without one) and finishes the call
// with its status, counted and timed in `rpc`. Handlers do CPU work only; nothing in them waits on other calls.
grpc::ServerUnaryReactor* PsServiceImpl::Run(grpc::CallbackServerContext* context, RpcMetrics::Method& rpc,
                                             PeerRoles allowed, const char* method,
                                             std::function<absl::Status(const Caller&)> work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const RpcMetrics::Call call = rpc.Begin();
  auto finish = [reactor, call](const absl::Status& status) {
    call.End(status);
    reactor->Finish(ToGrpcStatus(status));
  };
  absl::StatusOr<Caller> caller = AuthorizePeer(context->auth_context().get(), shard_->job_id(), allowed, method);
  if (!caller.ok()) {
    finish(shard_->Count(caller.status()));
  } else if (pool_ == nullptr) {
    finish(work(*caller));
  } else if (!pool_->TrySchedule(
                 [finish, work = std::move(work), caller = *std::move(caller)] { finish(work(caller)); })) {
    finish(shard_->Count(absl::UnavailableError(absl::StrCat(
        "the server is busy: ", kMaxQueuedCalls, " calls are waiting for a handler thread; retry"))));
  }
  return reactor;
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
    PullResponseWriter writer;
    absl::Status handled = HandlePullInto(*shard_, parsed, [&writer](size_t values, int dim, ValueType type) {
      return writer.Allocate(values, dim, type);
    });
    if (handled.ok()) *response = writer.Finish();
    return handled;
  });
}

grpc::ServerUnaryReactor* PsServiceImpl::Push(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                              grpc::ByteBuffer* response) {
  return Run(context, push_rpc_, kDataRoles, "Push", [this, request, response](const Caller& caller) -> absl::Status {
    PushRequestView view;
    KESTREL_RETURN_IF_ERROR(shard_->Count(ReadPushRequest(*request, &view)));
    KESTREL_RETURN_IF_ERROR(shard_->Count(CheckClaimedRank(caller, view.header->worker_rank(), "the Push")));
    PushResponse answer;
    KESTREL_RETURN_IF_ERROR(HandlePushFields(*shard_, /*dense=*/false, view, &answer));
    bool own_buffer;
    grpc::Status serialized = grpc::SerializationTraits<PushResponse>::Serialize(answer, response, &own_buffer);
    return serialized.ok() ? absl::OkStatus() : absl::InternalError(serialized.error_message());
  });
}

grpc::ServerUnaryReactor* PsServiceImpl::PullDense(grpc::CallbackServerContext* context,
                                                   const PullRequest* request, PullResponse* response) {
  return Run(context, pull_dense_rpc_, kDataRoles, "PullDense", [=](const Caller& caller) {
    KESTREL_RETURN_IF_ERROR(
        shard_->Count(CheckClaimedRank(caller, request->header().worker_rank(), "the PullDense")));
    return HandlePullDense(*shard_, *request, response);
  });
}

grpc::ServerUnaryReactor* PsServiceImpl::PushDense(grpc::CallbackServerContext* context,
                                                   const PushRequest* request, PushResponse* response) {
  return Run(context, push_dense_rpc_, kDataRoles, "PushDense", [=](const Caller& caller) {
    KESTREL_RETURN_IF_ERROR(
        shard_->Count(CheckClaimedRank(caller, request->header().worker_rank(), "the PushDense")));
    return HandlePushDense(*shard_, *request, response);
  });
}

grpc::ServerUnaryReactor* PsServiceImpl::CreateTable(grpc::CallbackServerContext* context,
                                                     const CreateTableRequest* request,
                                                     CreateTableResponse* response) {
  return Run(context, create_table_rpc_, kDataRoles, "CreateTable",
             [=](const Caller&) { return HandleCreateTable(*shard_, *request, response); });
}

grpc::ServerUnaryReactor* PsServiceImpl::DescribeTables(grpc::CallbackServerContext* context,
                                                        const DescribeTablesRequest* request,
                                                        DescribeTablesResponse* response) {
  return Run(context, describe_tables_rpc_, kReadRoles, "DescribeTables",
             [=](const Caller&) { return HandleDescribeTables(*shard_, *request, response); });
}

grpc::ServerUnaryReactor* PsServiceImpl::Stats(grpc::CallbackServerContext* context, const StatsRequest* request,
                                               StatsResponse* response) {
  return Run(context, stats_rpc_, kReadRoles, "Stats", [=](const Caller& caller) {
    // Fingerprints read every row of every table: an admin's (or the scheduler's) request, not a worker's.
    if (request->fingerprints() && caller.has_value() && caller->role == PeerRole::kWorker) {
      return shard_->Count(absl::PermissionDeniedError("a worker may not ask for fingerprints (admins only)"));
    }
    return HandleStats(*shard_, *request, response);
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
      } else if (request->name().empty()) {
        status = shard_->Restore({}, request->min_worker_generation(), [](Shard::RowSink, Shard::SketchSink) { return absl::OkStatus(); });
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

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Start(const PsServerOptions& options, Shard* shard,
                                                          ShardStore* store) {
  std::unique_ptr<PsServer> server(new PsServer());

  grpc::EnableDefaultHealthCheckService(true);
  if (options.threads > 0) server->pool_ = std::make_unique<ThreadPool>(options.threads, kMaxQueuedCalls);
  server->service_ = std::make_unique<PsServiceImpl>(shard, server->pool_.get(), store);

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
