// WorkerSession: a training worker's membership in a cluster job — everything a worker process does around its
// training loop, shared by the C++ worker (cmd/worker_main.cc) and a Python one (python/kestrel/_kestrel.cc):
//
//   Join       registers with the scheduler (retrying while it is not up, or while a crashed predecessor of the
//              same id is not yet declared dead), heartbeats from its own thread, waits until the job has formed
//              (and, for a rank added by a rescale, until the rescale admits it), and opens the first pass.
//   a pass     the job's layout as the worker trains in it: its rank, the partition, the consistency mode, the
//              clock and reader state to continue from, a parameter-server client stamped with the pass's
//              generation (through an SSP/ASP row cache where the mode allows), and the clock gate that asks the
//              scheduler for each iteration (BSP / SSP / ASP, decided there).
//   Recover    after the pass's training failed: asks the scheduler whether the job rolled back (a server died)
//              or was rescaled, and opens the next pass from the checkpoint's clock or in the new layout; else
//              the error was the worker's own.
//   Leave      tells the scheduler the worker is done with the finished job.
//
// If the scheduler refuses a heartbeat (this worker was declared dead, or superseded by a replacement of the same
// id), `on_refused` runs on the heartbeat thread; the default logs and ends the process with exit code 3, since
// whatever the worker does next would act for a member the job has given up on.
//
// Thread-safety: Join, Recover and Leave are for the one thread that drives training; client() and gate() are
// as thread-safe as PsClient and ClockGate are, and stay valid until the next Recover.
#ifndef KESTREL_WORKER_WORKER_SESSION_H_
#define KESTREL_WORKER_WORKER_SESSION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/consistency.h"
#include "common/metrics.h"
#include "common/partition.h"
#include "proto/checkpoint.pb.h"
#include "proto/scheduler.pb.h"
#include "client/heartbeater.h"
#include "client/scheduler_client.h"
#include "worker/connector.h"
#include "worker/ps_client.h"
#include "worker/row_cache.h"
#include "worker/trainer.h"

namespace kestrel {

struct WorkerSessionOptions {
  // The scheduler's host:port. Required.
  std::string scheduler;
  // The job's id, sent with every request. Default: "kestrel".
  std::string job_id = "kestrel";
  // The id to register as (the rank a worker certificate names); -1 (default): any free one.
  int id = -1;
  // What the worker registers as its address (ClusterView.worker_addresses): where peers reach it, e.g. the
  // allreduce rendezvous a Python worker hosts. Default: "" (none).
  std::string address;
  // How the session reaches the scheduler and the servers (worker/grpc_connector.h NewGrpcConnector). Required.
  std::shared_ptr<WorkerConnector> connector;
  // How long to retry registering and to wait for every server to join. Default: 60 s.
  absl::Duration scheduler_timeout = absl::Seconds(60);
  // How long Recover waits for the job to roll back or be rescaled. Default: 10 min.
  absl::Duration recovery_timeout = absl::Minutes(10);
  // Under SSP(s >= 1) serve rows from a cache while within the bound (worker/row_cache.h). Default: on.
  bool row_cache = true;
  // Most rows the cache keeps per table. Default: 2^20.
  int64_t row_cache_rows = 1 << 20;
  // Under ASP, serve cached rows for this many of the worker's own clocks (0, default: no cache).
  int asp_cache_clocks = 0;
  // Set to the worker's clock after every Advance the scheduler accepts. Default: null (none).
  prometheus::Gauge* clock_gauge = nullptr;
  // Runs on the heartbeat thread when the scheduler refuses this worker. Default (null): log and _Exit(3).
  std::function<void(absl::Status)> on_refused;
};

// The job's layout as this worker trains in it, from Join or a Recover to the next failure.
struct WorkerPass {
  int rank = 0;  // this worker's place in the layout (its data share; rank 0 evaluates)
  int num_workers = 0;
  int num_servers = 0;
  Partition partition = Partition::Uniform(1).value();  // the announced one replaces it
  ConsistencyPolicy consistency;
  int64_t clock = 0;     // iterations already done: the pass continues from here
  WorkerState state;     // the reader position at `clock` (absent: re-read the epoch and skip)
  uint64_t generation = 0;  // stamped on every request of the pass
  uint64_t rollbacks = 0;   // the job's rollbacks as of this pass
  uint64_t layout_generation = 0;
  bool rolled_back = false;  // the pass began because the job rolled back to a checkpoint
  ClusterView view;
};

class WorkerSession {
 public:
  // OUT_OF_RANGE: an elastic job removed this worker or the rescale it was to join was given up (nothing to
  // do: exit 0). FAILED_PRECONDITION: the scheduler refused it. UNAVAILABLE / DEADLINE_EXCEEDED: no scheduler,
  // or the job did not form, within scheduler_timeout. Other codes: a bad announcement.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<WorkerSession>> Join(WorkerSessionOptions options);
  ~WorkerSession();

  WorkerSession(const WorkerSession&) = delete;
  WorkerSession& operator=(const WorkerSession&) = delete;

  // The id this process registered as (fixed for its life; the rank is the pass's).
  int id() const { return id_; }
  const WorkerPass& pass() const { return pass_; }
  // The pass's parameter-server client: the row cache when the pass has one, else the connector's client.
  PsClient* client() const;
  // The pass's row cache, or null.
  const RowCache* row_cache() const { return row_cache_.get(); }
  ClockGate* gate() const { return gate_.get(); }
  SchedulerClient* scheduler() const { return scheduler_.get(); }
  // True once the scheduler has announced a generation past the pass's for this worker (a rollback or rescale it
  // has not recovered from). Generations only grow; a heartbeat answered before the pass began announces an
  // older one, which does not count.
  bool Superseded() const { return announced_generation_.load() > pass_.generation; }

  // After the pass's training failed with `error`: OK when the job rolled back or was rescaled and the next
  // pass is open (pass(), client() and gate() are new). OUT_OF_RANGE: a rescale left this worker out (exit 0).
  // FAILED_PRECONDITION: the scheduler refused it. Otherwise `error` itself: the failure was the worker's own
  // (the job runs on without a rollback), or no rollback came within recovery_timeout.
  [[nodiscard]] absl::Status Recover(const absl::Status& error);

  // Asks the scheduler to roll the job back to its last checkpoint (Scheduler.RequestRollback), naming
  // `reason`; then Recover as after any failure. A no-op when the job already rolled back since this pass.
  [[nodiscard]] absl::Status RequestRollback(const std::string& reason);

  // The job is finished and this worker's final model is settled at `finished` clocks: tells the scheduler it
  // leaves (retried while the scheduler is unreachable), after which refused heartbeats no longer matter.
  [[nodiscard]] absl::Status Leave(int64_t finished);

 private:
  explicit WorkerSession(WorkerSessionOptions options);
  [[nodiscard]] absl::Status Register();
  // Opens the pass in pass_ (its client, row cache and gate).
  [[nodiscard]] absl::Status OpenPass();
  // Takes the layout of a Register / Rejoin answer into pass_.
  void TakeAnswer(const RegisterResponse& answer);

  const WorkerSessionOptions options_;
  std::unique_ptr<SchedulerClient> scheduler_;
  int id_ = -1;
  std::string incarnation_;
  WorkerPass pass_;
  // Set once this worker left the finished job: refused heartbeats are expected then.
  std::atomic<bool> left_{false};
  // The generation the scheduler's latest heartbeat answer holds for this worker (a rollback moves it).
  std::atomic<uint64_t> announced_generation_{0};
  absl::Mutex routing_mu_;
  // Replicated jobs: the routing the scheduler announces, kept current from every heartbeat answer.
  std::shared_ptr<RoutingTable> routing_ ABSL_GUARDED_BY(routing_mu_);
  // The pass's client, cache and gate (the cache wraps the client; both outlive the gate's users).
  std::unique_ptr<PsClient> ps_;
  std::unique_ptr<RowCache> row_cache_;
  std::unique_ptr<ClockGate> gate_;
  std::unique_ptr<Heartbeater> heartbeater_;  // last: stopped first, before what its callbacks read
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_WORKER_SESSION_H_
