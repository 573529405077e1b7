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
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "common/metrics.h"
#include "common/peer_identity.h"
#include "common/thread_pool.h"
#include "common/tls.h"
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/generic/generic_stub.h"
#include "proto/ps.grpc.pb.h"
#include "server/hosted_shards.h"
#include "server/shard.h"
#include "server/shard_store.h"

namespace kestrel {

// The other servers of a replicated job, as a primary reaches them to forward updates: one channel per server,
// replaced when its address changes. Thread-safe.
class PeerServers {
 public:
  // `credentials`: the channels' (common/tls.h); null: plaintext. `num_servers`: the job's.
  PeerServers(std::shared_ptr<grpc::ChannelCredentials> credentials, int num_servers);
  // A rescale changed the job's server count: addresses beyond it are dropped, new ranks start unknown.
  void Resize(int num_servers);
  // By server index: the address each serves on ("" while unknown); entries beyond num_servers are ignored.
  void SetAddresses(const std::vector<std::string>& addresses);
  // The stub of `server`, or null while its address is unknown.
  std::shared_ptr<grpc::GenericStub> Stub(int server) const;
  // What the channels authenticate with (for a channel to a server the scheduler names).
  const std::shared_ptr<grpc::ChannelCredentials>& credentials() const { return credentials_; }

 private:
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  mutable absl::Mutex mu_;
  size_t num_servers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<grpc::GenericStub>> stubs_ ABSL_GUARDED_BY(mu_);
};

// Adapts the range groups of one server (server/hosted_shards.h) to the ParameterServer service (gRPC callback
// API). Thread-safe; owns neither the groups nor the pool. Handlers run on `pool` when given, else inline on
// gRPC's callback threads; either way they do CPU work only and never wait for other calls. Pull and Push,
// the hot path, are served from raw buffers: pulled rows are written straight into the response slice, pushed
// keys and gradients read straight from the received slices (common/pull_wire.h). Requests name their range
// group (RequestHeader.owner); reads and workers' writes are served by the group's primary only.
//
// Replication (docs/replication.md): once a primary has applied a worker's push it forwards the request, as
// received, to the group's backups (Replicate / ReplicateDense), and finishes the worker's call from the last
// forwarding call's callback: OK only when every backup has it, Unavailable otherwise (the worker retries; a
// retried push is applied once everywhere). No thread waits for a backup.
//
// Rescale (docs/elasticity.md, RescaleShard): the groups held are swapped whole at the switch; each handler
// works on the set it found when it started (a shared_ptr snapshot), so a call in flight during a switch
// finishes on the old groups. A server the new layout leaves out answers data calls UNAVAILABLE from then on.
//
// The checkpoint admin calls (Checkpoint, Restore: seconds of disk work) run one at a time on their own
// thread, never on a gRPC thread. Every call is counted and timed, and the own group's statistics are read at
// every metrics scrape (server/server_metrics.h).
class PsServiceImpl final
    : public ParameterServer::WithRawCallbackMethod_Pull<ParameterServer::WithRawCallbackMethod_Push<
          ParameterServer::WithRawCallbackMethod_Replicate<ParameterServer::CallbackService>>> {
 public:
  // `store` may be null (no --checkpoint_dir): Checkpoint is then refused, and only Restore to empty tables
  // (a rollback without checkpoints) works. `peers` (may be null without replication) reaches the backups.
  PsServiceImpl(std::shared_ptr<HostedShards> hosted, ThreadPool* pool, ShardStore* store = nullptr,
                PeerServers* peers = nullptr, absl::Duration forward_deadline = absl::Seconds(10));

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
  grpc::ServerUnaryReactor* DescribeTables(grpc::CallbackServerContext* context, const DescribeTablesRequest* request,
                                 DescribeTablesResponse* response) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* context, const StatsRequest* request,
                                 StatsResponse* response) override;
  grpc::ServerUnaryReactor* Checkpoint(grpc::CallbackServerContext* context, const CheckpointShardRequest* request,
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
  std::shared_ptr<HostedShards> hosted() const;
  // The rescales this server has switched to (0: the layout it started with).
  uint64_t layout_generation() const;
  // The last rescale left this server out: it serves nothing.
  bool left() const;
  // The scheduler's job view and the generation listener, for the groups served now and after every switch
  // (HostedShards::SetJobView / SetGenerationListener). `layout_generation`: the layout the view is of (a
  // HeartbeatResponse's); a view of an older layout than the one served is ignored (it was in flight across a
  // switch, and names the ranks as they were). `worker_ids`: by worker rank, the id each worker's certificate
  // names (ClusterView.worker_ids; empty: every worker's id is its rank), which workers' requests are checked
  // against.
  void SetJobView(uint64_t job_generation, const std::vector<uint64_t>& worker_generations,
                  uint64_t layout_generation, const std::vector<int>& worker_ids);
  void SetGenerationListener(std::function<void()> listener);
  // Runs after every switch with the new groups (e.g. to attach the disk tier and failure listener).
  void SetSwitchListener(std::function<void(HostedShards&)> listener);
  // Before serving anything (a server registering with a job rescaled since it started): serve `groups`, the
  // layout of rescale `layout_generation`, instead of the ones it started with. `worker_ids`: as for SetJobView.
  void AdoptLayout(std::shared_ptr<HostedShards> groups, uint64_t layout_generation,
                   const std::vector<int>& worker_ids);

  // Most bytes of rows a group copy being received may stage before it is installed, and of rows a rescale may
  // load into this server's new groups. Default: 16 GiB.
  void set_max_copy_bytes(uint64_t bytes) { max_copy_bytes_ = bytes; }

 private:
  // The caller's identity (none on a plaintext listener), or an error; see common/peer_identity.h.
  using Caller = std::optional<PeerIdentity>;
  using Done = std::function<void(absl::Status)>;
  using Hosted = std::shared_ptr<HostedShards>;
  // Checks that the caller's certificate is of this job and a role in `allowed`, then runs `work` on the groups
  // served now, which finishes the call by running its `done` exactly once (possibly later, from another
  // call's callback).
  grpc::ServerUnaryReactor* RunAsync(grpc::CallbackServerContext* context, RpcMetrics::Method& rpc,
                                     PeerRoles allowed, const char* method,
                                     std::function<void(const Hosted&, const Caller&, Done done)> work);
  // RunAsync for work that finishes the call with its own status.
  grpc::ServerUnaryReactor* Run(grpc::CallbackServerContext* context, RpcMetrics::Method& rpc, PeerRoles allowed,
                                const char* method, std::function<absl::Status(const Hosted&, const Caller&)> work);
  // Runs `work` on the admin thread (one at a time, in arrival order, at most 16 waiting) after checking the
  // caller is the scheduler and the header's job.
  grpc::ServerUnaryReactor* RunAdmin(grpc::CallbackServerContext* context, RpcMetrics::Method& rpc,
                                     const char* method, const RequestHeader& header,
                                     std::function<absl::Status(const Hosted&)> work);
  // PERMISSION_DENIED unless a worker caller's certificate names the id of the worker rank its request claims
  // (common/peer_identity.h CheckClaimedRank, through the layout's worker ids).
  absl::Status CheckWorkerCaller(const Caller& caller, int worker_rank, const char* what) const;
  void SetWorkerIdsLocked(std::vector<int> ids) ABSL_EXCLUSIVE_LOCKS_REQUIRED(layout_mu_);
  // InvalidArgument for more worker ids than a job may have workers (a layout from the network).
  static absl::Status CheckWorkerIds(size_t count);
  // FailedPrecondition when a table keeps rows on disk: a new layout is built in memory only.
  static absl::Status CheckNoDiskTier(const HostedShards& hosted);
  // FailedPrecondition (counted) unless the job is replicated: Replicate has no business here otherwise.
  static absl::Status CheckReplicated(const HostedShards& hosted);
  // The group `header` names, when this server is its primary (workers' requests).
  absl::StatusOr<Shard*> PrimaryGroup(const HostedShards& hosted, const RequestHeader& header) const;
  // Sends `request` (a PushRequest's bytes) as `method` to the backups of `owner`'s group, then runs `done`:
  // OK when each acknowledged it, else the first failure as Unavailable. At once when there are none.
  void Forward(const HostedShards& hosted, const char* method, int owner, const grpc::ByteBuffer& request, Done done);

  const std::string job_id_;
  ThreadPool* const pool_;
  ShardStore* const store_;
  PeerServers* const peers_;
  const absl::Duration forward_deadline_;
  // Per-method call counts and latencies (kestrel_server_requests_total, ..._request_duration_seconds).
  RpcMetrics::Method &pull_rpc_, &push_rpc_, &pull_dense_rpc_, &push_dense_rpc_, &create_table_rpc_,
      &describe_tables_rpc_, &stats_rpc_, &checkpoint_rpc_, &restore_rpc_, &replicate_rpc_, &copy_group_rpc_, &rescale_rpc_;
  // Rows being received: a group copy (re-replication) or a rescale's rows from one sender.
  struct Piece {
    int owner = -1;
    std::string table;
    std::string keys, rows;
  };
  struct IncomingCopy {
    int owner = -1;
    uint64_t next_sequence = 0;
    std::vector<TableConfig> tables;
    std::vector<Piece> pieces;
    bool done = false;  // its last piece arrived
  };
  // A rescale's new groups, built from the first piece received and loaded as rows arrive, until INSTALL hands
  // them over (once every sender's last piece arrived).
  struct IncomingLayout {
    uint64_t generation = 0;
    uint64_t attempt = 0;
    std::string partition;  // the pieces' (all must agree)
    int bsp_workers = 0;
    int rank = -1;  // this server's in the new layout (the pieces' recipient: all must agree)
    std::shared_ptr<HostedShards> groups;
    struct Sender {
      uint64_t next_sequence = 0;  // pieces accepted
      uint64_t loaded = 0;         // of which: rows loaded
      bool done = false;           // its last piece is in
    };
    std::map<int, Sender> senders;
    uint64_t bytes = 0;  // of rows loaded (bounded by max_copy_bytes_)
  };
  // Checks one piece against `copy` (its sequence, tables, whole rows, the staging bound) and stages it.
  absl::Status StagePiece(const GroupChunk& chunk, IncomingCopy* copy) ABSL_EXCLUSIVE_LOCKS_REQUIRED(copy_mu_);
  // Replaces `group`'s state with the rows of `pieces` (InvalidArgument for a row outside its ranges); returns
  // the rows installed.
  static absl::StatusOr<uint64_t> Install(Shard& group, const std::vector<TableConfig>& tables,
                                          const std::vector<const Piece*>& pieces);
  void DropCopyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(copy_mu_);
  void DropLayoutLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(copy_mu_) { incoming_layout_.reset(); }
  // A rescale's piece: builds the new groups from the first one, loads the rows into them.
  absl::Status ReceiveRescale(const HostedShards& hosted, const GroupChunk& chunk);
  // Stages one piece; installs a group copy with its last one (into *installed: rows).
  absl::Status Receive(const HostedShards& hosted, const GroupChunk& chunk, uint64_t* installed);
  // Sends `owner`'s group, whole, to the server at `target_address` (CopyGroup, on the admin thread).
  absl::Status SendGroup(const HostedShards& hosted, const CopyGroupRequest& request, CopyGroupResponse* response);
  // The rescale phases (RescaleShard, on the admin thread). CheckRescale: the new layout, if this server can
  // move to it.
  absl::StatusOr<Partition> CheckRescale(const HostedShards& hosted, const RescaleShardRequest& request) const;
  absl::Status RescaleSend(const HostedShards& hosted, const RescaleShardRequest& request,
                           RescaleShardResponse* response);
  absl::Status RescaleInstall(const HostedShards& hosted, const RescaleShardRequest& request,
                              RescaleShardResponse* response);
  absl::Status RescaleSwitch(const HostedShards& hosted, const RescaleShardRequest& request);
  // SWITCH with keep_groups: the groups stay, BSP's worker count changes in place.
  absl::Status SwitchInPlace(const HostedShards& hosted, const RescaleShardRequest& request);
  void RescaleAbort(uint64_t generation, uint64_t attempt);
  // FENCE and COMPLETE (removed BSP workers' half-done clock) on every group held; CheckSettle: the request may
  // act here (the rescale is ahead of this server's layout, which it has not left).
  absl::Status CheckSettle(const RescaleShardRequest& request) const;
  absl::Status RescaleFence(const HostedShards& hosted, const RescaleShardRequest& request,
                            RescaleShardResponse* response);
  absl::Status RescaleComplete(const HostedShards& hosted, const RescaleShardRequest& request,
                               RescaleShardResponse* response);
  // Restore into a new layout (RestoreShardRequest.layout_generation): builds the groups of rank `rank` of it.
  absl::StatusOr<Hosted> GroupsForRestore(const HostedShards& hosted, const RestoreShardRequest& request) const;

  mutable absl::Mutex layout_mu_;
  Hosted hosted_ ABSL_GUARDED_BY(layout_mu_);
  uint64_t layout_generation_ ABSL_GUARDED_BY(layout_mu_) = 0;
  bool left_ ABSL_GUARDED_BY(layout_mu_) = false;
  bool job_view_set_ ABSL_GUARDED_BY(layout_mu_) = false;   // SetJobView ran
  uint64_t job_generation_ ABSL_GUARDED_BY(layout_mu_) = 0;  // the last job view (SetJobView)
  std::vector<uint64_t> worker_generations_ ABSL_GUARDED_BY(layout_mu_);
  // By worker rank, each worker's id (null: id == rank). Written under layout_mu_ (atomic_store), read without it
  // (atomic_load) on the hot path.
  std::shared_ptr<const std::vector<int>> worker_ids_;
  std::function<void()> generation_listener_ ABSL_GUARDED_BY(layout_mu_);
  std::function<void(HostedShards&)> switch_listener_ ABSL_GUARDED_BY(layout_mu_);
  // Admin thread only: the new layout's groups, complete since INSTALL, served from SWITCH.
  uint64_t next_generation_ = 0;
  Hosted next_;

  absl::Mutex copy_mu_;
  std::optional<IncomingCopy> incoming_ ABSL_GUARDED_BY(copy_mu_);
  std::optional<IncomingLayout> incoming_layout_ ABSL_GUARDED_BY(copy_mu_);
  // The last rescale attempt aborted here, (generation, attempt): its late pieces are refused.
  std::pair<uint64_t, uint64_t> aborted_ ABSL_GUARDED_BY(copy_mu_) = {0, 0};
  uint64_t staged_bytes_ ABSL_GUARDED_BY(copy_mu_) = 0;  // in incoming_ and incoming_layout_
  uint64_t max_copy_bytes_ = uint64_t{16} << 30;
  ThreadPool admin_;  // one thread: checkpoint, restore, copy and rescale calls, in arrival order (at most 16 waiting)
  ScrapeHook stats_hook_;  // last: unregistered first, while the groups are still in use
};

// Most servers a rescale may name (common/partition.h's bound).
inline constexpr int kMaxServers = 65536;
// Most workers a layout may name (the scheduler's bound).
inline constexpr int kMaxWorkerIds = 1 << 20;

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
  // Replicated jobs: the credentials a primary reaches its backups with (common/tls.h
  // MakeChannelCredentials). Default: null, plaintext.
  std::shared_ptr<grpc::ChannelCredentials> peer_credentials;
  // How long a primary waits for a backup to acknowledge a forwarded update. Default: 10 s.
  absl::Duration forward_deadline = absl::Seconds(10);
};

// A started gRPC server for one server's range groups, with the standard gRPC health service (grpc.health.v1.Health) reporting
// SERVING for "" and "kestrel.ParameterServer". Thread-safe.
class PsServer {
 public:
  // `store` (optional) serves the checkpoint admin calls; it must outlive the server.
  static absl::StatusOr<std::unique_ptr<PsServer>> Start(const PsServerOptions& options,
                                                         std::shared_ptr<HostedShards> hosted,
                                                         ShardStore* store = nullptr);
  // Groups the caller owns and keeps alive for the server's life (tests, tools).
  static absl::StatusOr<std::unique_ptr<PsServer>> Start(const PsServerOptions& options, HostedShards* hosted,
                                                         ShardStore* store = nullptr);
  // One unreplicated Shard (tests, tools).
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
  // Replicated jobs: where the other servers serve (by server index, "" while unknown), from the scheduler.
  void SetPeerAddresses(const std::vector<std::string>& addresses) { peers_->SetAddresses(addresses); }
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

#endif  // KESTREL_SERVER_PS_SERVICE_H_
