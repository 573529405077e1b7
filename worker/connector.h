// WorkerConnector: how a worker reaches its job — a client of the scheduler and one of the servers, by
// address — as an interface the worker's core (worker/worker_session.h) calls. worker/grpc_connector.h makes the
// gRPC one; tests may answer in process.
#ifndef KESTREL_WORKER_CONNECTOR_H_
#define KESTREL_WORKER_CONNECTOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/scheduler_client.h"
#include "common/partition.h"
#include "worker/ps_client.h"

namespace kestrel {

// Thread-safe.
class WorkerConnector {
 public:
  virtual ~WorkerConnector() = default;
  // A client of the scheduler at `address` (host:port).
  virtual std::unique_ptr<SchedulerClient> Scheduler(const std::string& address,
                                                     const SchedulerClientOptions& options) = 0;
  // A client of the servers of `partition`: server i at addresses[i] (their count must be the partition's).
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<PsClient>> Servers(const PsClientOptions& options, Partition partition,
                                                            const std::vector<std::string>& addresses) = 0;
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_CONNECTOR_H_
