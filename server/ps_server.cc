#include "server/ps_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/network_policy.h"
#include "common/status.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "server/peer_client.h"

namespace kestrel {

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
  server->peers_ = std::make_unique<PeerServers>(options.peer_credentials, hosted->partition().num_servers(),
                                                 options.forward_deadline);
  server->service_ = std::make_unique<PsServiceImpl>(std::move(hosted), server->pool_.get(), store,
                                                     server->peers_.get());

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
  ApplyListenerNetworkPolicy(builder);
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

PeerLinks& PsServer::peers() { return *peers_; }

}  // namespace kestrel
