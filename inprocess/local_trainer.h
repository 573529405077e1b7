// Single-process training: the model's tables on in-process Shards (the servers' own code, no network), one
// worker. The baseline of bench/train_bench and what `kestrel_worker --local` runs; it can also score the test
// files and hand the trained servers to a last step (kestrel_worker exports them), so one process trains, scores
// and hands over a serving artifact.
#ifndef KESTREL_INPROCESS_LOCAL_TRAINER_H_
#define KESTREL_INPROCESS_LOCAL_TRAINER_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"
#include "server/shard.h"
#include "worker/compute/backend.h"
#include "worker/data/schema.h"
#include "worker/trainer.h"

namespace kestrel {

// LocalTrainingOptions::server_threads -1: a quarter of the usable cores (common/usable_cores.h), at most 4 (none on
// fewer than 8, where the reader, the preparer and the trainer keep every core busy).
int DefaultServerThreads();
// The most server threads LocalTrainingOptions::server_threads may ask for.
inline constexpr int kMaxServerThreads = 64;

struct LocalTrainingOptions {
  int num_servers = 1;          // in-process servers. Default: 1.
  // Threads besides the trainer's that apply the in-process servers' large pulls and pushes, stripe by stripe
  // (ShardOptions::stripe_pool: the same result as none), at most kMaxServerThreads (more, or below -1, is an
  // InvalidArgument). Default: -1 = DefaultServerThreads().
  int server_threads = -1;
  // TrainerOptions::split_pulls (never with a bounded table, whose pushes may evict other rows): 1 on, 0 off, -1 on
  // when the backend computes on an accelerator (Backend::accelerator: a GPU computes while the host pulls; the CPU
  // backend's compute already keeps every core busy). Default: -1.
  int split_pulls = -1;
  std::string metrics_path;    // JSON-lines records; empty: none. Default: none.
  std::function<void(const TrainerEvent&)> observer;  // TrainerOptions::observer. Default: none.
  // Called with the in-process servers before training (e.g. to give bounded tables a disk tier:
  // Shard::SetColdTier). Default: none.
  std::function<void(const std::vector<Shard*>&)> prepare;
  // Called with the in-process servers once training ended (e.g. to read their tables' statistics).
  // Default: none.
  std::function<void(const std::vector<Shard*>&)> inspect;
  // After training: the trained model's probability for every example of the job's test files (all of them,
  // whatever train.eval_max_examples), in file order, written here as kestrel_predict --output writes them
  // (worker/records.h WritePredictions). Default: none.
  std::string predictions_path;
  // Called last, once training ended and the predictions are written, with the in-process servers, the result
  // and the job with its format as the schema resolved it (Schema::Pinned): kestrel_worker exports the trained
  // tables there (export/export.h ExportServers). Its error is the run's. Default: none.
  std::function<absl::Status(const std::vector<Shard*>& servers, const TrainResult& result, const JobConfig& pinned)>
      finish;
  // TrainerOptions::stand_in_compute (benchmarks: the pipeline's ceiling without the model's compute). Default:
  // none.
  std::optional<absl::Duration> stand_in_compute;
  // The job's data format, resolved (TrainerOptions::schema). Default: null: resolved here.
  std::shared_ptr<const Schema> schema;
};

// Trains `job` on `options.num_servers` in-process servers, evaluates, then writes the predictions and runs the
// last step that `options` asks for. An error names the step that failed.
[[nodiscard]] absl::StatusOr<TrainResult> TrainInProcess(const JobConfig& job, Backend* backend,
                                           const LocalTrainingOptions& options = {});

}  // namespace kestrel

#endif  // KESTREL_INPROCESS_LOCAL_TRAINER_H_
