// The job a Trainer runs, with its defaults filled in, and how many iterations that is (worker/trainer.h).
#include "worker/trainer.h"

#include "worker/model.h"
#include "worker/training_feed.h"

namespace kestrel {

JobConfig JobWithDefaults(JobConfig job) {
  *job.mutable_model() = WithDefaults(job.model());
  TrainConfig& t = *job.mutable_train();
  if (t.batch_size() <= 0) t.set_batch_size(512);
  if (t.epochs() <= 0) t.set_epochs(1);
  if (t.log_every_steps() <= 0) t.set_log_every_steps(100);
  return job;
}

absl::StatusOr<int64_t> IterationsOf(const JobConfig& job, int num_workers) {
  return PlainIterations(JobWithDefaults(job), num_workers);
}

}  // namespace kestrel
