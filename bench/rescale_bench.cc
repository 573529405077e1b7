// rescale_bench: how long a live rescale holds the job, against table size, and against the way to resize a job
// without it (a checkpoint, then a restart that restores it into the new server count), in the same run.
//
// For each table size N: a real kestrel_scheduler (ASP, one worker, --checkpoint_dir) and 2 kestrel_server
// processes on loopback; this process plays the worker (it registers and heartbeats, and pushes N rows of an
// embedding table: dim 16, Adagrad, so each row carries its optimizer state). Then:
//   1. checkpoint: Scheduler.RequestCheckpoint, timed until it is committed (every row written);
//   2. live rescale 2 -> 3 servers: a third server is started, then Scheduler.Scale; the scheduler reports how
//      long the workers were held (rows sent server to server, new groups built, every server switched);
//   3. the alternative: the job stopped, a scheduler started with --resume --num_servers=3 on a copy of the
//      checkpoint of step 1, and 3 servers started; timed from their start until the job runs again (each new
//      server reads the rows of its new ranges from the 2-server checkpoint). Process start-up is included;
//      a real restart also pays for stopping the job and for the checkpoint itself (step 1).
//   4. removing a dead worker (what --elastic does, asked for with ScaleRequest.remove_workers): a job of 2
//      servers and 2 workers (both played by this process), filled and checkpointed; worker 1 stops
//      heartbeating, is declared dead and removed. The partition stays, so the servers switch to the new worker
//      count in place; the same removal in a second job started with --move_rows_on_worker_change rebuilds every
//      server's groups by moving every row (as a server-count change does, and as worker-count changes did).
// Figures are from one invocation, so the ratios compare like with like on a shared machine.
#include <signal.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "common/partition.h"
#include "common/status.h"
#include "client/grpc_scheduler_client.h"
#include "client/heartbeater.h"
#include "client/scheduler_client.h"
#include "tests/server_process.h"
#include "worker/grpc_ps_client.h"

ABSL_FLAG(std::string, rows, "1000000,10000000", "Comma-separated table sizes (rows over all servers).");
ABSL_FLAG(int, dim, 16, "Row width (floats); Adagrad adds as many optimizer floats.");
ABSL_FLAG(std::string, output, "bench/results/rescale_bench.md", "Markdown report path ('' to skip).");
ABSL_FLAG(std::string, scheduler_binary, "", "kestrel_scheduler (default: found in the runfiles or bazel-bin).");
ABSL_FLAG(std::string, server_binary, "", "kestrel_server (default: found in the runfiles or bazel-bin).");
ABSL_FLAG(bool, keep, false, "Keep each size's directory (the processes' logs, the checkpoints) under /tmp.");
ABSL_FLAG(std::string, git_commit, "", "Commit being measured (default: git rev-parse --short HEAD).");
ABSL_FLAG(std::string, invocation, "", "The command that reproduces this run.");

namespace kestrel {
namespace {

constexpr char kJob[] = "rescale";

struct Binaries {
  std::string scheduler, server;
};

struct Result {
  uint64_t rows = 0;
  double fill_seconds = 0;
  double checkpoint_seconds = 0;
  double held_seconds = 0;   // live rescale: the workers held
  double moved_seconds = 0;  // of which: rows sent and new groups built
  uint64_t rows_moved = 0;
  uint64_t bytes_moved = 0;
  double restore_seconds = 0;  // the alternative's restart into 3 servers
  double removal_held_seconds = 0;  // a dead worker removed: the servers switched in place
  double removal_moving_held_seconds = 0;  // the same with every row moved (--move_rows_on_worker_change)
};

// A job on loopback: the scheduler, its servers, and this process as its one worker.
class Job {
 public:
  Job(const Binaries& binaries, std::string dir) : binaries_(binaries), dir_(std::move(dir)) {}
  ~Job() { Stop(); }

  absl::Status StartScheduler(int servers, const std::string& checkpoints, bool resume, int workers = 1,
                              std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {absl::StrCat("--job_id=", kJob),
                                     absl::StrCat("--num_servers=", servers),
                                     absl::StrCat("--num_workers=", workers),
                                     "--consistency=asp",
                                     // This process plays workers that train an iteration each: the scheduler
                                     // is their barrier (under leases a checkpoint would wait for the lease's end).
                                     "--lease_clocks=0",
                                     "--heartbeat_interval=300ms",
                                     "--checkpoint_dir=" + checkpoints,
                                     "--final_checkpoint=false"};
    if (resume) args.push_back("--resume");
    for (std::string& arg : extra) args.push_back(std::move(arg));
    KESTREL_ASSIGN_OR_RETURN(ServerProcess p, ServerProcess::Start(binaries_.scheduler, args, dir_,
                                                                  absl::StrCat("scheduler", ++starts_)));
    scheduler_.emplace(std::move(p));
    SchedulerClientOptions options;
    options.job_id = kJob;
    client_ = NewGrpcSchedulerClient(scheduler_->address(), options, nullptr);
    return absl::OkStatus();
  }

  absl::Status StartServer(int s, int num_servers, const std::string& checkpoints) {
    KESTREL_ASSIGN_OR_RETURN(
        ServerProcess p,
        ServerProcess::Start(binaries_.server,
                             {absl::StrCat("--job_id=", kJob), absl::StrCat("--rank=", s),
                              absl::StrCat("--num_servers=", num_servers), "--scheduler=" + scheduler_->address(),
                              "--checkpoint_dir=" + checkpoints, "--max_message_bytes=67108864"},
                             dir_, absl::StrCat("server", s, "_", ++starts_), absl::Seconds(60)));
    if (static_cast<int>(servers_.size()) <= s) servers_.resize(s + 1);
    servers_[s].emplace(std::move(p));
    return absl::OkStatus();
  }

  // Registers this process as worker `id` and heartbeats for it.
  absl::Status RegisterWorker(int id = 0) {
    absl::StatusOr<RegisterResponse> reg;
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    do {
      reg = client_->Register(ROLE_WORKER, "", id);
      if (reg.ok() || !absl::IsUnavailable(reg.status())) break;
      absl::SleepFor(absl::Milliseconds(100));
    } while (absl::Now() < deadline);
    KESTREL_RETURN_IF_ERROR(reg.status());
    if (id == 0) worker_ = *reg;
    if (static_cast<int>(heartbeaters_.size()) <= id) heartbeaters_.resize(id + 1);
    if (static_cast<int>(registrations_.size()) <= id) registrations_.resize(id + 1);
    registrations_[id] = *reg;
    heartbeaters_[id] = std::make_unique<Heartbeater>(client_.get(), ROLE_WORKER, id, reg->incarnation(),
                                                      absl::Milliseconds(150), [](absl::Status) {});
    return absl::OkStatus();
  }
  // Worker `id` goes silent (the scheduler declares it dead).
  void Silence(int id) { heartbeaters_[id].reset(); }

  // Worker `id` trains its first iteration (ASP: never waits) and reports where its reader is, as a worker
  // does: the scheduler hands its share on from there when the worker count changes.
  absl::Status AdvanceWorker(int id, int workers) {
    const RegisterResponse& reg = registrations_[id];
    KESTREL_RETURN_IF_ERROR(client_->WaitToStart(id, 0, reg.generation(), reg.incarnation()).status());
    WorkerState state;
    state.set_clock(1);
    state.set_epoch_end(1 << 30);
    state.mutable_share()->set_index(id);
    state.mutable_share()->set_count(workers);
    state.mutable_reader()->set_global_line(id + 1);
    return client_->Advance(id, 1, reg.generation(), reg.incarnation(), false, &state).status();
  }

  absl::StatusOr<DescribeResponse> WaitFor(absl::FunctionRef<bool(const DescribeResponse&)> done,
                                           absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    absl::StatusOr<DescribeResponse> d;
    while (absl::Now() < deadline) {
      d = client_->Describe();
      if (d.ok() && done(*d)) return d;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return absl::DeadlineExceededError(absl::StrCat("waited ", absl::FormatDuration(timeout), ": ",
                                                    d.ok() ? d->view().job_state() : d.status().ToString()));
  }

  // Pushes `rows` distinct rows (as the worker, ASP: applied on arrival).
  absl::Status Fill(uint64_t rows, int dim) {
    KESTREL_ASSIGN_OR_RETURN(DescribeResponse d, client_->Describe());
    KESTREL_ASSIGN_OR_RETURN(Partition partition, Partition::Parse(d.view().partition()));
    PsClientOptions options;
    options.job_id = kJob;
    options.worker_rank = 0;
    std::vector<std::string> addresses(d.view().server_addresses().begin(), d.view().server_addresses().end());
    KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> ps, NewGrpcPsClient(options, partition, addresses));
    ps->SetGeneration(worker_.generation());
    TableConfig table;
    table.set_name("emb");
    table.set_dim(dim);
    table.mutable_optimizer()->set_type(OptimizerConfig::ADAGRAD);
    KESTREL_RETURN_IF_ERROR(ps->CreateTable(table));
    constexpr uint64_t kChunk = 200000;
    std::vector<uint64_t> keys;
    std::vector<float> grads(kChunk * dim);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> gradient(-0.1f, 0.1f);
    for (float& g : grads) g = gradient(rng);
    for (uint64_t first = 0; first < rows; first += kChunk) {
      keys.clear();
      for (uint64_t i = first; i < std::min(rows, first + kChunk); ++i) keys.push_back(Partition::FeatureKey(i));
      std::sort(keys.begin(), keys.end());
      KESTREL_RETURN_IF_ERROR(
          ps->Push("emb", keys, dim, grads.data()));
    }
    return absl::OkStatus();
  }

  SchedulerClient& client() { return *client_; }

  void Stop() {
    heartbeaters_.clear();
    for (auto& s : servers_) {
      if (s.has_value()) (void)s->Stop(SIGKILL);
      s.reset();
    }
    if (scheduler_.has_value()) (void)scheduler_->Stop(SIGKILL);
    scheduler_.reset();
  }

 private:
  const Binaries binaries_;
  const std::string dir_;
  int starts_ = 0;
  std::optional<ServerProcess> scheduler_;
  std::vector<std::optional<ServerProcess>> servers_;
  std::unique_ptr<SchedulerClient> client_;
  RegisterResponse worker_;
  std::vector<RegisterResponse> registrations_;             // by worker id
  std::vector<std::unique_ptr<Heartbeater>> heartbeaters_;  // by worker id
};

// Step 4: a job of 2 servers and 2 workers filled with `rows` rows and checkpointed; worker 1 dies and is
// removed. Returns how long the removal held the job.
absl::StatusOr<double> MeasureWorkerRemoval(const Binaries& binaries, const std::string& dir, uint64_t rows,
                                            int dim, bool move_rows) {
  bench::MakeParentDirs(dir + "/x");
  Job job(binaries, dir);
  KESTREL_RETURN_IF_ERROR(job.StartScheduler(
      2, dir + "/ckpt", /*resume=*/false, /*workers=*/2,
      {absl::StrCat("--move_rows_on_worker_change=", move_rows ? "true" : "false")}));
  for (int s = 0; s < 2; ++s) KESTREL_RETURN_IF_ERROR(job.StartServer(s, 2, dir + "/ckpt"));
  for (int w = 0; w < 2; ++w) KESTREL_RETURN_IF_ERROR(job.RegisterWorker(w));
  KESTREL_RETURN_IF_ERROR(
      job.WaitFor([](const DescribeResponse& d) { return d.view().job_state() == "running"; }, absl::Seconds(30))
          .status());
  KESTREL_RETURN_IF_ERROR(job.Fill(rows, dim));
  for (int w = 0; w < 2; ++w) KESTREL_RETURN_IF_ERROR(job.AdvanceWorker(w, 2));
  // A checkpoint first, as a running job has one: the removal's own checkpoint then writes what changed since.
  KESTREL_RETURN_IF_ERROR(job.client().RequestCheckpoint().status());
  KESTREL_RETURN_IF_ERROR(
      job.WaitFor([](const DescribeResponse& d) { return d.checkpoints_committed() >= 1; }, absl::Minutes(10))
          .status());
  job.Silence(1);
  KESTREL_RETURN_IF_ERROR(job.WaitFor(
                                 [](const DescribeResponse& d) {
                                   for (const MemberStatus& m : d.members()) {
                                     if (m.role() == ROLE_WORKER && m.rank() == 1) return !m.alive();
                                   }
                                   return false;
                                 },
                                 absl::Seconds(30))
                              .status());
  ScaleRequest request;
  request.set_servers(2);
  request.set_workers(1);
  request.add_remove_workers(1);
  KESTREL_ASSIGN_OR_RETURN(ScaleResponse removed, job.client().Scale(request, absl::Minutes(11)));
  return removed.held_seconds();
}

absl::StatusOr<Result> Measure(const Binaries& binaries, uint64_t rows, int dim) {
  char dir_template[] = "/tmp/rescale_bench.XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::string dir = dir_template;
  const std::string checkpoints = dir + "/ckpt";
  const std::string copy = dir + "/ckpt_copy";
  Result r;
  r.rows = rows;
  {
    bench::MakeParentDirs(dir + "/live/x");
    Job job(binaries, dir + "/live");
    KESTREL_RETURN_IF_ERROR(job.StartScheduler(2, checkpoints, /*resume=*/false));
    for (int s = 0; s < 2; ++s) KESTREL_RETURN_IF_ERROR(job.StartServer(s, 2, checkpoints));
    KESTREL_RETURN_IF_ERROR(job.RegisterWorker());
    KESTREL_RETURN_IF_ERROR(
        job.WaitFor([](const DescribeResponse& d) { return d.view().job_state() == "running"; }, absl::Seconds(30))
            .status());
    absl::Time start = absl::Now();
    KESTREL_RETURN_IF_ERROR(job.Fill(rows, dim));
    r.fill_seconds = absl::ToDoubleSeconds(absl::Now() - start);

    // 1. A checkpoint of every row.
    start = absl::Now();
    KESTREL_RETURN_IF_ERROR(job.client().RequestCheckpoint().status());
    KESTREL_RETURN_IF_ERROR(
        job.WaitFor([](const DescribeResponse& d) { return d.checkpoints_committed() >= 1; }, absl::Minutes(10))
            .status());
    r.checkpoint_seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (bench::RunCommand(absl::StrCat("cp -r ", bench::ShellQuote(checkpoints), " ", bench::ShellQuote(copy),
                                       " && echo copied")) != "copied") {
      return absl::InternalError("cannot copy the checkpoint directory");
    }

    // 2. The live rescale.
    KESTREL_RETURN_IF_ERROR(job.StartServer(2, 3, checkpoints));
    ScaleRequest request;
    request.set_servers(3);
    request.set_workers(1);
    request.set_join_timeout_ms(60000);
    KESTREL_ASSIGN_OR_RETURN(ScaleResponse scaled, job.client().Scale(request, absl::Minutes(11)));
    r.held_seconds = scaled.held_seconds();
    r.moved_seconds = scaled.moved_seconds();
    r.rows_moved = scaled.rows_moved();
    r.bytes_moved = scaled.bytes_moved();
  }
  {
    // 3. The restart into 3 servers from the 2-server checkpoint.
    bench::MakeParentDirs(dir + "/restart/x");
    Job job(binaries, dir + "/restart");
    KESTREL_RETURN_IF_ERROR(job.StartScheduler(3, copy, /*resume=*/true));
    KESTREL_RETURN_IF_ERROR(job.RegisterWorker());
    const absl::Time start = absl::Now();
    for (int s = 0; s < 3; ++s) KESTREL_RETURN_IF_ERROR(job.StartServer(s, 3, copy));
    KESTREL_RETURN_IF_ERROR(
        job.WaitFor([](const DescribeResponse& d) { return d.view().job_state() == "running"; }, absl::Minutes(10))
            .status());
    r.restore_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  }
  // 4. A dead worker removed, in place and moving every row.
  KESTREL_ASSIGN_OR_RETURN(r.removal_held_seconds,
                           MeasureWorkerRemoval(binaries, dir + "/remove", rows, dim, /*move_rows=*/false));
  KESTREL_ASSIGN_OR_RETURN(r.removal_moving_held_seconds,
                           MeasureWorkerRemoval(binaries, dir + "/remove_moving", rows, dim, /*move_rows=*/true));
  if (absl::GetFlag(FLAGS_keep)) {
    std::printf("kept %s\n", dir.c_str());
  } else {
    bench::RunCommand(absl::StrCat("rm -rf ", bench::ShellQuote(dir)));
  }
  return r;
}

absl::Status Main(int argc, char** argv) {
  const std::string load_start = bench::LoadAverage();
  Binaries binaries;
  KESTREL_ASSIGN_OR_RETURN(binaries.scheduler, bench::FindBinary(absl::GetFlag(FLAGS_scheduler_binary),
                                                                 "scheduler/kestrel_scheduler", argv[0],
                                                                 "scheduler_binary"));
  KESTREL_ASSIGN_OR_RETURN(binaries.server, bench::FindBinary(absl::GetFlag(FLAGS_server_binary),
                                                              "server/kestrel_server", argv[0], "server_binary"));
  const bench::Machine machine =
      bench::DescribeMachine(argc, argv, absl::GetFlag(FLAGS_git_commit), absl::GetFlag(FLAGS_invocation));
  std::vector<Result> results;
  for (absl::string_view item : absl::StrSplit(absl::GetFlag(FLAGS_rows), ',', absl::SkipWhitespace())) {
    uint64_t rows = 0;
    if (!absl::SimpleAtoi(item, &rows) || rows == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--rows: '", item, "' is not a row count"));
    }
    KESTREL_ASSIGN_OR_RETURN(Result r, Measure(binaries, rows, absl::GetFlag(FLAGS_dim)));
    std::printf("%llu rows: rescale held %.2f s (moving %.2f s, %llu rows, %.0f MB); checkpoint %.2f s + restore "
                "%.2f s = %.2f s (%.2fx the hold); a dead worker removed: held %.2f s in place, %.2f s moving every "
                "row (%.1fx)\n",
                static_cast<unsigned long long>(r.rows), r.held_seconds, r.moved_seconds,
                static_cast<unsigned long long>(r.rows_moved), r.bytes_moved / 1e6, r.checkpoint_seconds,
                r.restore_seconds, r.checkpoint_seconds + r.restore_seconds,
                (r.checkpoint_seconds + r.restore_seconds) / r.held_seconds, r.removal_held_seconds,
                r.removal_moving_held_seconds, r.removal_moving_held_seconds / r.removal_held_seconds);
    std::fflush(stdout);
    results.push_back(r);
  }
  if (absl::GetFlag(FLAGS_output).empty()) return absl::OkStatus();
  std::string md = "# rescale_bench: a live rescale (2 -> 3 servers) against checkpoint + restore\n\n";
  absl::StrAppend(&md, bench::MachineMarkdown(machine, load_start), "\n\n", bench::CommandMarkdown(machine));
  absl::StrAppend(
      &md,
      "Real kestrel_scheduler and kestrel_server processes on loopback; one embedding table of dim ",
      absl::GetFlag(FLAGS_dim),
      " with Adagrad (each row: values and optimizer state). *Held*: how long a live rescale (Scheduler.Scale, "
      "docs/elasticity.md) held the workers: rows sent server to server in memory, new range groups built, every "
      "server switched. *Checkpoint + restore*: the way to resize without it: a checkpoint of every row, then the "
      "job restarted with --resume into 3 servers (from their start until the job runs; a real restart also "
      "stops the job and waits for its processes). One run per size, all in this invocation.\n\n",
      "| rows | held (s) | of which moving (s) | rows moved | MB moved | checkpoint (s) | restore (s) | "
      "checkpoint + restore / held |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Result& r : results) {
    absl::StrAppend(&md, absl::StrFormat("| %d | %.2f | %.2f | %d | %.0f | %.2f | %.2f | %.2fx |\n", r.rows,
                                         r.held_seconds, r.moved_seconds, r.rows_moved, r.bytes_moved / 1e6,
                                         r.checkpoint_seconds, r.restore_seconds,
                                         (r.checkpoint_seconds + r.restore_seconds) / r.held_seconds));
  }
  absl::StrAppend(
      &md,
      "\n## A dead worker removed (elastic jobs)\n\n"
      "2 servers and 2 workers (ASP), the table filled and checkpointed; worker 1 stops heartbeating, is declared "
      "dead and removed (ScaleRequest.remove_workers, what --elastic does after its timeout). *In place*: the "
      "partition stays, so every server keeps its rows and takes the new worker count (the hold is the switch and "
      "the removal's checkpoint of what changed since the last one). *Moving every row*: the same job with "
      "--move_rows_on_worker_change, which rebuilds every server's groups by sending each row, as a server-count "
      "change does (and as worker-count changes did before). Both in this invocation.\n\n"
      "| rows | held in place (s) | held moving every row (s) | moving / in place |\n|---:|---:|---:|---:|\n");
  for (const Result& r : results) {
    absl::StrAppend(&md, absl::StrFormat("| %d | %.3f | %.2f | %.1fx |\n", r.rows, r.removal_held_seconds,
                                         r.removal_moving_held_seconds,
                                         r.removal_moving_held_seconds / r.removal_held_seconds));
  }
  const std::string path = bench::UserPath(absl::GetFlag(FLAGS_output));
  KESTREL_RETURN_IF_ERROR(bench::WriteFile(path, md));
  std::printf("wrote %s\n", path.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::Status status = kestrel::Main(argc, argv);
  if (!status.ok()) {
    std::fprintf(stderr, "rescale_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
