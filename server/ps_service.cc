#include "server/ps_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/grpc_status.h"
#include "common/pull_wire.h"
#include "common/thread_pool.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/ps_handlers.h"

namespace kestrel {

// Runs `work` on the handler pool (or inline on gRPC's callback thread without one) and finishes the call
// with its status. Handlers do CPU work only; nothing in them waits on other calls.
grpc::ServerUnaryReactor* PsServiceImpl::Run(grpc::CallbackServerContext* context,
                                             std::function<absl::Status()> work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (pool_ == nullptr) {
    reactor->Finish(ToGrpcStatus(work()));
  } else {
    pool_->Schedule([reactor, work = std::move(work)] { reactor->Finish(ToGrpcStatus(work())); });
  }
  return reactor;
}

grpc::ServerUnaryReactor* PsServiceImpl::Pull(grpc::CallbackServerContext* context,
                                               const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  return Run(context, [this, request, response]() -> absl::Status {
    PullRequest parsed;
    grpc::ByteBuffer copy(*request);  // shares the slices; Deserialize consumes its argument
    grpc::Status status = grpc::SerializationTraits<PullRequest>::Deserialize(&copy, &parsed);
    if (!status.ok()) {
      return shard_->Count(absl::InvalidArgumentError("malformed PullRequest: " + status.error_message()));
    }
    PullResponseWriter writer;
    absl::Status handled = HandlePullInto(*shard_, parsed, [&writer](size_t floats, int dim) {
      return writer.Allocate(floats, dim);
    });
    if (handled.ok()) *response = writer.Finish();
    return handled;
  });
}

grpc::ServerUnaryReactor* PsServiceImpl::Push(grpc::CallbackServerContext* context, const PushRequest* request,
                                              PushResponse* response) {
  return Run(context, [=] { return HandlePush(*shard_, *request, response); });
}

grpc::ServerUnaryReactor* PsServiceImpl::PullDense(grpc::CallbackServerContext* context,
                                                   const PullRequest* request, PullResponse* response) {
  return Run(context, [=] { return HandlePullDense(*shard_, *request, response); });
}

grpc::ServerUnaryReactor* PsServiceImpl::PushDense(grpc::CallbackServerContext* context,
                                                   const PushRequest* request, PushResponse* response) {
  return Run(context, [=] { return HandlePushDense(*shard_, *request, response); });
}

grpc::ServerUnaryReactor* PsServiceImpl::CreateTable(grpc::CallbackServerContext* context,
                                                     const CreateTableRequest* request,
                                                     CreateTableResponse* response) {
  return Run(context, [=] { return HandleCreateTable(*shard_, *request, response); });
}

grpc::ServerUnaryReactor* PsServiceImpl::DescribeTables(grpc::CallbackServerContext* context,
                                                        const DescribeTablesRequest* request,
                                                        DescribeTablesResponse* response) {
  return Run(context, [=] { return HandleDescribeTables(*shard_, *request, response); });
}

grpc::ServerUnaryReactor* PsServiceImpl::Stats(grpc::CallbackServerContext* context, const StatsRequest* request,
                                               StatsResponse* response) {
  return Run(context, [=] { return HandleStats(*shard_, *request, response); });
}

grpc::ServerUnaryReactor* PsServiceImpl::Checkpoint(grpc::CallbackServerContext* context,
                                                    const CheckpointShardRequest* request,
                                                    CheckpointShardResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  admin_.Schedule([this, reactor, request, response] {
    absl::Status status = shard_->CheckJob(ContextOf(request->header()));
    if (status.ok() && store_ == nullptr) {
      status = absl::FailedPreconditionError(absl::StrFormat(
          "server %d was started without --checkpoint_dir: it cannot write checkpoints", shard_->shard_index()));
    }
    if (status.ok()) {
      absl::StatusOr<ShardCheckpoint> written = store_->Checkpoint(*shard_, request->name());
      status = written.status();
      if (written.ok()) *response->mutable_shard() = *std::move(written);
    }
    if (!status.ok()) KLOG(Warning) << "checkpoint " << request->name() << " failed: " << status;
    reactor->Finish(ToGrpcStatus(status));
  });
  return reactor;
}

grpc::ServerUnaryReactor* PsServiceImpl::Restore(grpc::CallbackServerContext* context,
                                                 const RestoreShardRequest* request, RestoreShardResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  admin_.Schedule([this, reactor, request, response] {
    absl::Status status = shard_->CheckJob(ContextOf(request->header()));
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
        status = shard_->Restore({}, request->min_worker_generation(), [](Shard::RowSink) { return absl::OkStatus(); });
      } else {
        status = absl::FailedPreconditionError(absl::StrFormat(
            "server %d was started without --checkpoint_dir: it cannot restore %s", shard_->shard_index(),
            request->name()));
      }
    }
    if (status.ok()) {
      uint64_t rows = 0;
      for (const TableStats& table : shard_->Stats().tables) rows += table.rows;
      response->set_rows(rows);
    } else {
      KLOG(Error) << "restoring " << (request->name().empty() ? "empty tables" : request->name())
                  << " failed: " << status;
    }
    reactor->Finish(ToGrpcStatus(status));
  });
  return reactor;
}

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Start(const PsServerOptions& options, Shard* shard,
                                                          ShardStore* store) {
  std::unique_ptr<PsServer> server(new PsServer());

  grpc::EnableDefaultHealthCheckService(true);
  if (options.threads > 0) server->pool_ = std::make_unique<ThreadPool>(options.threads);
  server->service_ = std::make_unique<PsServiceImpl>(shard, server->pool_.get(), store);

  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, grpc::InsecureServerCredentials(), &server->port_);
  builder.RegisterService(server->service_.get());
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
