#include "export/score_export.h"

#include <memory>

#include "common/partition.h"
#include "inprocess/local_ps_client.h"
#include "worker/clock_gate.h"
#include "worker/trainer.h"

namespace kestrel {

absl::Status ScoreExport(const LoadedExport& loaded, Backend* backend, const std::vector<std::string>& files,
                         int64_t limit, std::vector<float>* probs, std::vector<float>* labels) {
  PsClientOptions client_options;
  client_options.job_id = loaded.model.job_id();
  std::unique_ptr<PsClient> client = NewLocalPsClient(client_options, {loaded.shard.get()});
  std::unique_ptr<ClockGate> gate = NewSingleWorkerGate();
  TrainerOptions options;
  options.job = loaded.model.job();
  options.partition = *Partition::Uniform(1);
  options.create_tables = false;
  options.evaluate = false;
  Trainer scorer(options, client.get(), gate.get(), backend);
  return scorer.Score(files, limit, probs, labels);
}

}  // namespace kestrel
