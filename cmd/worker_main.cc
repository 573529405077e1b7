// kestrel_worker: one training worker of a cluster, or a whole single-process training run (--local).
//
//   kestrel_worker --config=job.pbtxt --scheduler=host:7000 [--rank=N] [--device=auto|cpu|cuda|cuda:N]
//   kestrel_worker --config=job.pbtxt --local [--predictions_out=scores.txt] [--export_dir=model/]
//
// In a cluster it registers with kestrel_scheduler, learns the servers, the partition and the consistency mode
// from it, heartbeats, and trains its shard of the data (worker/trainer.h); worker 0 also evaluates and writes
// the evaluation records. With --local it trains on in-process tables (inprocess/local_trainer.h), evaluates, and
// can then write the test files' predictions and export the model, as kestrel_predict and kestrel_export would.
//
// Before training it checks the flags, the config and the start of every data file (worker/job_check.h): a
// problem found there exits 2, naming it, before the first iteration. Exit codes: 0 trained, 1 training failed,
// 2 bad flags, config or data (found before training starts), 3 the scheduler declared this worker dead or
// superseded.
//
// With --metrics_port it serves Prometheus metrics (the process's, listed at WorkerMetrics below).
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/command_line.h"
#include "common/limits.h"
#include "common/job_id_flag.h"
#include "common/rank_offset_flag.h"
#include "common/scheduler_flag.h"
#include "common/consistency.h"
#include "common/cluster_env.h"
#include "common/logging.h"
#include "common/tls.h"
#include "common/metrics_flags.h"
#include "common/tls_flags.h"
#include "worker/tensorboard.h"
#include "common/metrics.h"
#include "common/metrics_server.h"
#include "common/process_setup.h"
#include "google/protobuf/text_format.h"
#include "worker/compute/backend_factory.h"
#include "export/export.h"
#include "worker/early_stopping.h"
#include "worker/grpc_connector.h"
#include "worker/job_check.h"
#include "inprocess/local_trainer.h"
#include "worker/records.h"
#include "worker/row_cache.h"
#include "worker/train_stream.h"
#include "worker/trainer.h"
#include "worker/worker_session.h"

// Defaults come from the options each flag sets (WorkerSessionOptions, LocalTrainingOptions).
ABSL_FLAG(absl::Duration, recovery_timeout, kestrel::WorkerSessionOptions().recovery_timeout,
          "How long a worker whose training stopped waits for the job to roll back and rejoins before giving up.");
ABSL_FLAG(std::string, config, "", "Job config (protobuf text format, proto/job.proto). Required.");
ABSL_FLAG(bool, local, false, "Train in this process on in-process tables instead of joining a cluster.");
ABSL_FLAG(int, local_servers, kestrel::LocalTrainingOptions().num_servers, "--local: in-process servers.");
ABSL_FLAG(int, local_server_threads, kestrel::LocalTrainingOptions().server_threads,
          "--local: threads besides the trainer's applying the in-process servers' large pulls and pushes (-1: a "
          "quarter of the cores, at most 4; none below 8 cores).");
ABSL_FLAG(int, rank, -1,
          "Worker rank to take. -1: from the environment (KESTREL_RANK, TF_CONFIG, DMLC_*_ID, the Open MPI / PMI / "
          "Slurm rank minus --rank_offset, the Kubernetes StatefulSet ordinal or Indexed Job index "
          "(common/cluster_env.h)), else any free rank.");
ABSL_FLAG(std::string, tensorboard_dir, "",
          "Write TensorBoard event files (loss, AUC, examples/s by step) under <dir>/worker<rank>/. Default: none.");
ABSL_FLAG(std::string, device, "auto", "Compute backend: auto (CUDA when a GPU is present), cpu, cuda, cuda:N.");
ABSL_FLAG(int, compute_threads, 0,
          "CPU backend: compute threads (GEMMs and every kernel). 0: the cores this process may use. For a fixed "
          "count results are bitwise repeatable.");
ABSL_FLAG(std::string, train_files, "", "Comma-separated training files (override data.train_files).");
ABSL_FLAG(std::string, test_files, "", "Comma-separated test files (override data.test_files).");
ABSL_FLAG(std::string, validation_files, "",
          "Comma-separated validation files (override data.validation_files: evaluated after every epoch).");
ABSL_FLAG(bool, row_cache, kestrel::WorkerSessionOptions().row_cache,
          "Under SSP(s >= 1), serve sparse rows from this worker's cache while they are within the staleness bound "
          "(worker/row_cache.h); BSP never caches, nor does SSP under leases (its reads travel with its pushes).");
ABSL_FLAG(int64_t, row_cache_rows, kestrel::WorkerSessionOptions().row_cache_rows,
          "Most rows the row cache keeps per table.");
ABSL_FLAG(int, asp_cache_clocks, kestrel::WorkerSessionOptions().asp_cache_clocks,
          "Under ASP, serve cached rows for this many of the worker's own clocks after their pull (0: no cache).");
ABSL_FLAG(std::string, metrics_out, "",
          "Write JSON-lines training and evaluation records (proto/records.proto) to this file, emptied at start "
          "unless --metrics_append. Default: none.");
ABSL_FLAG(bool, metrics_append, false,
          "Add the records after what --metrics_out holds instead of emptying it at start (workers that share one "
          "file, or a restarted worker continuing its run's records).");
ABSL_FLAG(std::string, predictions_out, "",
          "--local: after training, write the model's probability for every example of the test files here, one "
          "per line in file order (kestrel_predict --output's format). Default: none.");
ABSL_FLAG(std::string, export_dir, "",
          "--local: after training, export the model (every table) to this directory, which must not hold an "
          "export yet: what kestrel_export makes of a checkpoint, for kestrel_predict. Default: none.");
ABSL_FLAG(int, validation_clocks_for, 0,
          "Print the clocks after which worker 0 of this job with this many workers validates (before its last "
          "iteration), comma-separated on one line, and exit: what kestrel_scheduler --checkpoint_at_clocks takes "
          "to keep each validation's model. An empty line without a validation split. Default: 0 = train.");
ABSL_FLAG(std::string, stop_stream, "",
          "End the training directory DIR (data.train_stream) after the files it holds now: write its stop file "
          "naming the last one, print that name and exit. Default: none = train.");
ABSL_FLAG(std::string, line_log, "",
          "Audit of the data order: append, for every iteration this worker trains, '<clock> <epoch> <line>...' with "
          "the global index of each training line of its batch, to this file. Empty (default): none.");
ABSL_FLAG(absl::Duration, scheduler_timeout, kestrel::WorkerSessionOptions().scheduler_timeout,
          "How long to retry registering and to wait for every server to join.");

namespace kestrel {
namespace {

// The worker's Prometheus metrics (common/metrics.h):
//   kestrel_worker_examples_total          counter  training examples processed (counted at every log window)
//   kestrel_worker_examples_per_second     gauge    training throughput over the last log window
//   kestrel_worker_train_logloss           gauge    mean training logloss over the last log window
//   kestrel_worker_eval_auc                gauge    AUC of the last evaluation (worker 0, or --local)
//   kestrel_worker_eval_logloss            gauge    logloss of the last evaluation
//   kestrel_worker_clock                   gauge    iterations this worker has finished
//   kestrel_worker_rejoins_total           counter  rejoins after the job rolled back to a checkpoint
//   kestrel_worker_phase_seconds_total{phase}  counter  training time by phase: read, batch, pull, compute,
//                                                      push, wait (PhaseTimes; counted at every log window)
// With --tensorboard_dir the same figures also go to a TensorBoard event file. Thread-safe.
class WorkerMetrics {
 public:
  WorkerMetrics()
      : examples_(NewCounter("kestrel_worker_examples_total", "Training examples this worker has processed.")),
        examples_per_second_(NewGauge("kestrel_worker_examples_per_second",
                                      "Training examples per second over the last log window.")),
        train_logloss_(NewGauge("kestrel_worker_train_logloss", "Mean training logloss over the last log window.")),
        eval_auc_(NewGauge("kestrel_worker_eval_auc", "AUC of the last evaluation on the test files.")),
        eval_logloss_(NewGauge("kestrel_worker_eval_logloss", "Logloss of the last evaluation on the test files.")),
        clock_(NewGauge("kestrel_worker_clock", "Iterations this worker has finished.")),
        cache_hit_ratio_(NewGauge("kestrel_worker_row_cache_hit_ratio",
                                  "Keys answered from the row cache over keys read (SSP/ASP; 0 without a cache).")),
        cache_rows_(NewGauge("kestrel_worker_row_cache_rows", "Rows the row cache holds, over all tables.")),
        rejoins_(NewCounter("kestrel_worker_rejoins_total",
                            "Times this worker rejoined the job after it rolled back to a checkpoint.")) {
    const char* help = "Training time by phase (read, batch, pull, compute, push, wait), in seconds.";
    for (const char* phase : {"read", "batch", "pull", "compute", "push", "wait"}) {
      phase_seconds_.push_back(&NewCounter("kestrel_worker_phase_seconds_total", help, {{"phase", phase}}));
    }
  }

  // Also writes the figures as TensorBoard scalars (train/logloss, train/examples_per_second, eval/auc,
  // eval/logloss by step) to <dir>/worker<rank>/ (worker/tensorboard.h). Empty `dir`: no event file.
  absl::Status OpenTensorBoard(const std::string& dir, int rank) {
    if (dir.empty()) return absl::OkStatus();
    auto writer = EventWriter::Open(absl::StrCat(dir, "/worker", rank), absl::StrCat("worker", rank));
    if (!writer.ok()) return writer.status();
    absl::MutexLock lock(&tensorboard_mu_);
    tensorboard_ = std::move(writer).value();
    return absl::OkStatus();
  }

  // The Trainer's observer (TrainerOptions::observer).
  void Observe(const TrainerEvent& event) {
    switch (event.kind) {
      case TrainerEvent::Kind::kTrain:
        AddPhases(event.phases);
        examples_.Increment(static_cast<double>(event.examples));
        examples_per_second_.Set(event.examples_per_second);
        train_logloss_.Set(event.logloss);
        clock_.Set(static_cast<double>(event.step));
        if (const RowCache* cache = row_cache_.load()) {
          const RowCacheStats stats = cache->stats();
          cache_hit_ratio_.Set(stats.hit_ratio());
          cache_rows_.Set(static_cast<double>(stats.rows));
        }
        WriteScalars(event.step, {{"train/logloss", static_cast<float>(event.logloss)},
                                  {"train/examples_per_second", static_cast<float>(event.examples_per_second)}});
        break;
      case TrainerEvent::Kind::kEval:
        eval_auc_.Set(event.auc);
        eval_logloss_.Set(event.logloss);
        WriteScalars(event.step, {{"eval/auc", static_cast<float>(event.auc)},
                                  {"eval/logloss", static_cast<float>(event.logloss)}});
        break;
      case TrainerEvent::Kind::kValidation:
        WriteScalars(event.step, {{"validation/auc", static_cast<float>(event.auc)},
                                  {"validation/logloss", static_cast<float>(event.logloss)}});
        break;
      case TrainerEvent::Kind::kDone:
        AddPhases(event.phases);
        break;
    }
  }

  // Adds what `since_start` (a Run's phase times so far) has beyond what was already counted.
  void AddPhases(const PhaseTimes& since_start) {
    const double now[] = {since_start.read, since_start.batch, since_start.pull,
                          since_start.compute, since_start.push, since_start.wait};
    absl::MutexLock lock(&phases_mu_);
    if (now[3] < counted_[3]) std::fill(std::begin(counted_), std::end(counted_), 0.0);  // a new Run()
    for (size_t i = 0; i < phase_seconds_.size(); ++i) {
      if (now[i] > counted_[i]) phase_seconds_[i]->Increment(now[i] - counted_[i]);
      counted_[i] = std::max(counted_[i], now[i]);
    }
  }
  std::function<void(const TrainerEvent&)> Observer() {
    return [this](const TrainerEvent& event) { Observe(event); };
  }

  void WriteScalars(int64_t step, std::vector<TensorBoardScalar> scalars) {
    absl::MutexLock lock(&tensorboard_mu_);
    if (tensorboard_ == nullptr) return;
    absl::Status written = tensorboard_->AddScalars(step, scalars);
    if (written.ok()) written = tensorboard_->Flush();
    if (!written.ok()) {
      KLOG(Warning) << "TensorBoard events are no longer written: " << written;
      tensorboard_.reset();
    }
  }

  prometheus::Gauge& clock() { return clock_; }
  // The row cache whose figures are exported (null: none).
  void SetRowCache(const RowCache* cache) { row_cache_.store(cache); }
  prometheus::Counter& rejoins() { return rejoins_; }


 private:
  absl::Mutex tensorboard_mu_;
  std::unique_ptr<EventWriter> tensorboard_ ABSL_GUARDED_BY(tensorboard_mu_);
  prometheus::Counter& examples_;
  prometheus::Gauge& examples_per_second_;
  prometheus::Gauge& train_logloss_;
  prometheus::Gauge& eval_auc_;
  prometheus::Gauge& eval_logloss_;
  prometheus::Gauge& clock_;
  prometheus::Gauge& cache_hit_ratio_;
  prometheus::Gauge& cache_rows_;
  std::atomic<const RowCache*> row_cache_{nullptr};
  prometheus::Counter& rejoins_;
  std::vector<prometheus::Counter*> phase_seconds_;  // in PhaseTimes order
  absl::Mutex phases_mu_;
  double counted_[6] ABSL_GUARDED_BY(phases_mu_) = {};
};

[[nodiscard]] absl::StatusOr<JobConfig> LoadConfig() {
  const std::string path = absl::GetFlag(FLAGS_config);
  if (path.empty()) return absl::InvalidArgumentError("--config is required");
  std::ifstream in(path);
  if (!in.good()) return absl::NotFoundError(absl::StrCat("cannot read --config ", path));
  std::stringstream text;
  text << in.rdbuf();
  JobConfig job;
  if (!google::protobuf::TextFormat::ParseFromString(text.str(), &job)) {
    return absl::InvalidArgumentError(absl::StrCat("--config ", path, " is not a valid JobConfig (proto/job.proto)"));
  }
  // Each flag, when given, replaces its list.
  for (auto [flag, files] : {std::make_pair(&FLAGS_train_files, job.mutable_data()->mutable_train_files()),
                             std::make_pair(&FLAGS_test_files, job.mutable_data()->mutable_test_files()),
                             std::make_pair(&FLAGS_validation_files, job.mutable_data()->mutable_validation_files())}) {
    const std::string list = absl::GetFlag(*flag);
    if (list.empty()) continue;
    files->Clear();
    for (absl::string_view f : absl::StrSplit(list, ',')) files->Add(std::string(f));
  }
  return job;
}

// The RPCs this process has started of the kinds a training step makes (kestrel_rpcs_sent_total).
struct StepRpcs {
  double pulls = 0, pushes = 0, steps = 0, scheduler = 0;

  static StepRpcs Now() {
    StepRpcs n;
    n.pulls = RpcsSentCounter("server", "Pull").Value() + RpcsSentCounter("server", "PullDense").Value();
    n.pushes = RpcsSentCounter("server", "Push").Value() + RpcsSentCounter("server", "PushDense").Value();
    n.steps = RpcsSentCounter("server", "Step").Value();
    n.scheduler =
        RpcsSentCounter("scheduler", "WaitToStart").Value() + RpcsSentCounter("scheduler", "Advance").Value();
    return n;
  }
};

// Logs the RPCs a pass of `steps` iterations started since `before`, per iteration (rank 0's include its
// evaluation's pulls).
void ReportRpcs(const StepRpcs& before, int64_t steps) {
  if (steps <= 0) return;
  const StepRpcs now = StepRpcs::Now();
  const double n = static_cast<double>(steps);
  KLOG(Info) << absl::StrFormat(
      "RPCs per iteration: %.2f to servers (%.2f pulls, %.2f pushes, %.2f steps), %.2f to the scheduler "
      "(WaitToStart, Advance)",
      (now.pulls - before.pulls + now.pushes - before.pushes + now.steps - before.steps) / n,
      (now.pulls - before.pulls) / n, (now.pushes - before.pushes) / n, (now.steps - before.steps) / n,
      (now.scheduler - before.scheduler) / n);
}

void Report(const TrainResult& r) {
  KLOG(Info) << absl::StrFormat(
      "finished: %d iterations, %d examples in %.2f s (%.0f examples/s); test logloss %.5f AUC %.5f "
      "(fingerprint %016x)",
      r.steps, r.examples, r.seconds, r.examples_per_second, r.eval.logloss, r.eval.auc, r.eval.fingerprint);
  const PhaseTimes& p = r.phases;
  KLOG(Info) << absl::StrFormat(
      "time by phase: read %.2f s, batch %.2f s (reader threads, overlapped); pull %.2f s, compute %.2f s, "
      "push %.2f s, wait %.2f s",
      p.read, p.batch, p.pull, p.compute, p.push, p.wait);
}

int RunCluster(const JobConfig& job, const std::shared_ptr<const Schema>& schema, Backend* backend,
               WorkerMetrics& metrics) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(TlsConfigFromFlags());
  if (!credentials.ok()) {
    KLOG(Error) << credentials.status();
    return 2;
  }
  WorkerSessionOptions session_options;
  session_options.scheduler = absl::GetFlag(FLAGS_scheduler);
  session_options.job_id = absl::GetFlag(FLAGS_job_id);
  session_options.id = absl::GetFlag(FLAGS_rank);
  session_options.connector = NewGrpcConnector(*credentials);
  session_options.scheduler_timeout = absl::GetFlag(FLAGS_scheduler_timeout);
  session_options.recovery_timeout = absl::GetFlag(FLAGS_recovery_timeout);
  session_options.row_cache = absl::GetFlag(FLAGS_row_cache);
  session_options.row_cache_rows = absl::GetFlag(FLAGS_row_cache_rows);
  session_options.asp_cache_clocks = absl::GetFlag(FLAGS_asp_cache_clocks);
  session_options.clock_gauge = &metrics.clock();
  absl::StatusOr<std::unique_ptr<WorkerSession>> joined = WorkerSession::Join(session_options);
  if (absl::IsOutOfRange(joined.status())) {  // an elastic job removed this worker when it did not come back
    KLOG(Info) << "not rejoining: " << joined.status().message();
    return 0;
  }
  if (!joined.ok()) {
    KLOG(Error) << joined.status();
    return absl::IsFailedPrecondition(joined.status()) ? 3 : 1;
  }
  WorkerSession& session = **joined;
  if (absl::Status tb = metrics.OpenTensorBoard(absl::GetFlag(FLAGS_tensorboard_dir), session.id()); !tb.ok()) {
    KLOG(Error) << "--tensorboard_dir: " << tb;
    return 1;
  }
  if (session.pass().rank == 0 && job.data().test_files().empty()) {
    KLOG(Error) << "worker 0 evaluates the model: set data.test_files or give --test_files";
    return 2;
  }
  // Each pass trains from (clock, state) in the job's layout as of the pass; a rollback (a server died and every
  // server restored the last checkpoint) or a rescale ends the pass with an error, and the session opens the
  // next one from the checkpoint, or from the same clock in the new layout.
  while (true) {
    const WorkerPass& pass = session.pass();
    TrainerOptions options;
    options.job = job;
    options.schema = schema;  // resolved once (CheckJob), for every pass
    options.rank = pass.rank;
    options.num_workers = pass.num_workers;
    options.partition = pass.partition;
    options.start_clock = pass.clock;
    options.start_state = pass.state;
    options.prefetch_pulls = pass.consistency.prefetch_pulls();
    options.overlap_pushes = pass.consistency.overlap_pushes();
    options.evaluate = pass.rank == 0;
    options.row_cache = session.row_cache();
    if (options.row_cache != nullptr) options.row_cache_own_clock = pass.consistency.row_cache_own_clock();
    metrics.SetRowCache(session.row_cache());
    options.metrics_path = absl::GetFlag(FLAGS_metrics_out);
    options.line_log = absl::GetFlag(FLAGS_line_log);
    options.observer = metrics.Observer();
    KLOG(Info) << "training with " << pass.num_servers << " servers, " << pass.num_workers << " workers, "
               << pass.consistency.ToString() << " from clock " << pass.clock << " (generation " << pass.generation
               << ")";
    absl::StatusOr<TrainResult> result;
    const StepRpcs rpcs_before = StepRpcs::Now();
    {
      Trainer trainer(options, session.client(), session.gate(), backend);
      result = trainer.Run();
    }
    metrics.SetRowCache(nullptr);
    if (const RowCache* cache = session.row_cache()) {
      const RowCacheStats stats = cache->stats();
      KLOG(Info) << absl::StrFormat("row cache: %d keys answered from it, %d pulled (hit ratio %.3f), %d rows held",
                                    stats.hits, stats.misses, stats.hit_ratio(), stats.rows);
    }
    if (result.ok()) {
      Report(*result);
      ReportRpcs(rpcs_before, result->steps);
      // The final model is settled (Trainer waited for it) and evaluated: the servers may go.
      if (absl::Status s = session.Leave(pass.clock + result->steps); !s.ok()) {
        KLOG(Warning) << "telling the scheduler this worker leaves: " << s;
      }
      return 0;
    }
    absl::Status recovered = session.Recover(result.status());
    if (absl::IsOutOfRange(recovered)) {
      KLOG(Info) << recovered.message();
      return 0;
    }
    if (absl::IsFailedPrecondition(recovered)) {
      KLOG(Error) << recovered;
      return 3;
    }
    if (!recovered.ok()) {
      KLOG(Error) << "training failed: " << recovered;
      return 1;
    }
    metrics.rejoins().Increment();
  }
}

// --validation_clocks_for: the job's validation clocks on stdout. Exit 0, or 2 for a bad config or data.
int PrintValidationClocks(int workers) {
  absl::StatusOr<JobConfig> job = LoadConfig();
  absl::StatusOr<std::vector<int64_t>> clocks =
      job.ok() ? ValidationClocksOf(*job, workers) : absl::StatusOr<std::vector<int64_t>>(job.status());
  if (!clocks.ok()) {
    KLOG(Error) << "--validation_clocks_for: " << clocks.status();
    return 2;
  }
  std::printf("%s\n", absl::StrJoin(*clocks, ",").c_str());
  return 0;
}

int Run() {
  SetLogIdentity("worker");
  if (const std::string dir = absl::GetFlag(FLAGS_stop_stream); !dir.empty()) {
    absl::StatusOr<std::string> last = TrainStream::Stop(dir);
    if (!last.ok()) {
      KLOG(Error) << "--stop_stream: " << last.status();
      return 2;
    }
    std::printf("%s\n", last->c_str());
    return 0;
  }
  if (const int workers = absl::GetFlag(FLAGS_validation_clocks_for); workers != 0) {
    if (workers < 0 || workers > kMaxWorkers) {
      KLOG(Error) << "--validation_clocks_for: " << workers << " workers is not in [1, " << kMaxWorkers << "]";
      return 2;
    }
    return PrintValidationClocks(workers);
  }
  if (!absl::GetFlag(FLAGS_local)) {  // identity: explicit flags first, then the launcher's environment
    ExplicitSettings flags;
    flags.rank = absl::GetFlag(FLAGS_rank);
    flags.scheduler = absl::GetFlag(FLAGS_scheduler);
    flags.rank_offset = absl::GetFlag(FLAGS_rank_offset);
    absl::StatusOr<ClusterIdentity> id =
        ResolveClusterIdentity(ClusterRole::kWorker, flags, ProcessEnvironment(), ProcessHostname());
    if (!id.ok()) {
      KLOG(Error) << "cannot tell which worker this is: " << id.status();
      return 2;
    }
    absl::SetFlag(&FLAGS_rank, id->rank);
    absl::SetFlag(&FLAGS_scheduler, id->scheduler);
    if (id->source != "flags" && !id->source.empty()) KLOG(Info) << "identity: " << id->DebugString();
  }
  absl::StatusOr<JobConfig> job = LoadConfig();
  if (!job.ok()) {
    KLOG(Error) << job.status();
    return 2;
  }
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      NewBackend(absl::GetFlag(FLAGS_device), absl::GetFlag(FLAGS_compute_threads));
  if (!backend.ok()) {
    KLOG(Error) << backend.status();
    return 2;
  }
  KLOG(Info) << "compute backend: " << (*backend)->name();
  const bool local = absl::GetFlag(FLAGS_local);
  if (!local && absl::GetFlag(FLAGS_scheduler).empty()) {
    KLOG(Error) << "give --scheduler=host:port (or --local)";
    return 2;
  }
  if (!local && !(absl::GetFlag(FLAGS_predictions_out).empty() && absl::GetFlag(FLAGS_export_dir).empty())) {
    KLOG(Error) << "--predictions_out and --export_dir are for --local runs (a cluster: kestrel_export and "
                   "kestrel_predict on its checkpoint)";
    return 2;
  }
  JobCheckOptions check;
  check.needs_test_files = local;  // it evaluates (a cluster's worker 0 is known once registered)
  absl::StatusOr<std::shared_ptr<const Schema>> schema = CheckJob(*job, backend->get(), check);
  if (!schema.ok()) {
    KLOG(Error) << "the job cannot train: " << schema.status().message();
    return 2;
  }
  if (const std::string dir = absl::GetFlag(FLAGS_export_dir); !dir.empty()) {
    if (absl::Status target = CheckExportTarget(dir); !target.ok()) {
      KLOG(Error) << "--export_dir: " << target.message();
      return 2;
    }
  }
  if (const std::string path = absl::GetFlag(FLAGS_predictions_out); !path.empty()) {
    if (absl::Status writable = WritePredictions(path, {}); !writable.ok()) {  // rewritten after training
      KLOG(Error) << "--predictions_out: " << writable.message();
      return 2;
    }
  }
  if (absl::Status started = StartRecordFile(absl::GetFlag(FLAGS_metrics_out), absl::GetFlag(FLAGS_metrics_append));
      !started.ok()) {
    KLOG(Error) << "--metrics_out: " << started.message();
    return 2;
  }
  absl::StatusOr<std::unique_ptr<MetricsServer>> metrics_server = MetricsServer::Start(MetricsServerOptionsFromFlags());
  if (!metrics_server.ok()) {
    KLOG(Error) << "--metrics_port: " << metrics_server.status();
    return absl::IsInvalidArgument(metrics_server.status()) ? 2 : 1;
  }
  WorkerMetrics metrics;
  if (local) {
    if (absl::Status tb = metrics.OpenTensorBoard(absl::GetFlag(FLAGS_tensorboard_dir), 0); !tb.ok()) {
      KLOG(Error) << "--tensorboard_dir: " << tb;
      return 1;
    }
    LocalTrainingOptions options;
    options.num_servers = absl::GetFlag(FLAGS_local_servers);
    options.server_threads = absl::GetFlag(FLAGS_local_server_threads);
    options.metrics_path = absl::GetFlag(FLAGS_metrics_out);
    options.observer = metrics.Observer();
    options.predictions_path = absl::GetFlag(FLAGS_predictions_out);
    if (const std::string dir = absl::GetFlag(FLAGS_export_dir); !dir.empty()) {
      options.finish = [dir](const std::vector<Shard*>& servers, const TrainResult& result, const JobConfig& pinned) {
        absl::StatusOr<ExportedModel> exported = ExportServers(servers, pinned, result.steps, dir);
        if (exported.ok()) return absl::OkStatus();
        return absl::Status(exported.status().code(),
                            absl::StrCat("exporting to ", dir, ": ", exported.status().message()));
      };
    }
    options.schema = *schema;
    absl::StatusOr<TrainResult> result = TrainInProcess(*job, backend->get(), options);
    if (!result.ok()) {
      KLOG(Error) << "training failed: " << result.status();
      return 1;
    }
    Report(*result);
    return 0;
  }
  if (HasValidationSplit(*job) && job->train().early_stopping_patience() >= 0) {
    KLOG(Warning) << "a cluster validates after every epoch but trains all " << job->train().epochs()
                  << " epochs: its best validation's model is the checkpoint cut at that clock (kestrel local keeps "
                  << "them with kestrel_scheduler --checkpoint_at_clocks, and exports and scores the best one); "
                  << "train.early_stopping_patience: -1 to keep the last model";
  }
  return RunCluster(*job, *schema, backend->get(), metrics);
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  kestrel::PreferPassiveOpenMpWaiting(argv);
  kestrel::TuneMallocForLargeBuffers();  // the batches and the in-process servers' buffers stay in the heap
  kestrel::ParseCommandLine(argc, argv, "Kestrel training worker: trains a sparse recommendation model.");
  return kestrel::Run();
}
