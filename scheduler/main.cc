// kestrel_scheduler: membership, liveness and consistency of one Kestrel job.
//
//   kestrel_scheduler --job_id=ctr --num_servers=2 --num_workers=4 --consistency=ssp --staleness=2
//
// Servers and workers register and heartbeat; workers ask permission before each iteration (WaitToStart)
// and report finished iterations (Advance). With --checkpoint_dir it coordinates global checkpoints and rolls
// the job back to the latest one when a server dies; --resume continues a job from it. Shuts down cleanly on
// SIGTERM/SIGINT. Exit codes: 0 clean shutdown, 1 runtime error or a finished job whose final checkpoint could
// not be written (its final model is in no checkpoint), 2 bad flags or a checkpoint that cannot be used safely
// (damaged, of another job), named in the log.
#include <unistd.h>

#include <signal.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/command_line.h"
#include "common/checkpoint_dir_flag.h"
#include "common/job_id_flag.h"
#include "common/job_shape_flags.h"
#include "common/checkpoint_layout.h"
#include "common/cluster_env.h"
#include "common/logging.h"
#include "common/tls.h"
#include "common/metrics_flags.h"
#include "common/tls_flags.h"
#include "common/metrics.h"
#include "common/metrics_server.h"
#include "common/process_setup.h"
#include "common/partition.h"
#include "client/liveness.h"
#include "scheduler/job_options.h"
#include "scheduler/membership.h"
#include "scheduler/scheduler_service.h"

ABSL_FLAG(std::string, host, "0.0.0.0", "Address to listen on.");
ABSL_FLAG(int, port, 7000, "Port to listen on; 0 picks a free port (see --port_file).");
ABSL_FLAG(std::string, port_file, "", "If set, the bound port is written to this file once serving.");
ABSL_FLAG(int, num_workers, -1,
          "Workers the job needs (>= 1). -1: from the environment (KESTREL_NUM_WORKERS, TF_CONFIG, "
          "DMLC_NUM_WORKER), else 1.");
ABSL_FLAG(std::string, consistency, "bsp",
          "bsp: iteration c starts once every worker finished c-1; ssp: once the slowest finished c-s-1 "
          "(--staleness); asp: never waits.");
ABSL_FLAG(int, staleness, 0, "SSP staleness s >= 0 (how many iterations a worker may run ahead).");
// Defaults come from the options each flag sets (SchedulerOptions, MembershipOptions, CheckpointOptions).
ABSL_FLAG(int, lease_clocks, kestrel::SchedulerOptions().lease_clocks,
          "Server-enforced clocks: > 0, the servers enforce --consistency from the clocks workers' reads carry, and "
          "workers ask the scheduler once per lease of this many iterations (docs/protocol.md). 0: the scheduler "
          "is every iteration's barrier (the fallback; elastic jobs, --elastic_timeout, always use it).");
ABSL_FLAG(absl::Duration, heartbeat_interval, kestrel::MembershipOptions().heartbeat_interval,
          "How often members heartbeat; a silent member is declared dead within 2 intervals.");
ABSL_FLAG(absl::Duration, stall_threshold, absl::ZeroDuration(),
          "When the scheduler's liveness checks (every --heartbeat_interval / 4) are further apart than this, it did "
          "not run (a pause or stall), and the excess counts for no member's silence. 0: --heartbeat_interval / 2; "
          "inf: never (every gap counts).");
ABSL_FLAG(absl::Duration, deaf_grace, absl::ZeroDuration(),
          "A member silent past the timeout is declared dead only once the scheduler heard another member after its "
          "deadline (a scheduler cut off from everyone declares no one dead); after hearing no one for a timeout, "
          "every member has this long from the first message heard. 0: 3 * --heartbeat_interval + 2s; negative: "
          "off (plain timeouts).");
ABSL_FLAG(int64_t, checkpoint_every_clocks, kestrel::CheckpointOptions().every_clocks,
          "Cut a global checkpoint every N clocks (0: off).");
ABSL_FLAG(std::vector<std::string>, checkpoint_at_clocks, {},
          "Also cut a global checkpoint at each of these clocks (comma-separated, ascending, > 0), and keep those "
          "past --keep_checkpoints: a job's validation clocks (kestrel_worker --validation_clocks_for), so the best "
          "validation's model stays. Default: none.");
ABSL_FLAG(absl::Duration, checkpoint_every, kestrel::CheckpointOptions().every,
          "Cut a global checkpoint when this long has passed since the last one (0: off).");
ABSL_FLAG(int, keep_checkpoints, kestrel::CheckpointOptions().keep,
          "Committed checkpoints kept (>= 1); older ones are deleted.");
ABSL_FLAG(bool, resume, kestrel::CheckpointOptions().resume,
          "Continue the job from the latest committed checkpoint in --checkpoint_dir (a new job when there is "
          "none). Without it, a directory holding checkpoints is refused.");
ABSL_FLAG(bool, final_checkpoint, kestrel::CheckpointOptions().final_checkpoint,
          "Cut a checkpoint when every worker has finished.");
ABSL_FLAG(bool, checkpoint_copy_on_write, kestrel::CheckpointOptions().copy_on_write,
          "Copy-on-write checkpoints: workers wait only while the servers mark the cut, and the rows are written "
          "while training continues. false: workers wait until every server has written its part.");
ABSL_FLAG(bool, elastic, false,
          "Elastic job (docs/elasticity.md): a server or worker that stays dead for --elastic_timeout is removed "
          "from the job instead of waited for (the ranks above it are renumbered; its data share goes to the "
          "others; a server's ranges go to the others, from its backups or the last checkpoint).");
ABSL_FLAG(bool, move_rows_on_worker_change, kestrel::CheckpointOptions().move_rows_on_worker_change,
          "Rebuild the servers' groups by moving every row even when a rescale changes only the worker count (which "
          "is otherwise switched in place): the earlier behaviour, for comparisons (bench/rescale_bench.cc).");
ABSL_FLAG(absl::Duration, elastic_timeout, absl::Seconds(60),
          "With --elastic: how long a dead member may take to come back before it is removed.");

namespace kestrel {
namespace {

// The job's shape: explicit flags first, then the launcher's environment (common/cluster_env.h); it becomes
// --num_servers and --num_workers (1 where nothing says). False (logged) when it cannot be told.
bool ResolveJobShape() {
  ExplicitSettings flags;
  flags.num_servers = absl::GetFlag(FLAGS_num_servers);
  flags.num_workers = absl::GetFlag(FLAGS_num_workers);
  absl::StatusOr<ClusterIdentity> id =
      ResolveClusterIdentity(ClusterRole::kScheduler, flags, ProcessEnvironment(), ProcessHostname());
  if (!id.ok()) {
    KLOG(Error) << "cannot tell the job's shape: " << id.status();
    return false;
  }
  absl::SetFlag(&FLAGS_num_servers, id->num_servers > 0 ? id->num_servers : 1);
  absl::SetFlag(&FLAGS_num_workers, id->num_workers > 0 ? id->num_workers : 1);
  if (id->source != "flags" && !id->source.empty()) KLOG(Info) << "job shape: " << id->DebugString();
  return true;
}

// Heartbeats and the liveness rules (--heartbeat_interval, --stall_threshold, --deaf_grace) and their defaults.
void LivenessFromFlags(MembershipOptions* membership) {
  membership->heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  membership->heartbeat_timeout = HeartbeatTimeoutFor(membership->heartbeat_interval);
  const absl::Duration stall_threshold = absl::GetFlag(FLAGS_stall_threshold);
  membership->stall_threshold =
      stall_threshold > absl::ZeroDuration() ? stall_threshold : membership->heartbeat_interval / 2;
  const absl::Duration deaf_grace = absl::GetFlag(FLAGS_deaf_grace);
  membership->deaf_grace = deaf_grace < absl::ZeroDuration() ? absl::InfiniteDuration()
                           : deaf_grace > absl::ZeroDuration()
                               ? deaf_grace
                               : membership->heartbeat_interval * 3 + absl::Seconds(2);
}

// --resume: a job rescaled since it started resumes in its last layout, whatever the flags (a launcher restarts the
// scheduler with the counts it started with). A damaged checkpoint is reported by the job controller.
void ResumeLayout(SchedulerOptions* options) {
  if (!absl::GetFlag(FLAGS_resume) || absl::GetFlag(FLAGS_checkpoint_dir).empty()) return;
  absl::StatusOr<std::optional<CheckpointManifest>> latest =
      CheckpointLayout(absl::GetFlag(FLAGS_checkpoint_dir)).ReadLatest();
  if (!latest.ok() || !latest->has_value() || (*latest)->layout_generation() == 0) return;
  const CheckpointManifest& m = **latest;
  if (m.num_servers() != options->membership.num_servers || m.num_workers() != options->membership.num_workers ||
      m.partition() != options->partition) {
    KLOG(Info) << "the job was rescaled to " << m.num_servers() << " servers and " << m.num_workers()
               << " workers (rescale " << m.layout_generation()
               << ") before its latest checkpoint: resuming with those, not the flags' "
               << options->membership.num_servers << " and " << options->membership.num_workers;
  }
  options->membership.num_servers = m.num_servers();
  options->membership.num_workers = m.num_workers();
  options->partition = m.partition();
  options->membership.layout_generation = m.layout_generation();
  options->membership.server_ids.assign(m.server_ids().begin(), m.server_ids().end());
  options->membership.worker_ids.assign(m.worker_ids().begin(), m.worker_ids().end());
}

// Checkpoints and elasticity (--checkpoint_*, --resume, --elastic...). False (logged) for a bad combination.
bool CheckpointFromFlags(CheckpointOptions* checkpoint) {
  checkpoint->dir = absl::GetFlag(FLAGS_checkpoint_dir);
  checkpoint->every_clocks = absl::GetFlag(FLAGS_checkpoint_every_clocks);
  checkpoint->every = absl::GetFlag(FLAGS_checkpoint_every);
  for (const std::string& clock : absl::GetFlag(FLAGS_checkpoint_at_clocks)) {
    int64_t at = 0;
    if (!absl::SimpleAtoi(clock, &at)) {
      KLOG(Error) << "--checkpoint_at_clocks: '" << clock << "' is not a clock";
      return false;
    }
    checkpoint->at_clocks.push_back(at);
  }
  checkpoint->keep = absl::GetFlag(FLAGS_keep_checkpoints);
  checkpoint->copy_on_write = absl::GetFlag(FLAGS_checkpoint_copy_on_write);
  checkpoint->resume = absl::GetFlag(FLAGS_resume);
  checkpoint->final_checkpoint = absl::GetFlag(FLAGS_final_checkpoint);
  checkpoint->move_rows_on_worker_change = absl::GetFlag(FLAGS_move_rows_on_worker_change);
  if (absl::GetFlag(FLAGS_elastic)) {
    if (absl::GetFlag(FLAGS_elastic_timeout) <= absl::ZeroDuration()) {
      KLOG(Error) << "--elastic_timeout must be positive";
      return false;
    }
    if (absl::GetFlag(FLAGS_checkpoint_dir).empty()) {
      // A removal may roll the job back (a dead server without replicas, a worker whose push was applied
      // already): without checkpoints that restarts it from its beginning.
      KLOG(Error) << "--elastic needs --checkpoint_dir";
      return false;
    }
    checkpoint->elastic_timeout = absl::GetFlag(FLAGS_elastic_timeout);
  }
  return true;
}

// The scheduler's options from the flags (the job's shape resolved), but for on_fatal. False (logged) when they
// cannot be used (exit code 2).
bool OptionsFromFlags(SchedulerOptions* options) {
  options->job_id = absl::GetFlag(FLAGS_job_id);
  options->membership.num_servers = absl::GetFlag(FLAGS_num_servers);
  options->membership.num_workers = absl::GetFlag(FLAGS_num_workers);
  LivenessFromFlags(&options->membership);
  absl::StatusOr<ConsistencyPolicy> consistency =
      ConsistencyPolicy::Parse(absl::GetFlag(FLAGS_consistency), absl::GetFlag(FLAGS_staleness));
  if (!consistency.ok()) {
    KLOG(Error) << "--consistency: " << consistency.status().message();
    return false;
  }
  options->consistency = *consistency;
  options->lease_clocks = absl::GetFlag(FLAGS_lease_clocks);
  absl::StatusOr<Partition> partition = UniformPartitionFromFlags(options->membership.num_servers);
  if (!partition.ok()) {
    KLOG(Error) << partition.status();
    return false;
  }
  options->partition = partition->ToString();
  options->tls = TlsConfigFromFlags();
  ResumeLayout(options);
  return CheckpointFromFlags(&options->checkpoint);
}

// Starts the Scheduler service on --host:--port and writes --port_file. 0, or the exit code: 2 for options or a
// checkpoint that cannot be used, else 1.
int StartScheduler(const SchedulerOptions& options, std::unique_ptr<SchedulerServer>* started) {
  SchedulerServerOptions server_options;
  server_options.address = absl::StrCat(absl::GetFlag(FLAGS_host), ":", absl::GetFlag(FLAGS_port));
  auto server = SchedulerServer::Start(server_options, options);
  if (!server.ok()) {
    KLOG(Error) << server.status();
    const absl::StatusCode code = server.status().code();
    return code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kFailedPrecondition ||
                   code == absl::StatusCode::kDataLoss
               ? 2
               : 1;
  }
  *started = *std::move(server);
  KLOG(Info) << "scheduling job '" << options.job_id << "' on " << absl::GetFlag(FLAGS_host) << ":"
             << (*started)->port() << " (" << DescribeTransport(options.tls) << "): " << options.membership.num_servers
             << " servers, "
             << options.membership.num_workers << " workers, " << options.consistency.ToString()
             << ", heartbeat every "
             << absl::FormatDuration(options.membership.heartbeat_interval);
  if (absl::Status written = WritePortFile(absl::GetFlag(FLAGS_port_file), (*started)->port()); !written.ok()) {
    KLOG(Error) << "--port_file: " << written;
    return 1;
  }
  return 0;
}

// Serves until SIGTERM or SIGINT, then shuts `server` down.
void ServeUntilSignal(SchedulerServer& server) {
  const int signal_number = WaitForShutdownSignal();
  KLOG(Info) << "received signal " << signal_number << ", shutting down";
  server.Shutdown();
  server.Wait();
}

int Run() {
  SetLogIdentity("scheduler");
  if (!ResolveJobShape()) return 2;
  SchedulerOptions options;
  if (!OptionsFromFlags(&options)) return 2;
  static std::atomic<bool> fatal{false};
  options.on_fatal = [](absl::Status) {
    fatal.store(true);
    kill(getpid(), SIGTERM);  // the wait below shuts down; the exit code says why
  };

  BlockShutdownSignals();  // every thread started from here on leaves SIGTERM/SIGINT to the wait below

  // scheduler/scheduler_metrics.h lists the metrics.
  absl::StatusOr<std::unique_ptr<MetricsServer>> metrics = MetricsServer::Start(MetricsServerOptionsFromFlags());
  if (!metrics.ok()) {
    KLOG(Error) << "--metrics_port: " << metrics.status();
    return absl::IsInvalidArgument(metrics.status()) ? 2 : 1;
  }
  std::unique_ptr<SchedulerServer> server;
  if (const int failed = StartScheduler(options, &server); failed != 0) return failed;
  ServeUntilSignal(*server);
  if (fatal.load()) return 2;
  if (const CheckpointStatus status = server->service().job_controller().status(); status.final_checkpoint_failed) {
    KLOG(Error) << "the job's final checkpoint could not be written (" << status.last_failure
                << "): its final model is in no checkpoint";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  kestrel::ParseCommandLine(argc, argv, "Kestrel scheduler: membership, liveness and BSP/SSP/ASP consistency of one job.");
  return kestrel::Run();
}
