// gRPC edge of the parameter server: the ParameterServer service over a Shard, and a running server.
//
// Message size limits are raised deliberately: the server accepts requests up to
// PsServerOptions::max_message_bytes (default 64 MiB) and rejects larger ones with RESOURCE_EXHAUSTED before
// they reach the Shard; the Shard refuses pulls whose answer would exceed it (ShardOptions::max_response_bytes,
// which the caller sets to match). Clients split requests well below it (worker/ps_client.h, default 2 MiB per request),
// which is also where gRPC on loopback is fastest (../shared/perf-notes.md).
#ifndef KESTREL_SERVER_PS_SERVICE_H_
#define KESTREL_SERVER_PS_SERVICE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "common/metrics.h"
#include "common/peer_identity.h"
#include "common/thread_pool.h"
#include "common/tls.h"
#include "proto/ps.grpc.pb.h"
#include "server/shard.h"
#include "server/shard_store.h"

namespace kestrel {

// Adapts a Shard to the ParameterServer service (gRPC callback API). Thread-safe; owns neither the Shard nor
// the pool. Handlers run on `pool` when given, else inline on gRPC's callback threads; either way they do CPU
// work only and never wait for other calls. Pull and Push, the hot path, are served from raw buffers: pulled
// rows are written straight into the response slice, pushed keys and gradients read straight from the
// received slices (common/pull_wire.h). The checkpoint admin calls (Checkpoint,
// Restore: seconds of disk work) run one at a time on their own thread, never on a gRPC thread. Every call is
// counted and timed, and the shard's statistics are read at every metrics scrape (server/server_metrics.h).
class PsServiceImpl final : public ParameterServer::WithRawCallbackMethod_Pull<
                                ParameterServer::WithRawCallbackMethod_Push<ParameterServer::CallbackService>> {
 public:
  // `store` may be null (no --checkpoint_dir): Checkpoint is then refused, and only Restore to empty tables
  // (a rollback without checkpoints) works.
  PsServiceImpl(Shard* shard, ThreadPool* pool, ShardStore* store = nullptr);

  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* PullDense(grpc::CallbackServerContext* context, const PullRequest* request,
                                 PullResponse* response) override;
  grpc::ServerUnaryReactor* PushDense(grpc::CallbackServerContext* context, const PushRequest* request,
                                 PushResponse* response) override;
  grpc::ServerUnaryReactor* CreateTable(grpc::CallbackServerContext* context, const CreateTableRequest* request,
                                 CreateTableResponse* response) override;
  grpc::ServerUnaryReactor* DescribeTables(grpc::CallbackServerContext* context, const DescribeTablesRequest* request,
                                 DescribeTablesResponse* response) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* context, const StatsRequest* request,
                                 StatsResponse* response) override;
  grpc::ServerUnaryReactor* Checkpoint(grpc::CallbackServerContext* context, const CheckpointShardRequest* request,
                                       CheckpointShardResponse* response) override;
  grpc::ServerUnaryReactor* Restore(grpc::CallbackServerContext* context, const RestoreShardRequest* request,
                                    RestoreShardResponse* response) override;

 private:
  // The caller's identity (none on a plaintext listener), or an error; see common/peer_identity.h.
  using Caller = std::optional<PeerIdentity>;
  // Checks that the caller's certificate is of this job and a role in `allowed`, then runs `work`.
  grpc::ServerUnaryReactor* Run(grpc::CallbackServerContext* context, RpcMetrics::Method& rpc, PeerRoles allowed,
                                const char* method, std::function<absl::Status(const Caller&)> work);

  Shard* const shard_;
  ThreadPool* const pool_;
  ShardStore* const store_;
  // Per-method call counts and latencies (kestrel_server_requests_total, ..._request_duration_seconds).
  RpcMetrics::Method &pull_rpc_, &push_rpc_, &pull_dense_rpc_, &push_dense_rpc_, &create_table_rpc_,
      &describe_tables_rpc_, &stats_rpc_, &checkpoint_rpc_, &restore_rpc_;
  ThreadPool admin_;  // one thread: checkpoint and restore calls, in arrival order (at most 16 waiting)
  ScrapeHook stats_hook_;  // last: unregistered first, while shard_ is still in use
};

// Most calls waiting for a handler thread (PsServerOptions::threads > 0); beyond it calls are answered
// UNAVAILABLE at once, so a flood of requests cannot grow the server's queue without bound.
inline constexpr size_t kMaxQueuedCalls = 4096;

struct PsServerOptions {
  // Address to listen on. Default: "0.0.0.0:7100". Port 0 picks a free port (see PsServer::port()).
  std::string address = "0.0.0.0:7100";
  // Request-handling threads: > 0 runs handlers on a pool of this many threads; 0 runs them inline on gRPC's
  // callback threads (gRPC 1.51 sizes that pool itself, from the core count). Default: 0.
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
};

// A started gRPC server for one Shard, with the standard gRPC health service (grpc.health.v1.Health) reporting
// SERVING for "" and "kestrel.ParameterServer". Thread-safe.
class PsServer {
 public:
  // `store` (optional) serves the checkpoint admin calls; it must outlive the server.
  static absl::StatusOr<std::unique_ptr<PsServer>> Start(const PsServerOptions& options, Shard* shard,
                                                         ShardStore* store = nullptr);
  ~PsServer();

  // The port actually bound.
  int port() const { return port_; }
  // Stops accepting calls and lets in-flight calls finish until `grace` passes, then cancels the rest (a
  // handler already running still finishes its table work; Wait() returns after it).
  void Shutdown(absl::Duration grace = absl::Seconds(5));
  // Blocks until the server has shut down.
  void Wait();

 private:
  PsServer() = default;

  std::unique_ptr<ThreadPool> pool_;  // outlives service_ and server_
  std::unique_ptr<PsServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_PS_SERVICE_H_
