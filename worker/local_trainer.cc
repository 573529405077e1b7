#include "worker/local_trainer.h"

#include <memory>
#include <vector>

#include "common/status.h"
#include "server/shard.h"
#include "worker/local_ps_client.h"

namespace kestrel {

absl::StatusOr<TrainResult> TrainInProcess(const JobConfig& job, Backend* backend,
                                           const LocalTrainingOptions& options) {
  KESTREL_ASSIGN_OR_RETURN(Partition partition, Partition::Uniform(options.num_servers));
  std::vector<std::unique_ptr<Shard>> shards;
  std::vector<Shard*> views;
  for (int s = 0; s < options.num_servers; ++s) {
    ShardOptions shard_options;
    shard_options.owner = s;
    KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<Shard> shard, Shard::Create(shard_options, partition));
    views.push_back(shard.get());
    shards.push_back(std::move(shard));
  }
  std::unique_ptr<PsClient> client = NewLocalPsClient(PsClientOptions(), views);
  std::unique_ptr<ClockGate> gate = NewSingleWorkerGate();
  TrainerOptions trainer_options;
  trainer_options.job = job;
  trainer_options.partition = partition;
  trainer_options.metrics_path = options.metrics_path;
  trainer_options.observer = options.observer;
  Trainer trainer(trainer_options, client.get(), gate.get(), backend);
  absl::StatusOr<TrainResult> result = trainer.Run();
  if (result.ok() && options.inspect) options.inspect(views);
  return result;
}

}  // namespace kestrel
