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
#include <chrono>

#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/limits.h"
#include "common/command_line.h"
#include "common/process_flags.h"
#include "common/consistency.h"
#include "common/cluster_env.h"
#include "common/logging.h"
#include "common/tls.h"
#include "common/metrics_flags.h"
#include "common/tls_flags.h"
#include "common/metrics.h"
#include "common/partition.h"
#include "common/process_setup.h"
#include "server/ps_server.h"
#include "server/server_metrics.h"
#include "client/grpc_scheduler_client.h"
#include "client/heartbeater.h"
#include "client/routing_announcement.h"
#include "client/scheduler_client.h"
#include "server/hosted_shards.h"
#include "server/shard.h"
#include "server/shard_store.h"
#include "common/checkpoint_layout.h"

ABSL_FLAG(std::string, host, "0.0.0.0", "Address to listen on.");
ABSL_FLAG(int, port, 7100, "Port to listen on; 0 picks a free port (see --port_file).");
ABSL_FLAG(std::string, port_file, "",
          "If set, the bound port is written to this file (atomically) once the server is serving.");
ABSL_FLAG(int, rank, -1,
          "This server's index in [0, num_servers). -1: from the environment (KESTREL_RANK, TF_CONFIG, DMLC_*_ID, the Open MPI / PMI / Slurm rank minus --rank_offset, the Kubernetes StatefulSet ordinal or Indexed Job index (common/cluster_env.h)), else 0.");
ABSL_FLAG(int, num_servers, -1,
          "Number of servers the key space is split across. -1: from the environment (KESTREL_NUM_SERVERS, "
          "TF_CONFIG, DMLC_NUM_SERVER), else 1.");
ABSL_FLAG(int, ranges_per_server, 1,
          "Key ranges per server: the key space is cut into num_servers * ranges_per_server equal ranges, dealt "
          "round-robin.");
ABSL_FLAG(std::string, partition, "",
          "Explicit key ranges 'first-last:server,...' (hex or decimal) instead of --num_servers and "
          "--ranges_per_server. Clients must use the same partition.");
ABSL_FLAG(int, replicas, 1,
          "Copies of every key range, on distinct servers (docs/replication.md): 1 (default) none; R >= 2 makes this "
          "server also hold the backups of the ranges of the R-1 servers before it, and a server's death fail "
          "over to a backup instead of rolling the job back. Must equal the scheduler's --replicas.");
ABSL_FLAG(int, threads, 0,
          "Request-handling threads: N > 0 runs handlers on a pool of N threads; 0 runs them on gRPC's callback "
          "threads (sized by gRPC from the core count).");
ABSL_FLAG(int, max_message_bytes, 64 << 20,
          "Largest gRPC message accepted or sent, in [1 MiB, 1 GiB] (default 64 MiB). Pulls whose answer would "
          "not fit are refused with INVALID_ARGUMENT before any work.");
ABSL_FLAG(int64_t, max_keys_per_request, int64_t{1} << 22, "Largest number of keys in one request (>= 1).");
ABSL_FLAG(int64_t, checkpoint_retained_mb, 512,
          "MiB of row copies a copy-on-write checkpoint cut may keep while it is written (rows pushed before the "
          "writer reached them, as they were at the cut); at the bound pushes wait for the writer. 0: no bound.");
ABSL_FLAG(int64_t, memory_budget_mb, 0,
          "MiB of memory this server's bounded tables (those whose config has a capacity policy) may hold "
          "together, shared in proportion to their row sizes; a table's own max_memory_bytes caps its share. "
          "0: only the tables' own budgets. Default: 0.");
ABSL_FLAG(int, max_tables, 1024, "Most tables this server holds (>= 1).");
ABSL_FLAG(int, max_push_workers, 256,
          "Without --scheduler: the workers whose recent push ids this server remembers, so a retried push is "
          "applied once (each up to 8192 ids; a push from one more worker is refused). With one, the job's "
          "worker count. In [1, 1048576]; default 256.");
ABSL_FLAG(int, bsp_workers, 0,
          "0: apply pushes on arrival (SSP/ASP). N > 0: BSP with N workers: each clock's pushes from all N are "
          "combined in rank order, averaged and applied once (clients must run with BSP pushes).");
ABSL_FLAG(std::string, advertise_host, "",
          "Host the scheduler hands to workers for this server. Default: --host, or this machine's hostname "
          "when --host is 0.0.0.0.");
ABSL_FLAG(absl::Duration, scheduler_timeout, absl::Seconds(30), "How long to retry registering.");
ABSL_FLAG(bool, unsafe_no_primary_fence, false,
          "Tests only: in a replicated job, serve as a range's primary without a lease from the scheduler "
          "(docs/replication.md#fencing), which lets a primary cut off from the scheduler answer after a backup took "
          "over. Default false: fenced.");
ABSL_FLAG(bool, resume, false,
          "Without --scheduler: load the latest committed checkpoint of --checkpoint_dir before serving (a "
          "damaged one is an error, exit 2). With a scheduler, the scheduler's --resume decides.");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(5),
          "On SIGTERM/SIGINT: stop accepting calls, give in-flight calls this long, then cancel the rest (a "
          "handler already running still finishes its table work).");

namespace kestrel {
namespace {

int Run() {
  {  // Identity: explicit flags first, then the environment the launcher gives (common/cluster_env.h).
    ExplicitSettings flags;
    flags.rank = absl::GetFlag(FLAGS_rank);
    flags.num_servers = absl::GetFlag(FLAGS_num_servers);
    flags.scheduler = absl::GetFlag(FLAGS_scheduler);
    flags.rank_offset = absl::GetFlag(FLAGS_rank_offset);
    absl::StatusOr<ClusterIdentity> id =
        ResolveClusterIdentity(ClusterRole::kServer, flags, ProcessEnvironment(), ProcessHostname());
    if (!id.ok()) {
      KLOG(Error) << "cannot tell which server this is: " << id.status();
      return 2;
    }
    absl::SetFlag(&FLAGS_rank, id->rank >= 0 ? id->rank : 0);
    absl::SetFlag(&FLAGS_num_servers, id->num_servers > 0 ? id->num_servers : 1);
    absl::SetFlag(&FLAGS_scheduler, id->scheduler);
    if (id->source != "flags" && !id->source.empty()) KLOG(Info) << "identity: " << id->DebugString();
  }
  const int index = absl::GetFlag(FLAGS_rank);
  SetLogIdentity(absl::StrCat("server[", index, "]"));
  if (index >= absl::GetFlag(FLAGS_num_servers) && !absl::GetFlag(FLAGS_scheduler).empty() &&
      absl::GetFlag(FLAGS_partition).empty()) {
    // A rank beyond the job's servers (a scaled-up StatefulSet whose environment still names the old count):
    // it can only join a rescale, whose layout the scheduler hands it (docs/elasticity.md).
    KLOG(Info) << "server " << index << " is beyond --num_servers=" << absl::GetFlag(FLAGS_num_servers)
               << ": it joins the job in a rescale (kestrel scale) or not at all";
    absl::SetFlag(&FLAGS_num_servers, index + 1);
  }
  absl::StatusOr<Partition> partition = absl::GetFlag(FLAGS_partition).empty()
                                            ? Partition::Uniform(absl::GetFlag(FLAGS_num_servers),
                                                                 absl::GetFlag(FLAGS_ranges_per_server))
                                            : Partition::Parse(absl::GetFlag(FLAGS_partition));
  if (partition.ok() && absl::GetFlag(FLAGS_replicas) != 1) {
    partition = partition->WithReplicas(absl::GetFlag(FLAGS_replicas));
  }
  if (!partition.ok()) {
    KLOG(Error) << "bad partition: " << partition.status();
    return 2;
  }
  if (partition->replicas() > 1 && absl::GetFlag(FLAGS_scheduler).empty()) {
    KLOG(Error) << "--replicas needs --scheduler: the scheduler decides which copy of a range serves it";
    return 2;
  }
  const int max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  const int threads = absl::GetFlag(FLAGS_threads);
  if (max_message_bytes < (1 << 20) || max_message_bytes > (1 << 30) || threads < 0 || threads > 1024 ||
      absl::GetFlag(FLAGS_max_keys_per_request) < 1 || absl::GetFlag(FLAGS_max_tables) < 1 ||
      absl::GetFlag(FLAGS_max_push_workers) < 1 || absl::GetFlag(FLAGS_max_push_workers) > kMaxWorkers) {
    KLOG(Error) << "bad flags: need --max_message_bytes in [1 MiB, 1 GiB], --threads in [0, 1024], "
                   "--max_keys_per_request >= 1, --max_tables >= 1 and --max_push_workers in [1, "
                << kMaxWorkers << "]";
    return 2;
  }
  ShardOptions shard_options;
  shard_options.max_response_bytes = static_cast<size_t>(max_message_bytes) - 4096;  // room for framing
  shard_options.max_tables = static_cast<size_t>(absl::GetFlag(FLAGS_max_tables));
  shard_options.bsp_workers = absl::GetFlag(FLAGS_bsp_workers);
  shard_options.max_push_workers = static_cast<size_t>(absl::GetFlag(FLAGS_max_push_workers));
  shard_options.job_id = absl::GetFlag(FLAGS_job_id);
  shard_options.owner = index;
  shard_options.max_keys_per_request = static_cast<size_t>(absl::GetFlag(FLAGS_max_keys_per_request));
  if (absl::GetFlag(FLAGS_checkpoint_retained_mb) < 0 || absl::GetFlag(FLAGS_checkpoint_retained_mb) > (int64_t{1} << 30)) {
    KLOG(Error) << "bad flags: --checkpoint_retained_mb must be in [0, 2^30]";
    return 2;
  }
  if (absl::GetFlag(FLAGS_memory_budget_mb) < 0 || absl::GetFlag(FLAGS_memory_budget_mb) > (int64_t{1} << 30)) {
    KLOG(Error) << "bad flags: --memory_budget_mb must be in [0, 2^30]";
    return 2;
  }
  shard_options.memory_budget_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_memory_budget_mb)) << 20;
  shard_options.max_cut_retained_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_checkpoint_retained_mb)) << 20;
  absl::StatusOr<std::unique_ptr<HostedShards>> created = HostedShards::Create(shard_options, *std::move(partition));
  if (!created.ok()) {
    KLOG(Error) << "cannot create shard: " << created.status();
    return 2;
  }
  // The groups this server starts with; a rescale replaces them (server/rescale_participant.h).
  std::shared_ptr<HostedShards> hosted = *std::move(created);
  Shard* const own = &hosted->own();  // the ranges this server owns; backups' copies live in memory only

  // Metrics first, so that a long --resume can be watched (server/server_metrics.h lists them).
  absl::StatusOr<std::unique_ptr<MetricsServer>> metrics = MetricsServer::Start(MetricsServerOptionsFromFlags());
  if (!metrics.ok()) {
    KLOG(Error) << "--metrics_port: " << metrics.status();
    return absl::IsInvalidArgument(metrics.status()) ? 2 : 1;
  }

  std::unique_ptr<ShardStore> store;
  if (const std::string dir = absl::GetFlag(FLAGS_checkpoint_dir); !dir.empty()) {
    const CheckpointLayout layout(dir);
    auto opened = ShardStore::Open(layout, index);
    if (!opened.ok()) {
      KLOG(Error) << "cannot open the checkpoint store: " << opened.status();
      return 1;
    }
    store = std::move(opened).value();
    own->SetColdTier(store.get());  // the disk tier of bounded tables with max_disk_bytes
    if (absl::GetFlag(FLAGS_resume) && absl::GetFlag(FLAGS_scheduler).empty()) {
      absl::StatusOr<std::optional<CheckpointManifest>> latest = layout.ReadLatest();
      absl::Status restored = latest.status();
      if (latest.ok() && latest->has_value()) {
        const absl::Time start = absl::Now();
        restored = store->Restore(*latest, *own, /*min_worker_generation=*/0);
        if (restored.ok()) ServerMetrics::Get().restore_duration().Observe(absl::ToDoubleSeconds(absl::Now() - start));
      } else if (latest.ok()) {
        KLOG(Info) << "no checkpoint in " << dir << ": starting empty";
      }
      if (!restored.ok()) {
        KLOG(Error) << "cannot resume shard " << index << " from " << dir << ": " << restored;
        return 2;
      }
    }
  } else if (absl::GetFlag(FLAGS_resume)) {
    KLOG(Error) << "--resume needs --checkpoint_dir";
    return 2;
  }
  // A disk tier that fails mid-push leaves a table holding part of it: exit, and let the scheduler restore the
  // job from its last checkpoint (without one, the operator restarts with --resume).
  auto on_tier_failure = [index](const absl::Status& status) {
    KLOG(Error) << "shard " << index << ": disk tier failed: " << status << "; exiting so the job is restored";
    std::_Exit(3);
  };
  own->SetFailureListener(on_tier_failure);

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
  server_options.threads = threads;
  server_options.max_message_bytes = max_message_bytes;
  server_options.tls = tls;
  server_options.peer_credentials = *channel_credentials;
  auto server = PsServer::Start(server_options, hosted, store.get());
  if (!server.ok()) {
    KLOG(Error) << server.status();
    return absl::IsFailedPrecondition(server.status()) || absl::IsInvalidArgument(server.status()) ? 2 : 1;
  }
  PsServiceImpl& service = (*server)->service();
  // The service holds the groups from here on: a rescale's switch frees them. (`own` is used only until this
  // server has registered, before any switch.)
  hosted.reset();
  // After a rescale: the new own group gets the disk tier and its failure listener.
  service.SetSwitchListener([store = store.get(), on_tier_failure](HostedShards& groups) {
    if (store != nullptr) groups.own().SetColdTier(store);
    groups.own().SetFailureListener(on_tier_failure);
    std::vector<std::string> ranges;
    for (const KeyRange& r : groups.own().ranges()) ranges.push_back(r.ToString());
    KLOG(Info) << "key ranges after the rescale: " << absl::StrJoin(ranges, " ");
  });
  std::vector<std::string> ranges;
  for (const KeyRange& r : own->ranges()) ranges.push_back(r.ToString());
  KLOG(Info) << "serving job '" << shard_options.job_id << "' shard " << index << " of "
             << own->partition().num_servers() << (own->partition().replicas() > 1
                                                      ? absl::StrCat(" (", own->partition().replicas(), " replicas)")
                                                      : "")
             << " on " << absl::GetFlag(FLAGS_host) << ":"
             << (*server)->port() << ", key ranges " << absl::StrJoin(ranges, " ") << ", "
             << DescribeTransport(tls);

  if (absl::Status written = WritePortFile(absl::GetFlag(FLAGS_port_file), (*server)->port()); !written.ok()) {
    KLOG(Error) << "--port_file: " << written;
    return 1;
  }

  // Membership: register with the scheduler and heartbeat; a refused heartbeat stops this server.
  std::unique_ptr<SchedulerClient> scheduler;
  std::unique_ptr<Heartbeater> heartbeater;
  static std::atomic<bool> refused{false};
  static std::atomic<bool> removed{false};  // a rescale left this server out: it exits 0
  if (const std::string address = absl::GetFlag(FLAGS_scheduler); !address.empty()) {
    SchedulerClientOptions client_options;
    client_options.job_id = shard_options.job_id;
    scheduler = NewGrpcSchedulerClient(address, client_options, *channel_credentials);
    std::string host = absl::GetFlag(FLAGS_advertise_host);
    if (host.empty()) host = absl::GetFlag(FLAGS_host);
    if (host == "0.0.0.0") {
      char name[256] = {0};
      gethostname(name, sizeof(name) - 1);
      host = name;
    }
    const std::string advertised = absl::StrCat(host, ":", (*server)->port());
    absl::StatusOr<RegisterResponse> registration;
    const absl::Time deadline = absl::Now() + absl::GetFlag(FLAGS_scheduler_timeout);
    std::chrono::steady_clock::time_point sent;
    do {
      sent = std::chrono::steady_clock::now();
      registration = scheduler->Register(ROLE_SERVER, advertised, index);
      // UNAVAILABLE: the scheduler is not up yet. ALREADY_EXISTS: our previous incarnation (a crash moments
      // ago) has not been declared dead yet.
      if (registration.ok() ||
          !(absl::IsUnavailable(registration.status()) || absl::IsAlreadyExists(registration.status()))) {
        break;
      }
      absl::SleepFor(absl::Milliseconds(500));
    } while (absl::Now() < deadline);
    if (absl::IsOutOfRange(registration.status())) {  // an elastic job removed this server when it did not come back
      KLOG(Info) << "not rejoining: " << registration.status().message();
      return 0;
    }
    if (!registration.ok()) {
      KLOG(Error) << "cannot register with the scheduler at " << address << ": " << registration.status();
      return 1;
    }
    const ClusterView& view = registration->view();
    const absl::Duration lease = PrimaryLease::LengthFor(absl::Milliseconds(view.heartbeat_interval_ms()));
    service.primary_lease().Renew(sent, lease);
    if (absl::GetFlag(FLAGS_unsafe_no_primary_fence)) {
      KLOG(Warning) << "--unsafe_no_primary_fence: this server serves as a primary without a lease from the "
                    << "scheduler; cut off, it may answer after a backup took over (split brain). Tests only.";
    } else {
      service.EnablePrimaryFence();
    }
    absl::StatusOr<ConsistencyPolicy> consistency = ConsistencyPolicy::FromProto(view.consistency(), view.staleness());
    if (!consistency.ok()) {
      KLOG(Error) << "the scheduler at " << address << " announced no valid consistency: " << consistency.status();
      return 1;
    }
    const bool bsp = consistency->bsp();
    // The rank is this server's place in the job's layout: its id (--rank) unless a rescale removed a
    // lower rank (docs/elasticity.md).
    const int rank = registration->rank();
    if (registration->joining()) {
      KLOG(Info) << "joining the job in a rescale to " << own->partition().num_servers()
                 << " servers: the ranges arrive from the other servers";
    } else if ((view.layout_generation() > 0 || rank != index) &&
               (view.partition() != own->partition().ToString() ||
                shard_options.bsp_workers != (bsp ? view.num_workers() : 0) || rank != own->owner())) {
      // The job was rescaled since it started: its layout is the scheduler's, not this server's flags.
      absl::StatusOr<Partition> adopted = Partition::Parse(view.partition());
      ShardOptions options = shard_options;
      options.bsp_workers = bsp ? view.num_workers() : 0;
      options.owner = rank;
      absl::StatusOr<std::unique_ptr<HostedShards>> groups =
          adopted.ok() ? HostedShards::Create(options, *adopted) : adopted.status();
      if (!groups.ok()) {
        KLOG(Error) << "cannot take the rescaled job's layout '" << view.partition() << "': " << groups.status();
        return 2;
      }
      KLOG(Info) << "the job was rescaled to " << view.num_servers() << " servers and " << view.num_workers()
                 << " workers (rescale " << view.layout_generation() << "): serving rank " << rank
                 << " of that layout, not the flags'";
      service.AdoptLayout(*std::move(groups), view.layout_generation(),
                          {view.worker_ids().begin(), view.worker_ids().end()});
    } else if (view.partition() != own->partition().ToString() ||
               shard_options.bsp_workers != (bsp ? view.num_workers() : 0)) {
      KLOG(Error) << "this server's configuration does not match the job's: scheduler partition '"
                  << view.partition() << "', " << consistency->ToString() << " with " << view.num_workers()
                  << " workers; this server: partition '" << own->partition().ToString()
                  << "', --bsp_workers=" << shard_options.bsp_workers
                  << " (must be the worker count in BSP, 0 otherwise)";
      return 2;
    }
    SetLogGeneration(registration->view().generation());
    KLOG(Info) << "registered with the scheduler at " << address << " as server " << index << ", rank " << rank
               << " (generation " << registration->view().generation() << ")";
    PsServiceImpl* service_ptr = &service;
    PsServer* server_ptr = server->get();
    static std::atomic<Heartbeater*> beat_ptr{nullptr};  // set once the heartbeater exists
    heartbeater = std::make_unique<Heartbeater>(
        scheduler.get(), ROLE_SERVER, registration->id(), registration->incarnation(),
        absl::Milliseconds(registration->view().heartbeat_interval_ms()) / 2,  // twice per interval
        [](absl::Status status) {
          KLOG(Error) << "the scheduler refused this server: " << status << "; shutting down";
          refused.store(true);
          kill(getpid(), SIGTERM);
        },
        [service_ptr, server_ptr, index, lease, last = uint64_t{0}](const HeartbeatResponse& answer) mutable {
          // The fence: the scheduler heard this server no earlier than the answered heartbeat was sent.
          if (Heartbeater* beat = beat_ptr.load()) service_ptr->primary_lease().Renew(beat->last_answered_sent(), lease);
          if (answer.removed()) {
            if (!removed.exchange(true)) {
              KLOG(Info) << "a rescale left server " << index << " out of the job: shutting down";
              kill(getpid(), SIGTERM);
            }
            return;
          }
          const std::shared_ptr<HostedShards> hosted_ptr = service_ptr->hosted();
          if (answer.generation() != last) {
            SetLogGeneration(answer.generation());
            KLOG(Info) << "shard " << index << " sees job generation " << answer.generation() << " ("
                       << answer.job_state() << ")";
            last = answer.generation();
          }
          service_ptr->SetJobView(answer.generation(),
                                  {answer.worker_generations().begin(), answer.worker_generations().end()},
                                  answer.layout_generation(),
                                  {answer.worker_ids().begin(), answer.worker_ids().end()});
          // The routing this server acts on, reported with every heartbeat (a switch installs one too).
          if (Heartbeater* beat = beat_ptr.load()) beat->SetRoutingGeneration(hosted_ptr->routing_generation());
          // An answer of an older layout (in flight across a switch) names the servers by their old ranks.
          if (hosted_ptr->replicated() && answer.layout_generation() >= service_ptr->layout_generation()) {
            server_ptr->SetPeerAddresses({answer.server_addresses().begin(), answer.server_addresses().end()});
            if (ApplyRouting(hosted_ptr->routing(), answer.routing_generation(), answer.out_of_service())) {
              // Tell the scheduler at once: it waits for every server to act on a routing before workers use it.
              if (Heartbeater* beat = beat_ptr.load()) {
                beat->SetRoutingGeneration(hosted_ptr->routing_generation());
                beat->BeatSoon();
              }
            }
          }
        });
    // A worker generation the shard has not heard of (a worker that just registered or rejoined): ask now.
    Heartbeater* beat = heartbeater.get();
    beat->SetRoutingGeneration(service.hosted()->routing_generation());
    beat_ptr.store(beat);
    service.SetGenerationListener([beat] { beat->BeatSoon(); });
    beat->BeatSoon();  // the first view now, not an interval from now
  }

  const int signal_number = WaitForShutdownSignal();
  KLOG(Info) << "received signal " << signal_number << ", shutting down shard " << index;
  (*server)->Shutdown(absl::GetFlag(FLAGS_shutdown_grace));
  (*server)->Wait();
  service.SetGenerationListener(nullptr);  // before the heartbeater it points to goes
  heartbeater.reset();
  const ShardStats stats = service.hosted()->own().Stats();
  KLOG(Info) << "stopped shard " << index << ": " << stats.pull_requests << " pulls, " << stats.push_requests
             << " pushes, " << stats.rejected_requests << " rejected";
  return refused.load() ? 3 : 0;
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  kestrel::TuneMallocForLargeBuffers();
  kestrel::ParseCommandLine(argc, argv, "Kestrel parameter server: one shard of the job's sparse and dense tables.");
  return kestrel::Run();
}
