// PsServiceImpl: the ParameterServer gRPC service (callback API), a thin adapter from calls to the server's
// collaborators: the data plane's request handlers (server/ps_handlers.h) over the groups served
// (server/served_layout.h), push forwarding to backups (server/replication.h), group copies
// (server/group_transfer.h), the checkpoint admin calls (server/checkpoint_restore.h) and the rescale phases
// (server/rescale_participant.h). A running server over it: server/ps_server.h.
#ifndef KESTREL_SERVER_PS_SERVICE_H_
#define KESTREL_SERVER_PS_SERVICE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "common/rpc_metrics.h"
#include "common/peer_identity.h"
#include "common/thread_pool.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps.grpc.pb.h"
#include "server/primary_lease.h"
#include "server/hosted_shards.h"
#include "server/peer_client.h"
#include "server/served_layout.h"
#include "server/shard.h"
#include "server/shard_store.h"

namespace kestrel {

class CheckpointRestore;
class GroupTransfer;
class RescaleParticipant;

// Most calls waiting for a handler thread (PsServerOptions::threads > 0); beyond it calls are answered
// UNAVAILABLE at once, so a flood of requests cannot grow the server's queue without bound.
inline constexpr size_t kMaxQueuedCalls = 4096;

// Most checkpoint, restore, copy and rescale calls waiting for the admin thread; beyond it they are answered
// UNAVAILABLE at once.
inline constexpr size_t kMaxQueuedAdminCalls = 16;

// Adapts the range groups of one server (server/hosted_shards.h) to the ParameterServer service. Handlers run on
// `pool` when given, else inline on gRPC's callback threads; either way they do CPU work only and never wait for
// other calls. Pull and Push, the hot path, are served from raw buffers: pulled rows are written straight into
// the response slice, pushed keys and gradients read straight from the received slices (common/pull_wire.h).
// Requests name their range group (RequestHeader.owner); reads and workers' writes are served by the group's
// primary only.
//
// Replication (docs/replication.md): once a primary has applied a worker's push it forwards the request, as
// received, to the group's backups (Replicate / ReplicateDense), and finishes the worker's call from the last
// forwarding call's callback: OK only when every backup has it, Unavailable otherwise. No thread waits for a
// backup.
//
// Rescale (docs/elasticity.md, RescaleShard): each handler works on the groups it found when it started, so a
// call in flight during a switch finishes on the old groups. A server the new layout leaves out answers data
// calls UNAVAILABLE from then on.
//
// The checkpoint, restore, copy and rescale calls (seconds of disk or network work) run one at a time, in
// arrival order, on the service's own admin thread, never on a gRPC thread. Every call is counted and timed,
// and the own group's statistics are read at every metrics scrape (server/server_metrics.h).
//
// Thread-safe. Owns its collaborators and the admin thread; shares ownership of the groups served; owns neither
// `pool`, `store` nor `peers`, which must outlive it.
class PsServiceImpl final
    : public ParameterServer::WithRawCallbackMethod_Pull<ParameterServer::WithRawCallbackMethod_Push<
          ParameterServer::WithRawCallbackMethod_Replicate<ParameterServer::WithRawCallbackMethod_Step<
              ParameterServer::WithRawCallbackMethod_ReplicateStep<ParameterServer::CallbackService>>>>> {
 public:
  // `store` may be null (no --checkpoint_dir): Checkpoint is then refused, and only Restore to empty tables
  // (a rollback without checkpoints) works. `peers` (may be null without replication) reaches the other
  // servers: backups, and the targets of group copies and rescales.
  PsServiceImpl(std::shared_ptr<HostedShards> hosted, ThreadPool* pool, ShardStore* store = nullptr,
                PeerServers* peers = nullptr);
  ~PsServiceImpl() override;

  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Replicate(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* PullDense(grpc::CallbackServerContext* context, const PullRequest* request,
                                      PullResponse* response) override;
  grpc::ServerUnaryReactor* PushDense(grpc::CallbackServerContext* context, const PushRequest* request,
                                      PushResponse* response) override;
  grpc::ServerUnaryReactor* ReplicateDense(grpc::CallbackServerContext* context, const PushRequest* request,
                                           PushResponse* response) override;
  grpc::ServerUnaryReactor* CreateTable(grpc::CallbackServerContext* context, const CreateTableRequest* request,
                                        CreateTableResponse* response) override;
  grpc::ServerUnaryReactor* DescribeTables(grpc::CallbackServerContext* context,
                                           const DescribeTablesRequest* request,
                                           DescribeTablesResponse* response) override;
  // Server-enforced clocks: one worker step (proto/ps.proto StepRequest): the pushes, then the reads once the
  // clocks they wait for are complete. In a replicated group the received request goes to every backup
  // (ReplicateStep) while the reads wait, and the answer waits for both.
  // Read field by field from the received buffers (common/step_wire.h), the rows written straight into the answer.
  grpc::ServerUnaryReactor* Step(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  // A backup's half of a replicated Step: its pushes (server role only).
  grpc::ServerUnaryReactor* ReplicateStep(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* context, const StatsRequest* request,
                                  StatsResponse* response) override;
  grpc::ServerUnaryReactor* Checkpoint(grpc::CallbackServerContext* context, const CheckpointShardRequest* request,
                                       CheckpointShardResponse* response) override;
  grpc::ServerUnaryReactor* AwaitCheckpoint(grpc::CallbackServerContext* context,
                                            const AwaitCheckpointRequest* request,
                                            CheckpointShardResponse* response) override;
  grpc::ServerUnaryReactor* Restore(grpc::CallbackServerContext* context, const RestoreShardRequest* request,
                                    RestoreShardResponse* response) override;
  grpc::ServerUnaryReactor* CopyGroup(grpc::CallbackServerContext* context, const CopyGroupRequest* request,
                                      CopyGroupResponse* response) override;
  grpc::ServerUnaryReactor* ReceiveGroup(grpc::CallbackServerContext* context, const GroupChunk* request,
                                         GroupChunkResponse* response) override;
  grpc::ServerUnaryReactor* RescaleShard(grpc::CallbackServerContext* context, const RescaleShardRequest* request,
                                         RescaleShardResponse* response) override;

  // The range groups served now (replaced by a rescale's switch).
  std::shared_ptr<HostedShards> hosted() const { return layout_.hosted(); }
  // Replicated jobs: the split-brain fence (server/primary_lease.h). Once enforced, a primary answers workers'
  // reads and writes only while the scheduler has answered a call of this server's sent within the lease; else
  // UNAVAILABLE (the worker re-routes and retries). The lease is renewed from every answered heartbeat and the
  // registration (server/server_session.h). kestrel_server enforces it (unless --unsafe_no_primary_fence, a
  // test hook that shows the split brain it prevents); default off, for servers run without a scheduler
  // (in-process tests).
  PrimaryLease& primary_lease() { return lease_; }
  // The groups served and the layout they are of (what a rescale switches, what the session's job view updates).
  ServedLayout& layout() { return layout_; }
  // Most bytes of rows a group copy being received may stage before it is installed, and of rows a rescale may
  // load into this server's new groups. Set before serving. Default: 16 GiB.
  void set_max_copy_bytes(uint64_t bytes);

 private:
  // The caller's identity (none on a plaintext listener), or an error; see common/peer_identity.h.
  using Caller = std::optional<PeerIdentity>;
  using Done = std::function<void(absl::Status)>;
  using Hosted = std::shared_ptr<HostedShards>;
  // Checks that the caller's certificate is of this job and a role in `allowed`, then runs `work` on the groups
  // served now, which finishes the call by running its `done` exactly once (possibly later, from another
  // call's callback).
  // The split-brain fence: OK unless the fence is on, the primary lease has lapsed and `hosted` (null: the groups
  // served now, read only then) is replicated (UNAVAILABLE). A clock read while the lease holds.
  [[nodiscard]] absl::Status CheckLease(const HostedShards* hosted = nullptr) const;
  // `primary`: a call only a range's primary answers (reads and writes of workers): fenced by CheckLease as
  // its answer leaves too.
  grpc::ServerUnaryReactor* RunAsync(grpc::CallbackServerContext* context, RpcMetrics::Method& rpc,
                                     PeerRoles allowed, const char* method,
                                     std::function<void(const Hosted&, const Caller&, Done done)> work,
                                     bool primary = false);
  // RunAsync for work that finishes the call with its own status.
  grpc::ServerUnaryReactor* Run(grpc::CallbackServerContext* context, RpcMetrics::Method& rpc, PeerRoles allowed,
                                const char* method, std::function<absl::Status(const Hosted&, const Caller&)> work);
  // Runs `work` on the admin thread (one at a time, in arrival order, at most kMaxQueuedAdminCalls waiting)
  // after checking the caller is the scheduler and the header's job.
  grpc::ServerUnaryReactor* RunAdmin(grpc::CallbackServerContext* context, RpcMetrics::Method& rpc,
                                     const char* method, const RequestHeader& header,
                                     std::function<absl::Status(const Hosted&)> work);
  // A table a read waits for.
  struct ReadTable {
    std::string name;
    TableConfig::Kind kind;
  };
  // Finishes a read of `tables` with `serve`'s status: now, or, for a training read with header.wait_clock, once
  // `group`'s clocks allow it on every one of them (server/read_gate.h; Shard::AwaitClocks), on the handler pool.
  // A wait ends before the call's deadline (Unavailable: ask again); no thread waits meanwhile. `header` must
  // outlive the call.
  void ServeWhenClocksAllow(grpc::CallbackServerContext* context, const Hosted& hosted, Shard& group,
                            const RequestHeader& header, std::vector<ReadTable> tables,
                            std::function<absl::Status()> serve, Done done);
  struct ClockWait {
    Hosted hosted;  // keeps `group` alive
    Shard* group = nullptr;
    const RequestHeader* header = nullptr;
    std::vector<ReadTable> tables;
    absl::Time until;
    std::function<absl::Status()> serve;
    Done done;
  };
  // Waits for wait->tables[next..] in turn, then serves (on the pool when `resumed` from a push's thread).
  void AwaitTables(std::shared_ptr<ClockWait> wait, size_t next, bool resumed);
  // Forwards `request` (a push this primary applied to `owner`'s group) as `method` to the group's backups
  // (server/replication.h ForwardToBackups), then runs `done`.
  void Forward(const HostedShards& hosted, const char* method, int owner, const grpc::ByteBuffer& request,
               Done done) const;
  // The group `header` names, when this server is its primary (workers' requests).
  [[nodiscard]] absl::StatusOr<Shard*> PrimaryGroup(const HostedShards& hosted, const RequestHeader& header) const;

  const std::string job_id_;
  ThreadPool* const pool_;
  // Per-method call counts and latencies (kestrel_server_requests_total, ..._request_duration_seconds).
  RpcMetrics::Method &pull_rpc_, &push_rpc_, &pull_dense_rpc_, &push_dense_rpc_, &create_table_rpc_,
      &describe_tables_rpc_, &stats_rpc_, &step_rpc_, &checkpoint_rpc_, &await_checkpoint_rpc_, &restore_rpc_,
      &replicate_rpc_, &copy_group_rpc_,
      &rescale_rpc_;
  ServedLayout layout_;
  PrimaryLease lease_;
  PeerServers* const peers_;
  // The admin thread's work (and, for pieces received, handler threads').
  const std::unique_ptr<GroupTransfer> transfer_;
  const std::unique_ptr<CheckpointRestore> checkpoints_;
  const std::unique_ptr<RescaleParticipant> rescale_;
  // A Step's tables' applies, spread (HandleStepPushes): its own threads, which never wait on pool_, so a
  // handler waiting for them cannot deadlock. Null on a machine of one usable core.
  const std::unique_ptr<ThreadPool> step_tables_;
  // One thread: the checkpoint, restore, copy and rescale calls, in arrival order. Declared after the
  // collaborators its calls use, so that it is joined (its queued calls run) before they go.
  ThreadPool admin_;
  ScrapeHook stats_hook_;  // unregistered before the groups go
  // Ends the reads that waited for their clocks until their deadline, every kExpirePeriod (Shard::ExpireWaits).
  absl::Mutex expire_mu_;
  bool stopping_ ABSL_GUARDED_BY(expire_mu_) = false;
  std::thread expirer_;  // last: joined first
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_PS_SERVICE_H_
