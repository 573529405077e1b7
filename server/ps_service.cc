#include "server/ps_service.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/pull_wire.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/ps_handlers.h"

namespace kestrel {

grpc::ServerUnaryReactor* PsServiceImpl::Pull(grpc::CallbackServerContext* context,
                                               const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  PullRequest parsed;
  grpc::ByteBuffer copy(*request);  // shares the slices; Deserialize consumes its argument
  grpc::Status status = grpc::SerializationTraits<PullRequest>::Deserialize(&copy, &parsed);
  if (!status.ok()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "malformed PullRequest: " +
                                                                         status.error_message()));
    return reactor;
  }
  PullResponseWriter writer;
  status = ToGrpcStatus(HandlePullInto(*shard_, parsed, [&writer](size_t floats, int dim) {
    return writer.Allocate(floats, dim);
  }));
  if (status.ok()) *response = writer.Finish();
  reactor->Finish(status);
  return reactor;
}

grpc::Status PsServiceImpl::Push(grpc::ServerContext*, const PushRequest* request, PushResponse* response) {
  return ToGrpcStatus(HandlePush(*shard_, *request, response));
}

grpc::Status PsServiceImpl::PullDense(grpc::ServerContext*, const PullRequest* request, PullResponse* response) {
  return ToGrpcStatus(HandlePullDense(*shard_, *request, response));
}

grpc::Status PsServiceImpl::PushDense(grpc::ServerContext*, const PushRequest* request, PushResponse* response) {
  return ToGrpcStatus(HandlePushDense(*shard_, *request, response));
}

grpc::Status PsServiceImpl::CreateTable(grpc::ServerContext*, const CreateTableRequest* request,
                                        CreateTableResponse* response) {
  return ToGrpcStatus(HandleCreateTable(*shard_, *request, response));
}

grpc::Status PsServiceImpl::DescribeTables(grpc::ServerContext*, const DescribeTablesRequest* request,
                                           DescribeTablesResponse* response) {
  return ToGrpcStatus(HandleDescribeTables(*shard_, *request, response));
}

grpc::Status PsServiceImpl::Stats(grpc::ServerContext*, const StatsRequest* request, StatsResponse* response) {
  return ToGrpcStatus(HandleStats(*shard_, *request, response));
}

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Start(const PsServerOptions& options, Shard* shard) {
  std::unique_ptr<PsServer> server(new PsServer());
  server->service_ = std::make_unique<PsServiceImpl>(shard);

  grpc::EnableDefaultHealthCheckService(true);
  const int threads =
      options.threads > 0 ? options.threads : std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  // The sync server adds threads while all pollers are busy; the quota bounds that growth. Calls beyond it
  // fail with RESOURCE_EXHAUSTED, so it is generous: clients bound their own in-flight requests.
  grpc::ResourceQuota quota("kestrel_server");
  quota.SetMaxThreads(std::max(64, 8 * threads));

  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, grpc::InsecureServerCredentials(), &server->port_);
  builder.RegisterService(server->service_.get());
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  builder.SetResourceQuota(quota);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS, std::max(1, threads / 2));
  // Keep `threads` pollers alive: with fewer, the sync server creates and retires a thread for most calls
  // under load (745 threads for 1280 calls in bench/ps_bench before this).
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, threads);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, threads);
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
