// Single-process training: the model's tables on in-process Shards (the servers' own code, no network), one
// worker. The baseline of bench/train_bench and what `kestrel_worker --local` runs.
#ifndef KESTREL_WORKER_LOCAL_TRAINER_H_
#define KESTREL_WORKER_LOCAL_TRAINER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "server/shard.h"
#include "worker/compute/backend.h"
#include "worker/trainer.h"

namespace kestrel {

struct LocalTrainingOptions {
  int num_servers = 1;          // in-process servers. Default: 1.
  std::string metrics_path;    // JSON-lines records; empty: none. Default: none.
  std::function<void(const TrainerEvent&)> observer;  // TrainerOptions::observer. Default: none.
  // Called with the in-process servers once training ended (e.g. to read their tables' statistics).
  // Default: none.
  std::function<void(const std::vector<Shard*>&)> inspect;
};

absl::StatusOr<TrainResult> TrainInProcess(const JobConfig& job, Backend* backend,
                                           const LocalTrainingOptions& options = {});

}  // namespace kestrel

#endif  // KESTREL_WORKER_LOCAL_TRAINER_H_
