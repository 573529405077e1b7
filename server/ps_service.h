// gRPC edge of the parameter server: the ParameterServer service over a Shard, and a running server.
//
// Message size limits are raised deliberately: the server accepts requests up to
// PsServerOptions::max_message_bytes (default 64 MiB) and rejects larger ones with RESOURCE_EXHAUSTED before
// they reach the Shard. Clients split requests well below it (worker/ps_client.h, default 2 MiB per request),
// which is also where gRPC on loopback is fastest (../shared/perf-notes.md).
#ifndef KESTREL_SERVER_PS_SERVICE_H_
#define KESTREL_SERVER_PS_SERVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps.grpc.pb.h"
#include "server/shard.h"

namespace kestrel {

// Adapts a Shard to the ParameterServer service. Thread-safe; does not own the Shard.
// Pull, the hot read, is served from raw buffers: the rows are written straight into the response slice
// (common/pull_wire.h), on gRPC's callback threads (CPU work only, nothing waits there).
class PsServiceImpl final : public ParameterServer::WithRawCallbackMethod_Pull<ParameterServer::Service> {
 public:
  explicit PsServiceImpl(Shard* shard) : shard_(shard) {}

  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::Status Push(grpc::ServerContext*, const PushRequest* request, PushResponse* response) override;
  grpc::Status PullDense(grpc::ServerContext*, const PullRequest* request, PullResponse* response) override;
  grpc::Status PushDense(grpc::ServerContext*, const PushRequest* request, PushResponse* response) override;
  grpc::Status CreateTable(grpc::ServerContext*, const CreateTableRequest* request,
                           CreateTableResponse* response) override;
  grpc::Status DescribeTables(grpc::ServerContext*, const DescribeTablesRequest* request,
                              DescribeTablesResponse* response) override;
  grpc::Status Stats(grpc::ServerContext*, const StatsRequest* request, StatsResponse* response) override;

 private:
  Shard* const shard_;
};

struct PsServerOptions {
  // Address to listen on. Default: "0.0.0.0:7100". Port 0 picks a free port (see PsServer::port()).
  std::string address = "0.0.0.0:7100";
  // Request-handling threads. Default: 0 = one per CPU core (at least 2).
  int threads = 0;
  // Largest message accepted or sent. Default: 64 MiB.
  int max_message_bytes = 64 << 20;
};

// A started gRPC server for one Shard, with the standard gRPC health service (grpc.health.v1.Health) reporting
// SERVING for "" and "kestrel.ParameterServer". Thread-safe.
class PsServer {
 public:
  static absl::StatusOr<std::unique_ptr<PsServer>> Start(const PsServerOptions& options, Shard* shard);
  ~PsServer();

  // The port actually bound.
  int port() const { return port_; }
  // Stops accepting calls, lets in-flight calls finish until `grace` passes, then cancels them.
  void Shutdown(absl::Duration grace = absl::Seconds(5));
  // Blocks until the server has shut down.
  void Wait();

 private:
  PsServer() = default;

  std::unique_ptr<PsServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_PS_SERVICE_H_
