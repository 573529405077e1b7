// PsServer: a started gRPC server for one parameter server's range groups, and its options. The public face of
// the server (main.cc, tests, benchmarks); the service it runs is server/ps_service.h.
//
// Message size limits are raised deliberately: the server accepts requests up to
// PsServerOptions::max_message_bytes (default 64 MiB) and rejects larger ones with RESOURCE_EXHAUSTED before
// they reach the Shard; the Shard refuses pulls whose answer would exceed it (ShardOptions::max_response_bytes,
// which the caller sets to match). Clients split requests well below it (worker/ps_client.h, default 2 MiB per
// request), which is also where gRPC on loopback is fastest (bench/README.md, "Request size").
#ifndef KESTREL_SERVER_PS_SERVER_H_
#define KESTREL_SERVER_PS_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/thread_pool.h"
#include "common/tls.h"
#include "grpcpp/grpcpp.h"
#include "server/hosted_shards.h"
#include "server/ps_service.h"
#include "server/shard.h"
#include "server/shard_store.h"

namespace kestrel {

struct PsServerOptions {
  // Address to listen on. Default: "0.0.0.0:7100". Port 0 picks a free port (see PsServer::port()).
  std::string address = "0.0.0.0:7100";
  // Request-handling threads: > 0 runs handlers on a pool of this many threads (at most kMaxQueuedCalls calls
  // waiting); 0 runs them inline on gRPC's callback threads (gRPC 1.51 sizes that pool itself, from the core
  // count). Default: 0.
  int threads = 0;
  // Largest message accepted or sent. Default: 64 MiB.
  int max_message_bytes = 64 << 20;
  // Mutual TLS (common/tls.h). Default: none: plaintext, refused on a non-loopback address unless insecure.
  TlsConfig tls;
  // Bounds on what clients can make the server hold: memory of gRPC's buffers for all connections (a
  // grpc::ResourceQuota; beyond it new calls wait or fail with RESOURCE_EXHAUSTED) and concurrent calls per
  // connection. Defaults: 4 GiB and 64.
  int64_t memory_quota_bytes = int64_t{4} << 30;
  int max_concurrent_streams = 64;
  // Replicated jobs: the credentials a primary reaches its backups with (common/tls.h
  // MakeChannelCredentials). Default: null, plaintext.
  std::shared_ptr<grpc::ChannelCredentials> peer_credentials;
  // Deadline of each call to another server: a forwarded update (how long a primary waits for a backup to
  // acknowledge it), a piece of a group copy or of a rescale's rows. Default: 10 s.
  absl::Duration forward_deadline = absl::Seconds(10);
};

// A started gRPC server for one server's range groups, with the standard gRPC health service
// (grpc.health.v1.Health) reporting SERVING for "" and "kestrel.ParameterServer". Thread-safe. Owns the
// service, the handler pool and the channels to the other servers; `store` is the caller's.
class PsServer {
 public:
  // `store` (optional) serves the checkpoint admin calls; it must outlive the server.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<PsServer>> Start(const PsServerOptions& options,
                                                         std::shared_ptr<HostedShards> hosted,
                                                         ShardStore* store = nullptr);
  // Groups the caller owns and keeps alive for the server's life (tests, tools).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<PsServer>> Start(const PsServerOptions& options, HostedShards* hosted,
                                                         ShardStore* store = nullptr);
  // One unreplicated Shard (tests, tools).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<PsServer>> Start(const PsServerOptions& options, Shard* shard,
                                                         ShardStore* store = nullptr);
  ~PsServer();

  // The port actually bound.
  int port() const { return port_; }
  // Stops accepting calls and lets in-flight calls finish until `grace` passes, then cancels the rest (a
  // handler already running still finishes its table work; Wait() returns after it).
  void Shutdown(absl::Duration grace = absl::Seconds(5));
  // Blocks until the server has shut down.
  void Wait();
  // The job's other servers as this one reaches them (replicated jobs: where they serve, from the scheduler).
  PeerLinks& peers();
  // The service (the groups served now, the rescale state, the job view).
  PsServiceImpl& service() { return *service_; }

 private:
  PsServer() = default;

  std::unique_ptr<ThreadPool> pool_;  // outlives service_ and server_
  std::unique_ptr<PeerServers> peers_;
  std::unique_ptr<PsServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_PS_SERVER_H_
