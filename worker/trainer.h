// Trainer: one worker's training loop and evaluation. It knows nothing of the network: it talks to the
// parameter servers through a PsClient and asks a ClockGate (the scheduler, in a cluster) for permission to
// run each iteration, so the same loop runs a real cluster worker and a single-process trainer.
//
// Per iteration c (a clock):
//   gate.WaitToStart(c) -> pull the batch's unique rows and the dense tensor -> Model::Step (forward +
//   backward on the Backend) -> push the gradients -> gate.Advance(c + 1).
// Under server-enforced clocks (leases) and batches that look up one embedding table, pushes and pulls travel
// together (PsClient::Step: one round trip per server per iteration), answered once the servers hold the
// clocks the read needs. BSP (no prefetching): c's push and c + 1's pull, after c's compute. SSP (prefetching,
// "fused ahead"): c - 1's push and c + 1's pull while c computes (c - 1's gradients kept in the second set of
// buffers), so the read lacks this worker's own c as a prefetched one does. The read need not be permitted yet
// (a lease end): it only reads, and nothing but a rollback, which restarts the worker, changes those rows before
// the worker may run it; the permission is asked for after the Step. The first iteration's pull, the last
// one's push and evaluations use the separate calls.
// A reader thread reads and parses the next batches and a preparer thread key-batches them (dedup, sort,
// segments), both while the current one computes. With prefetch_pulls (ASP, or SSP with staleness >= 1, where
// reading one clock earlier is allowed), the next iteration's permission and pulls also run during the current
// one's compute and push. With overlap_pushes (ASP), each push and its gate.Advance also run during the next
// iteration's compute, into a second set of gradient buffers; the push of c - 1 is acknowledged before c's
// starts. (Not under SSP: there the next pulls may wait for this worker's own Advance, and a failed push would
// leave them waiting.)
//
// Steps: every worker runs the same number of iterations, epochs * ceil(largest share / batch_size) capped by
// max_steps, so BSP barriers always complete: every line is trained once per epoch, and a worker whose share is
// shorter trains a short batch, then empty ones (an empty batch computes nothing and pushes empty parts, which
// BSP counts as this worker's part of the clock). With train.drop_last, epochs * floor(smallest share /
// batch_size), the rest of each share unread. Worker `rank` of `num_workers` reads the training lines whose
// position in the epoch's order (file order, or shuffled with train.shuffle_buffer: worker/data/line_shuffle.h)
// is rank modulo num_workers.
//
// Every worker waits at the end until all have finished (a rollback in the meantime makes Run() fail with the
// gate's error, so the caller can rejoin and continue from the checkpoint).
//
// Evaluation (when `evaluate`): every eval_every_steps and at the end, on the test files: logloss, exact AUC,
// examples/s, and a fingerprint of every prediction's bits (equal fingerprints: identical models on the test
// data). Progress lines go to the log; records (one JSON object per line) to metrics_path.
//
// Inside, the batches come through a BatchPipeline (worker/batch_pipeline.h: the reader and preparer threads) and
// each iteration's pulls and pushes go through a StepExchange (worker/step_exchange.h).
//
// Thread-compatible: one Run() at a time. The PsClient, ClockGate and Backend must outlive the Trainer.
#ifndef KESTREL_WORKER_TRAINER_H_
#define KESTREL_WORKER_TRAINER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/partition.h"
#include "proto/checkpoint.pb.h"
#include "proto/job.pb.h"
#include "worker/compute/backend.h"
#include "worker/data/schema.h"
#include "worker/clock_gate.h"
#include "worker/phase_clock.h"
#include "worker/ps_client.h"
#include "worker/row_cache.h"

namespace kestrel {

// (ClockGate, how a worker asks for permission to run an iteration, is in worker/clock_gate.h.)

// (PhaseTimes, where a worker's training time went, is in worker/phase_clock.h.)

// One train, eval or done record, as the Trainer writes to metrics_path, for TrainerOptions::observer.
struct TrainerEvent {
  enum class Kind { kTrain, kEval, kValidation, kDone };
  Kind kind = Kind::kTrain;
  int64_t step = 0;       // iterations done (kDone: iterations this worker ran)
  int64_t examples = 0;   // kTrain: examples of the log window; kEval: test examples; kDone: all trained
  double logloss = 0;     // kTrain, kDone: mean over the (last) log window; kEval: on the test files
  double auc = 0;         // kEval, kValidation only
  double examples_per_second = 0;
  PhaseTimes phases;      // kTrain, kDone: since the start of Run()
};

struct TrainerOptions {
  JobConfig job;               // defaults of unset fields applied by the Trainer
  // The job's data format, resolved from `job` (worker/job_check.h CheckJob returns it). Default: null: the
  // Trainer resolves it (which may read the data files: libsvm's slot count, STANDARDIZE statistics).
  std::shared_ptr<const Schema> schema;
  int rank = 0;                // this worker. Default: 0.
  int num_workers = 1;         // Default: 1.
  Partition partition = *Partition::Uniform(1);  // the servers' partition (groups keys by server): the client's
  int64_t start_clock = 0;     // iterations already done (a replacement worker continues there). Default: 0.
  // Where this rank's reader was at start_clock (from the scheduler or a checkpoint); without a reader position
  // the worker re-reads its epoch from the start and skips the batches before start_clock. Default: none.
  WorkerState start_state;
  bool prefetch_pulls = false; // see the class comment. Default: false.
  bool overlap_pushes = false; // see the class comment; needs prefetch_pulls. Default: false.
  // One worker whose servers hear no one else, with unbounded tables (kestrel_worker --local): while an iteration
  // computes, the rows of the next batch's keys it does not push are pulled; after its push, the rest and the dense
  // tensor (worker/pull_split.h): the same rows as one pull after the push, with most of the pull off the loop.
  // Not with prefetch_pulls. Default: false.
  bool split_pulls = false;
  bool evaluate = true;        // run the evaluations. Default: true (a cluster: worker 0 only).
  bool create_tables = true;   // create the model's tables on the servers first (idempotent). Default: true.
  std::string metrics_path;    // JSON-lines records (proto/records.proto); empty: none. Default: none.
  // An audit of the data order: for every iteration this worker trains, a line "<clock> <epoch> <line>..." with
  // the global index of each training line in its batch (its place among the files' data lines, shuffled or not),
  // appended to this file. Default: none.
  std::string line_log;
  // Called with every record, on the thread running Run() or Evaluate() (e.g. to export metrics); must not
  // block. Default: none.
  std::function<void(const TrainerEvent&)> observer;
  // The row cache the Trainer's PsClient is (worker/row_cache.h), if any: the done record reports its hit ratio
  // and rows. Pulls and pushes reach it through the client. Must outlive the Trainer. Default: none.
  const RowCache* row_cache = nullptr;
  // The freshness training reads tell a row cache (CacheRead::fresh_clock): true, the read's own clock (ASP: no
  // min clock; rows serve reads the cache's bound of the worker's own clocks after their pull); false, the gate's
  // known min clock before the pull (SSP). Default: false = SSP.
  bool row_cache_own_clock = false;
  // Early stopping (TrainConfig.early_stopping_patience, with validation files): `keep_best(step)` keeps the
  // model after `step` iterations, whose validation beat every earlier one; `restore_best()` brings the last one
  // kept back once training ends with a worse model (no request runs meanwhile). Default: none (the servers are
  // elsewhere: every epoch trains, and the result is the last model).
  std::function<absl::Status(int64_t step)> keep_best;
  std::function<absl::Status()> restore_best;
  // Benchmarks only (bench/pipeline_ceiling_bench.cc): instead of the model's forward and backward pass, each
  // batch waits this long and pushes zero gradients, as a host waits for a GPU computing the step. What the host
  // side feeds then (reading, key batching, pulls, pushes, the servers' optimizers) is the pipeline's ceiling,
  // measured without a GPU. Default: none (the model computes).
  std::optional<absl::Duration> stand_in_compute;
};

struct EvalResult {
  int64_t step = 0;
  int64_t examples = 0;
  double logloss = 0;
  double auc = 0;
  double examples_per_second = 0;
  uint64_t fingerprint = 0;  // hash of every prediction's float bits, in file order
};

struct TrainResult {
  int64_t steps = 0;     // iterations this worker ran
  int64_t examples = 0;  // training examples this worker processed
  double seconds = 0;    // training wall time (evaluations excluded)
  double examples_per_second = 0;
  double train_logloss = 0;  // mean over the last log window
  PhaseTimes phases;         // where the training time went
  EvalResult eval;           // the final evaluation (when evaluate): of the best validation's model, if kept
  // Evaluate with data.validation_files: the validation split after each epoch, in order.
  std::vector<EvalResult> validations;
  // Early stopping (TrainerOptions::keep_best): the step of the model the result is, and whether training
  // stopped before its last epoch.
  int64_t best_step = -1;
  bool stopped_early = false;
};

class Trainer {
 public:
  Trainer(TrainerOptions options, PsClient* client, ClockGate* gate, Backend* backend);
  ~Trainer();

  // Trains to the end and evaluates.
  [[nodiscard]] absl::StatusOr<TrainResult> Run();
  // Evaluates the current model on the test files.
  [[nodiscard]] absl::StatusOr<EvalResult> Evaluate(int64_t step);
  // Scores the examples of `files` with the current model (what Evaluate does, without the metrics): one
  // probability per example in file order (at most `limit`; 0: all) and the examples' labels.
  [[nodiscard]] absl::Status Score(const std::vector<std::string>& files, int64_t limit, std::vector<float>* probs,
                     std::vector<float>* labels);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// The number of iterations every worker runs: epochs * ceil(largest share / batch_size) (train.drop_last: epochs *
// floor(smallest share / batch_size)), capped by max_steps. FailedPrecondition when that is 0: no data lines, or
// with drop_last a share smaller than one batch.
[[nodiscard]] absl::StatusOr<int64_t> IterationsOf(const JobConfig& job, int num_workers);
// The clocks (iterations done) after which worker 0 of such a job validates before its last iteration
// (worker/early_stopping.h ValidatesAfter; the last iteration's validation is the final model's), ascending:
// the checkpoints a cluster keeps to end with the best validation's model (scheduler --checkpoint_at_clocks).
// Empty without a validation split, or with train.early_stopping_patience -1 (the last model is the job's).
[[nodiscard]] absl::StatusOr<std::vector<int64_t>> ValidationClocksOf(const JobConfig& job, int num_workers);

// The job config with every unset field given its documented default.
JobConfig JobWithDefaults(JobConfig job);

}  // namespace kestrel

#endif  // KESTREL_WORKER_TRAINER_H_
