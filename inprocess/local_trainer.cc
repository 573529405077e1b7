#include "inprocess/local_trainer.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/thread_pool.h"
#include "inprocess/model_snapshot.h"
#include "common/usable_cores.h"
#include "server/shard.h"
#include "inprocess/local_ps_client.h"
#include "worker/model.h"
#include "worker/records.h"

namespace kestrel {

int DefaultServerThreads() {
  const int cores = UsableCores();
  return cores < 8 ? 0 : std::min(cores / 4, 4);
}

absl::StatusOr<TrainResult> TrainInProcess(const JobConfig& job, Backend* backend,
                                           const LocalTrainingOptions& options) {
  KESTREL_ASSIGN_OR_RETURN(Partition partition, Partition::Uniform(options.num_servers));
  if (options.server_threads < -1 || options.server_threads > kMaxServerThreads) {
    return absl::InvalidArgumentError(absl::StrCat("--local_server_threads is ", options.server_threads,
                                                   ": it must be -1 (the default) or 0 to ", kMaxServerThreads));
  }
  const int server_threads = options.server_threads >= 0 ? options.server_threads : DefaultServerThreads();
  // Declared before the shards: it outlives them.
  std::unique_ptr<ThreadPool> stripe_pool = server_threads > 0 ? std::make_unique<ThreadPool>(server_threads) : nullptr;
  std::vector<std::unique_ptr<Shard>> shards;
  std::vector<Shard*> views;
  for (int s = 0; s < options.num_servers; ++s) {
    ShardOptions shard_options;
    shard_options.owner = s;
    shard_options.stripe_pool = stripe_pool.get();
    KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<Shard> shard, Shard::Create(shard_options, partition));
    views.push_back(shard.get());
    shards.push_back(std::move(shard));
  }
  if (options.prepare) options.prepare(views);
  std::unique_ptr<PsClient> client = NewLocalPsClient(PsClientOptions(), views);
  std::unique_ptr<ClockGate> gate = NewSingleWorkerGate();
  std::shared_ptr<const Schema> schema = options.schema;
  if (schema == nullptr) {
    KESTREL_ASSIGN_OR_RETURN(schema, Schema::Resolve(job.data(), WithDefaults(job.model())));
  }
  TrainerOptions trainer_options;
  trainer_options.job = job;
  trainer_options.schema = schema;
  trainer_options.partition = partition;
  trainer_options.metrics_path = options.metrics_path;
  trainer_options.observer = options.observer;
  trainer_options.stand_in_compute = options.stand_in_compute;
  // One worker, and servers only it reaches: the next batch's rows this batch does not push can be pulled while it
  // computes (exact for unbounded tables; a bounded table's push may evict or expire other rows).
  const bool split = options.split_pulls < 0 ? backend->accelerator() : options.split_pulls > 0;
  trainer_options.split_pulls = split && !job.model().has_sparse_capacity();
  // Early stopping: the best validation's model is kept in memory, and comes back at the end.
  ModelSnapshot best;
  trainer_options.keep_best = [&](int64_t) { return best.Take(views); };
  trainer_options.restore_best = [&] { return best.Restore(views); };
  Trainer trainer(trainer_options, client.get(), gate.get(), backend);
  absl::StatusOr<TrainResult> result = trainer.Run();
  if (!result.ok()) return result;
  if (options.inspect) options.inspect(views);
  if (!options.predictions_path.empty()) {
    const std::vector<std::string> files(job.data().test_files().begin(), job.data().test_files().end());
    std::vector<float> probs, labels;
    if (absl::Status scored = trainer.Score(files, /*limit=*/0, &probs, &labels); !scored.ok()) {
      return absl::Status(scored.code(), absl::StrCat("scoring the test files: ", scored.message()));
    }
    KESTREL_RETURN_IF_ERROR(WritePredictions(options.predictions_path, probs));
    KLOG(Info) << "wrote " << probs.size() << " predictions of the test files to " << options.predictions_path;
  }
  if (options.finish) {
    // With what the schema read from the data files written in (libsvm's slots, STANDARDIZE statistics), so
    // an export neither reads them again nor needs them to score.
    JobConfig pinned = job;
    *pinned.mutable_data() = schema->Pinned(job.data());
    KESTREL_RETURN_IF_ERROR(options.finish(views, *result, pinned));
  }
  return result;
}

}  // namespace kestrel
