// gRPC edge of the scheduler: the Scheduler service over Membership and ClockTable, and a running server.
//
// WaitToStart is answered when the ClockTable allows it (from the Advance that allows it), and not before
// the job has formed (every server and worker registered), so no gRPC thread ever blocks on a wait. Every call
// checks the job id; WaitToStart, Advance, Rejoin and RequestRollback also check the worker: a request from a
// worker declared dead or superseded (a revived zombie) is refused with FAILED_PRECONDITION. RequestRollback
// only asks the job controller, whose thread rolls the job back.
#ifndef KESTREL_SCHEDULER_SCHEDULER_SERVICE_H_
#define KESTREL_SCHEDULER_SCHEDULER_SERVICE_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/metrics.h"
#include "common/rpc_metrics.h"
#include "common/peer_identity.h"
#include "common/tls.h"
#include "grpcpp/grpcpp.h"
#include "proto/scheduler.grpc.pb.h"
#include "scheduler/clock_table.h"
#include "common/partition.h"
#include "scheduler/job_controller.h"
#include "scheduler/membership.h"
#include "scheduler/server_admin.h"

namespace kestrel {

struct SchedulerOptions {
  // Requests must name this job. Default: "kestrel".
  std::string job_id = "kestrel";
  // Ranks and heartbeat timing (see scheduler/membership.h).
  MembershipOptions membership;
  // BSP, SSP(staleness) or ASP (see scheduler/clock_table.h). Default: BSP.
  ConsistencyPolicy consistency;
  // Server-enforced clocks (ClockTable's leases, docs/protocol.md): > 0, the servers enforce `consistency` and
  // workers ask the scheduler once per lease of this many iterations; 0: the scheduler is every iteration's
  // barrier (the fallback, for comparison). Elastic jobs (checkpoint.elastic_timeout > 0) run with the barrier
  // whatever this says: removing a dead worker needs every other worker's exact clock here. Default:
  // kDefaultLeaseClocks.
  static constexpr int kDefaultLeaseClocks = 8;
  int lease_clocks = kDefaultLeaseClocks;
  // The key partition handed to every member (Partition::ToString()). Default: "" = uniform over the servers.
  std::string partition;
  // Checkpoints, rollbacks and resume (scheduler/job_controller.h). Default: no checkpoint directory.
  CheckpointOptions checkpoint;
  // Deadline of each server's Checkpoint / Restore call. Default: 10 min.
  absl::Duration admin_deadline = absl::Minutes(10);
  // Mutual TLS for the scheduler's listener and its calls to the servers (common/tls.h). Default: none:
  // plaintext, and a listener on a non-loopback address is refused unless tls.insecure.
  TlsConfig tls;
  // Called (on the job controller's thread) when the job cannot continue safely, e.g. the checkpoint to restore is
  // damaged: the scheduler must exit non-zero. Default: none (logged only).
  std::function<void(absl::Status)> on_fatal;
};

// Every call is counted and timed, and the job's state is read at every metrics scrape
// (scheduler/scheduler_metrics.h). Thread-safe.
class SchedulerServiceImpl final : public Scheduler::CallbackService {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<SchedulerServiceImpl>> Create(const SchedulerOptions& options);

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context, const RegisterRequest* request,
                                     RegisterResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context, const HeartbeatRequest* request,
                                      HeartbeatResponse* response) override;
  grpc::ServerUnaryReactor* WaitToStart(grpc::CallbackServerContext* context, const WaitToStartRequest* request,
                                        WaitToStartResponse* response) override;
  grpc::ServerUnaryReactor* Advance(grpc::CallbackServerContext* context, const AdvanceRequest* request,
                                    AdvanceResponse* response) override;
  grpc::ServerUnaryReactor* Describe(grpc::CallbackServerContext* context, const DescribeRequest* request,
                                     DescribeResponse* response) override;
  grpc::ServerUnaryReactor* Rejoin(grpc::CallbackServerContext* context, const RejoinRequest* request,
                                   RegisterResponse* response) override;
  grpc::ServerUnaryReactor* RequestRollback(grpc::CallbackServerContext* context,
                                            const RequestRollbackRequest* request,
                                            RequestRollbackResponse* response) override;
  grpc::ServerUnaryReactor* RequestCheckpoint(grpc::CallbackServerContext* context,
                                              const RequestCheckpointRequest* request,
                                              RequestCheckpointResponse* response) override;
  grpc::ServerUnaryReactor* Scale(grpc::CallbackServerContext* context, const ScaleRequest* request,
                                  ScaleResponse* response) override;

  // Starts the job controller (reads the checkpoint to resume from); an error means do not serve.
  [[nodiscard]] absl::Status StartJobController();

  // Declares silent members dead (logged); call every heartbeat_interval / 4.
  void ExpireSilent(absl::Time now);
  // Fails every pending and later WaitToStart with UNAVAILABLE (before shutting the server down).
  void CancelWaits();
  // WaitToStart calls held because the job is still forming (the Register that completes it issues them).
  size_t num_forming_waits();

  Membership& membership() { return *membership_; }
  ClockTable& clocks() { return *clocks_; }
  JobController& job_controller() { return *job_controller_; }

 private:
  SchedulerServiceImpl(const SchedulerOptions& options, std::unique_ptr<Membership> membership,
                       std::unique_ptr<ClockTable> clocks);
  std::atomic<int64_t> deaf_periods_logged_{0};  // Membership::deaf_periods() as ExpireSilent last logged it
  [[nodiscard]] absl::Status CheckJob(const std::string& job_id) const;
  // CheckJob, then the caller's certificate (common/peer_identity.h): of this job, a role in `allowed`, and for
  // workers and servers the member role (none: a worker-only call) and id (none: no id) the request claims. On
  // success *caller is the identity (none on a plaintext listener).
  [[nodiscard]] absl::Status CheckCaller(grpc::CallbackServerContext* context, const std::string& job_id, PeerRoles allowed,
                           const char* method, std::optional<MemberRole> claimed_role, std::optional<int> claimed_id,
                           std::optional<PeerIdentity>* caller = nullptr) const;
  // A worker's call by rank (WaitToStart, Advance): ABORTED when it trains in an older layout than `layout`
  // (it rejoins), else the rank must be of the layout and its id the caller's certificate's.
  [[nodiscard]] absl::Status CheckWorkerRank(const std::optional<PeerIdentity>& caller, const JobLayout& layout, int rank,
                               uint64_t layout_generation, const char* method) const;
  void FillView(ClusterView* view) const;
  // Replicated jobs: key ranges with fewer copies in service than the job's replicas.
  int UnderReplicatedRanges() const;
  bool Replicated() const;

  const SchedulerOptions options_;
  const std::unique_ptr<Membership> membership_;
  const std::unique_ptr<ClockTable> clocks_;
  std::unique_ptr<ServerAdmin> admin_;
  std::unique_ptr<JobController> job_controller_;
  std::atomic<bool> shutting_down_{false};
  // WaitToStart calls that arrived while the job was forming: the job starts once every member registered.
  // Workers' last heartbeat progress (HeartbeatRequest.progress) by member id: status only. Only ids the
  // membership accepted a heartbeat of are kept (bounded by the job's members).
  absl::Mutex progress_mu_;
  absl::flat_hash_map<int, int64_t> progress_ ABSL_GUARDED_BY(progress_mu_);
  absl::Mutex forming_mu_;
  std::vector<std::function<void()>> forming_waits_ ABSL_GUARDED_BY(forming_mu_);
  // Per-method call counts and latencies (kestrel_scheduler_requests_total, ..._request_duration_seconds).
  RpcMetrics::Method &register_rpc_, &heartbeat_rpc_, &wait_to_start_rpc_, &advance_rpc_, &describe_rpc_,
      &rejoin_rpc_, &request_rollback_rpc_, &request_checkpoint_rpc_, &scale_rpc_;
  ScrapeHook metrics_hook_;  // last: unregistered first, while the members above are still in use
};

struct SchedulerServerOptions {
  // Address to listen on. Default: "0.0.0.0:7000". Port 0 picks a free port.
  std::string address = "0.0.0.0:7000";
  // Bounds on what clients can make the scheduler hold: gRPC's buffer memory (a grpc::ResourceQuota) and
  // concurrent calls per connection (pending WaitToStart calls included). Defaults: 256 MiB and 256.
  int64_t memory_quota_bytes = int64_t{256} << 20;
  int max_concurrent_streams = 256;
};

// A started scheduler: the gRPC server (with the standard health service) plus the thread that declares
// silent members dead. Thread-safe.
class SchedulerServer {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<SchedulerServer>> Start(const SchedulerServerOptions& server_options,
                                                                const SchedulerOptions& options);
  ~SchedulerServer();

  int port() const { return port_; }
  SchedulerServiceImpl& service() { return *service_; }
  // Fails pending waits, stops the expiry thread and the server.
  void Shutdown();
  void Wait();

 private:
  SchedulerServer() = default;

  std::unique_ptr<SchedulerServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  absl::Notification stop_;
  std::thread expiry_;
  int port_ = 0;
};

}  // namespace kestrel

#endif  // KESTREL_SCHEDULER_SCHEDULER_SERVICE_H_
