// SchedulerClient: how servers, workers and tools talk to kestrel_scheduler, as an interface the core calls
// (client/grpc_scheduler_client.h makes the real one; tests may answer in process).
#ifndef KESTREL_CLIENT_SCHEDULER_CLIENT_H_
#define KESTREL_CLIENT_SCHEDULER_CLIENT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/scheduler.pb.h"

namespace kestrel {

// Thread-safe. Every call has a deadline (rpc_deadline; WaitToStart: wait_deadline).
class SchedulerClient {
 public:
  virtual ~SchedulerClient() = default;
  // `id`: the member's id, the rank its certificate names (-1: any free one); the answer says its rank.
  [[nodiscard]] virtual absl::StatusOr<RegisterResponse> Register(MemberRole role, const std::string& address, int id) = 0;
  // `id`: as registered (a rescale may renumber the member's rank, never its id; the answer says the rank).
  // `routing_generation`: servers of replicated jobs, the routing they act on (0 otherwise).
  // `progress`: workers, iterations finished (HeartbeatRequest.progress; status only).
  [[nodiscard]] virtual absl::StatusOr<HeartbeatResponse> Heartbeat(MemberRole role, int id, const std::string& incarnation,
                                                      uint64_t routing_generation, int64_t progress = 0) = 0;
  // Blocks the calling thread until the scheduler allows iteration `clock` (workers call it from their own
  // training thread, never from a gRPC callback). Returns the min clock at the time of permission.
  // `generation` and `incarnation`: what Register (or Rejoin) answered this worker; `layout_generation`: the
  // rescale whose layout it trains in (an older one than the job's is refused with ABORTED: rejoin).
  // `permitted_through` (may be null) receives the last iteration the worker may start without asking again
  // (WaitToStartResponse.permitted_through: the lease's end under server-enforced clocks, else `clock`).
  [[nodiscard]] virtual absl::StatusOr<int64_t> WaitToStart(int rank, int64_t clock, uint64_t generation,
                                              const std::string& incarnation, uint64_t layout_generation = 0,
                                              int64_t* permitted_through = nullptr) = 0;
  // `done`: this was the worker's last iteration. `state`: where the worker's reader is (for checkpoints).
  // `layout_generation`: as for WaitToStart. `permitted_through` (leases, may be null): also asks for the lease
  // starting at `finished` (AdvanceRequest.renew) and receives its end, or -1 when none was granted now.
  [[nodiscard]] virtual absl::StatusOr<int64_t> Advance(int rank, int64_t finished, uint64_t generation,
                                          const std::string& incarnation, bool done = false,
                                          const WorkerState* state = nullptr, uint64_t layout_generation = 0,
                                          int64_t* permitted_through = nullptr) = 0;
  // Once the job is finished: worker `rank`, at clock `finished`, needs the servers no more and exits.
  [[nodiscard]] virtual absl::Status Leave(int rank, int64_t finished, uint64_t generation, const std::string& incarnation,
                             uint64_t layout_generation = 0) = 0;
  [[nodiscard]] virtual absl::StatusOr<DescribeResponse> Describe() = 0;
  // After a rollback or rescale: where the live worker with id `id` continues (its rank, clock, reader position,
  // generation to stamp). UNAVAILABLE while the rollback is in progress.
  [[nodiscard]] virtual absl::StatusOr<RegisterResponse> Rejoin(int id, const std::string& incarnation) = 0;
  // Asks the job to roll back to its last checkpoint (RequestRollbackRequest): the live worker with id `id`,
  // whose requests carry `generation` (what Register or Rejoin answered), for `reason` (at most 1024 bytes,
  // logged). Answers once the rollback is scheduled; the worker then rejoins until Rejoin's rollbacks exceeds
  // the count it knew. rolled_back false: a rollback since `generation` (or one in progress) serves it.
  // FAILED_PRECONDITION when the job is forming or finished, a rescale is pending, or `incarnation` is not the
  // id's current one.
  [[nodiscard]] virtual absl::StatusOr<RequestRollbackResponse> RequestRollback(int id, const std::string& incarnation,
                                                                  uint64_t generation, const std::string& reason) = 0;
  // Asks for a checkpoint; returns the clock it will cut at.
  [[nodiscard]] virtual absl::StatusOr<int64_t> RequestCheckpoint() = 0;
  // Resizes the running job (docs/elasticity.md, ScaleRequest); answers once the rescale is done. The request's
  // job id is the client's.
  [[nodiscard]] virtual absl::StatusOr<ScaleResponse> Scale(ScaleRequest request, absl::Duration deadline) = 0;
};

struct SchedulerClientOptions {
  // Job id sent with every request. Default: "kestrel".
  std::string job_id = "kestrel";
  // Deadline of each RPC but WaitToStart. Default: 10 s.
  absl::Duration rpc_deadline = absl::Seconds(10);
  // Deadline of WaitToStart (a worker may wait long for a slow peer). Default: 10 min.
  absl::Duration wait_deadline = absl::Minutes(10);
};

}  // namespace kestrel

#endif  // KESTREL_CLIENT_SCHEDULER_CLIENT_H_
