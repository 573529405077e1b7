// kestrel_server: one parameter-server shard.
//
//   kestrel_server --rank=0 --num_servers=2 --port=7100 --job_id=ctr
//
// Holds owner's key ranges of every table, serves the ParameterServer gRPC API and the standard gRPC
// health service, and shuts down cleanly on SIGTERM/SIGINT (in-flight calls get --shutdown_grace to finish).
// With --checkpoint_dir it writes and restores its part of global checkpoints when the scheduler asks; without
// a scheduler, --resume loads the latest committed checkpoint at startup (any number of servers may have
// written it). Exit codes: 0 clean shutdown, 1 runtime error, 2 bad flags or a checkpoint that cannot be
// loaded (missing, truncated or corrupt file: named in the log), 3 refused by the scheduler.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/grpc_scheduler_client.h"
#include "client/scheduler_client.h"
#include "common/checkpoint_layout.h"
#include "common/cluster_env.h"
#include "common/command_line.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/metrics_server.h"
#include "common/metrics_flags.h"
#include "common/partition.h"
#include "common/checkpoint_dir_flag.h"
#include "common/job_id_flag.h"
#include "common/job_shape_flags.h"
#include "common/rank_offset_flag.h"
#include "common/scheduler_flag.h"
#include "common/process_setup.h"
#include "common/tls.h"
#include "common/tls_flags.h"
#include "server/hosted_shards.h"
#include "server/ps_server.h"
#include "server/server_metrics.h"
#include "server/server_session.h"
#include "server/shard.h"
#include "server/shard_store.h"

ABSL_FLAG(std::string, host, "0.0.0.0", "Address to listen on.");
ABSL_FLAG(int, port, 7100, "Port to listen on; 0 picks a free port (see --port_file).");
ABSL_FLAG(std::string, port_file, "",
          "If set, the bound port is written to this file (atomically) once the server is serving.");
ABSL_FLAG(int, rank, -1,
          "This server's index in [0, num_servers). -1: from the environment (KESTREL_RANK, TF_CONFIG, DMLC_*_ID, "
          "the Open MPI / PMI / Slurm rank minus --rank_offset, the Kubernetes StatefulSet ordinal or Indexed Job "
          "index (common/cluster_env.h)), else 0.");
ABSL_FLAG(std::string, partition, "",
          "Explicit key ranges 'first-last:server,...' (hex or decimal) instead of --num_servers and "
          "--ranges_per_server. Clients must use the same partition.");
// Defaults come from the options each flag sets (PsServerOptions, ShardOptions, ServerSessionOptions).
ABSL_FLAG(int, threads, kestrel::PsServerOptions().threads,
          "Request-handling threads: N > 0 runs handlers on a pool of N threads; 0 runs them on gRPC's callback "
          "threads (sized by gRPC from the core count).");
ABSL_FLAG(int, max_message_bytes, kestrel::PsServerOptions().max_message_bytes,
          "Largest gRPC message accepted or sent, in [1 MiB, 1 GiB]. Pulls whose answer would "
          "not fit are refused with INVALID_ARGUMENT before any work.");
ABSL_FLAG(int64_t, max_keys_per_request, static_cast<int64_t>(kestrel::ShardOptions().max_keys_per_request),
          "Largest number of keys in one request (>= 1).");
ABSL_FLAG(int64_t, checkpoint_retained_mb, static_cast<int64_t>(kestrel::ShardOptions().max_cut_retained_bytes >> 20),
          "MiB of row copies a copy-on-write checkpoint cut may keep while it is written (rows pushed before the "
          "writer reached them, as they were at the cut); at the bound pushes wait for the writer. 0: no bound.");
ABSL_FLAG(int64_t, memory_budget_mb, static_cast<int64_t>(kestrel::ShardOptions().memory_budget_bytes >> 20),
          "MiB of memory this server's bounded tables (those whose config has a capacity policy) may hold "
          "together, shared in proportion to their row sizes; a table's own max_memory_bytes caps its share. "
          "0: only the tables' own budgets.");
ABSL_FLAG(int, max_tables, static_cast<int>(kestrel::ShardOptions().max_tables),
          "Most tables this server holds (>= 1).");
ABSL_FLAG(int, max_push_workers, static_cast<int>(kestrel::ShardOptions().max_push_workers),
          "Without --scheduler: the workers whose recent push ids this server remembers, so a retried push is "
          "applied once (each up to 8192 ids; a push from one more worker is refused). With one, the job's "
          "worker count. In [1, 1048576].");
ABSL_FLAG(int, bsp_workers, kestrel::ShardOptions().bsp_workers,
          "0: apply pushes on arrival (SSP/ASP). N > 0: BSP with N workers: each clock's pushes from all N are "
          "combined in rank order, averaged and applied once (clients must run with BSP pushes).");
ABSL_FLAG(std::string, advertise_host, "",
          "Host the scheduler hands to workers for this server. Default: --host, or this machine's hostname "
          "when --host is 0.0.0.0.");
ABSL_FLAG(absl::Duration, scheduler_timeout, kestrel::ServerSessionOptions().scheduler_timeout,
          "How long to retry registering.");
ABSL_FLAG(bool, unsafe_no_primary_fence, !kestrel::ServerSessionOptions().primary_fence,
          "Tests only: in a replicated job, serve as a range's primary without a lease from the scheduler "
          "(docs/replication.md#fencing), which lets a primary cut off from the scheduler answer after a backup took "
          "over.");
ABSL_FLAG(bool, resume, false,
          "Without --scheduler: load the latest committed checkpoint of --checkpoint_dir before serving (a "
          "damaged one is an error, exit 2). With a scheduler, the scheduler's --resume decides.");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(5),
          "On SIGTERM/SIGINT: stop accepting calls, give in-flight calls this long, then cancel the rest (a "
          "handler already running still finishes its table work).");

namespace kestrel {
namespace {

// Resolves --rank, --num_servers and --scheduler: explicit flags first, then the environment the launcher gives
// (common/cluster_env.h). False (logged) when it cannot tell which server this is.
bool ResolveIdentity() {
  ExplicitSettings flags;
  flags.rank = absl::GetFlag(FLAGS_rank);
  flags.num_servers = absl::GetFlag(FLAGS_num_servers);
  flags.scheduler = absl::GetFlag(FLAGS_scheduler);
  flags.rank_offset = absl::GetFlag(FLAGS_rank_offset);
  absl::StatusOr<ClusterIdentity> id =
      ResolveClusterIdentity(ClusterRole::kServer, flags, ProcessEnvironment(), ProcessHostname());
  if (!id.ok()) {
    KLOG(Error) << "cannot tell which server this is: " << id.status();
    return false;
  }
  absl::SetFlag(&FLAGS_rank, id->rank >= 0 ? id->rank : 0);
  absl::SetFlag(&FLAGS_num_servers, id->num_servers > 0 ? id->num_servers : 1);
  absl::SetFlag(&FLAGS_scheduler, id->scheduler);
  if (id->source != "flags" && !id->source.empty()) KLOG(Info) << "identity: " << id->DebugString();
  return true;
}

// The groups this server starts with, from its flags (InvalidArgument for bad ones).
[[nodiscard]] absl::StatusOr<std::unique_ptr<HostedShards>> GroupsFromFlags(int index) {
  if (index >= absl::GetFlag(FLAGS_num_servers) && !absl::GetFlag(FLAGS_scheduler).empty() &&
      absl::GetFlag(FLAGS_partition).empty()) {
    // A rank beyond the job's servers (a scaled-up StatefulSet whose environment still names the old count):
    // it can only join a rescale, whose layout the scheduler hands it (docs/elasticity.md).
    KLOG(Info) << "server " << index << " is beyond --num_servers=" << absl::GetFlag(FLAGS_num_servers)
               << ": it joins the job in a rescale (kestrel scale) or not at all";
    absl::SetFlag(&FLAGS_num_servers, index + 1);
  }
  absl::StatusOr<Partition> partition = UniformPartitionFromFlags(absl::GetFlag(FLAGS_num_servers));
  if (!absl::GetFlag(FLAGS_partition).empty()) {
    partition = Partition::Parse(absl::GetFlag(FLAGS_partition));
    if (partition.ok() && absl::GetFlag(FLAGS_replicas) != 1) {
      partition = partition->WithReplicas(absl::GetFlag(FLAGS_replicas));
    }
  }
  if (!partition.ok()) return absl::InvalidArgumentError(absl::StrCat("bad partition: ", partition.status().message()));
  if (partition->replicas() > 1 && absl::GetFlag(FLAGS_scheduler).empty()) {
    return absl::InvalidArgumentError(
        "--replicas needs --scheduler: the scheduler decides which copy of a range serves it");
  }
  const int max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  const int threads = absl::GetFlag(FLAGS_threads);
  if (max_message_bytes < (1 << 20) || max_message_bytes > (1 << 30) || threads < 0 || threads > 1024 ||
      absl::GetFlag(FLAGS_max_keys_per_request) < 1 || absl::GetFlag(FLAGS_max_tables) < 1 ||
      absl::GetFlag(FLAGS_max_push_workers) < 1 || absl::GetFlag(FLAGS_max_push_workers) > kMaxWorkers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad flags: need --max_message_bytes in [1 MiB, 1 GiB], --threads in [0, 1024], --max_keys_per_request >= 1, "
        "--max_tables >= 1 and --max_push_workers in [1, ", kMaxWorkers, "]"));
  }
  for (const auto& [name, mb] : {std::pair<const char*, int64_t>{"checkpoint_retained_mb",
                                                                  absl::GetFlag(FLAGS_checkpoint_retained_mb)},
                                 {"memory_budget_mb", absl::GetFlag(FLAGS_memory_budget_mb)}}) {
    if (mb < 0 || mb > (int64_t{1} << 30)) {
      return absl::InvalidArgumentError(absl::StrCat("bad flags: --", name, " must be in [0, 2^30]"));
    }
  }
  ShardOptions options;
  options.max_response_bytes = static_cast<size_t>(max_message_bytes) - 4096;  // room for framing
  options.max_tables = static_cast<size_t>(absl::GetFlag(FLAGS_max_tables));
  options.bsp_workers = absl::GetFlag(FLAGS_bsp_workers);
  options.max_push_workers = static_cast<size_t>(absl::GetFlag(FLAGS_max_push_workers));
  options.job_id = absl::GetFlag(FLAGS_job_id);
  options.owner = index;
  options.max_keys_per_request = static_cast<size_t>(absl::GetFlag(FLAGS_max_keys_per_request));
  options.memory_budget_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_memory_budget_mb)) << 20;
  options.max_cut_retained_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_checkpoint_retained_mb)) << 20;
  absl::StatusOr<std::unique_ptr<HostedShards>> created = HostedShards::Create(options, *std::move(partition));
  if (!created.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot create the server's range groups: ", created.status().message()));
  }
  return created;
}

// Opens the checkpoint store of --checkpoint_dir (null without one) as the disk tier of `own`, and with --resume
// and no scheduler loads the latest committed checkpoint into it. The exit code on failure: 1 for a store that
// cannot be opened, 2 for bad flags or a checkpoint that cannot be loaded.
std::optional<int> OpenStore(int index, Shard& own, std::unique_ptr<ShardStore>* store) {
  const std::string dir = absl::GetFlag(FLAGS_checkpoint_dir);
  if (dir.empty()) {
    if (!absl::GetFlag(FLAGS_resume)) return std::nullopt;
    KLOG(Error) << "--resume needs --checkpoint_dir";
    return 2;
  }
  const CheckpointLayout layout(dir);
  absl::StatusOr<std::unique_ptr<ShardStore>> opened = ShardStore::Open(layout, index);
  if (!opened.ok()) {
    KLOG(Error) << "cannot open the checkpoint store: " << opened.status();
    return 1;
  }
  *store = *std::move(opened);
  own.SetColdTier(store->get());  // the disk tier of bounded tables with max_disk_bytes
  if (!absl::GetFlag(FLAGS_resume) || !absl::GetFlag(FLAGS_scheduler).empty()) return std::nullopt;
  absl::StatusOr<std::optional<CheckpointManifest>> latest = layout.ReadLatest();
  absl::Status restored = latest.status();
  if (latest.ok() && latest->has_value()) {
    const absl::Time start = absl::Now();
    restored = (*store)->Restore(*latest, own, /*min_worker_generation=*/0);
    if (restored.ok()) ServerMetrics::Get().restore_duration().Observe(absl::ToDoubleSeconds(absl::Now() - start));
  } else if (latest.ok()) {
    KLOG(Info) << "no checkpoint in " << dir << ": starting empty";
  }
  if (restored.ok()) return std::nullopt;
  KLOG(Error) << "cannot resume server " << index << " from " << dir << ": " << restored;
  return 2;
}

// Where workers and the other servers reach this server: --advertise_host, else --host, else (0.0.0.0) this
// machine's hostname.
std::string AdvertisedAddress(int port) {
  std::string host = absl::GetFlag(FLAGS_advertise_host);
  if (host.empty()) host = absl::GetFlag(FLAGS_host);
  if (host == "0.0.0.0") {
    char name[256] = {0};
    gethostname(name, sizeof(name) - 1);
    host = name;
  }
  return absl::StrCat(host, ":", port);
}

std::string DescribeRanges(const Shard& group) {
  std::vector<std::string> ranges;
  for (const KeyRange& r : group.ranges()) ranges.push_back(r.ToString());
  return absl::StrJoin(ranges, " ");
}

int Run() {
  if (!ResolveIdentity()) return 2;
  const int index = absl::GetFlag(FLAGS_rank);
  SetLogIdentity(absl::StrCat("server[", index, "]"));
  absl::StatusOr<std::unique_ptr<HostedShards>> created = GroupsFromFlags(index);
  if (!created.ok()) {
    KLOG(Error) << created.status().message();
    return 2;
  }
  // The groups this server starts with; a rescale replaces them (server/rescale_participant.h).
  std::shared_ptr<HostedShards> hosted = *std::move(created);
  Shard& own = hosted->own();  // the ranges this server owns; backups' copies live in memory only

  // Metrics first, so that a long --resume can be watched (server/server_metrics.h lists them).
  absl::StatusOr<std::unique_ptr<MetricsServer>> metrics = MetricsServer::Start(MetricsServerOptionsFromFlags());
  if (!metrics.ok()) {
    KLOG(Error) << "--metrics_port: " << metrics.status();
    return absl::IsInvalidArgument(metrics.status()) ? 2 : 1;
  }
  std::unique_ptr<ShardStore> store;
  if (std::optional<int> failed = OpenStore(index, own, &store)) return *failed;
  // A disk tier that fails mid-push leaves a table holding part of it: exit, and let the scheduler restore the
  // job from its last checkpoint (without one, the operator restarts with --resume).
  auto on_tier_failure = [index](const absl::Status& status) {
    KLOG(Error) << "server " << index << ": disk tier failed: " << status << "; exiting so the job is restored";
    std::_Exit(3);
  };
  own.SetFailureListener(on_tier_failure);

  // Block the shutdown signals in every thread; a dedicated wait below receives them.
  BlockShutdownSignals();  // every thread started from here on leaves SIGTERM/SIGINT to the wait below

  const TlsConfig tls = TlsConfigFromFlags();
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> channel_credentials = MakeChannelCredentials(tls);
  if (!channel_credentials.ok()) {
    KLOG(Error) << channel_credentials.status();
    return 2;
  }
  PsServerOptions server_options;
  server_options.address = absl::StrCat(absl::GetFlag(FLAGS_host), ":", absl::GetFlag(FLAGS_port));
  server_options.threads = absl::GetFlag(FLAGS_threads);
  server_options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  server_options.tls = tls;
  server_options.peer_credentials = *channel_credentials;
  auto server = PsServer::Start(server_options, hosted, store.get());
  if (!server.ok()) {
    KLOG(Error) << server.status();
    return absl::IsFailedPrecondition(server.status()) || absl::IsInvalidArgument(server.status()) ? 2 : 1;
  }
  PsServiceImpl& service = (*server)->service();
  // After a rescale: the new own group gets the disk tier and its failure listener.
  service.layout().SetSwitchListener([store = store.get(), on_tier_failure](HostedShards& groups) {
    if (store != nullptr) groups.own().SetColdTier(store);
    groups.own().SetFailureListener(on_tier_failure);
    KLOG(Info) << "key ranges after the rescale: " << DescribeRanges(groups.own());
  });
  KLOG(Info) << "serving job '" << own.job_id() << "' server " << index << " of " << own.partition().num_servers()
             << (own.partition().replicas() > 1 ? absl::StrCat(" (", own.partition().replicas(), " replicas)") : "")
             << " on " << absl::GetFlag(FLAGS_host) << ":" << (*server)->port() << ", key ranges "
             << DescribeRanges(own) << ", " << DescribeTransport(tls);
  // The service holds the groups from here on: a rescale's switch frees them.
  hosted.reset();

  if (absl::Status written = WritePortFile(absl::GetFlag(FLAGS_port_file), (*server)->port()); !written.ok()) {
    KLOG(Error) << "--port_file: " << written;
    return 1;
  }

  // Membership: register with the scheduler and heartbeat; a refused heartbeat stops this server.
  std::atomic<bool> refused{false};
  std::unique_ptr<ServerSession> session;
  if (const std::string address = absl::GetFlag(FLAGS_scheduler); !address.empty()) {
    ServerSessionOptions options;
    options.scheduler = address;
    options.id = index;
    options.address = AdvertisedAddress((*server)->port());
    options.scheduler_timeout = absl::GetFlag(FLAGS_scheduler_timeout);
    options.primary_fence = !absl::GetFlag(FLAGS_unsafe_no_primary_fence);
    options.on_refused = [&refused](absl::Status) {
      refused.store(true);
      kill(getpid(), SIGTERM);
    };
    options.on_removed = [] { kill(getpid(), SIGTERM); };
    SchedulerClientOptions client_options;
    client_options.job_id = absl::GetFlag(FLAGS_job_id);
    absl::StatusOr<std::unique_ptr<ServerSession>> joined = ServerSession::Join(
        std::move(options), NewGrpcSchedulerClient(address, client_options, *channel_credentials),
        {&service.layout(), &service.primary_lease(), &(*server)->peers()});
    if (absl::IsOutOfRange(joined.status())) {  // an elastic job removed this server when it did not come back
      KLOG(Info) << "not rejoining: " << joined.status().message();
      return 0;
    }
    if (!joined.ok()) {
      KLOG(Error) << joined.status().message();
      return absl::IsInvalidArgument(joined.status()) ? 2 : 1;
    }
    session = *std::move(joined);
  }

  const int signal_number = WaitForShutdownSignal();
  KLOG(Info) << "received signal " << signal_number << ", shutting down server " << index;
  (*server)->Shutdown(absl::GetFlag(FLAGS_shutdown_grace));
  (*server)->Wait();
  session.reset();
  const ShardStats stats = service.hosted()->own().Stats();
  KLOG(Info) << "stopped server " << index << ": " << stats.pull_requests << " pulls, " << stats.push_requests
             << " pushes, " << stats.rejected_requests << " rejected";
  return refused.load() ? 3 : 0;
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  kestrel::TuneMallocForLargeBuffers();
  kestrel::ParseCommandLine(argc, argv, "Kestrel parameter server: its key ranges of the job's sparse and dense tables.");
  return kestrel::Run();
}
