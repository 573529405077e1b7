// The job a Trainer runs, with its defaults filled in, and how many iterations that is (worker/trainer.h).
#include "worker/trainer.h"

#include "common/status.h"
#include "worker/early_stopping.h"
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

absl::StatusOr<std::vector<int64_t>> ValidationClocksOf(const JobConfig& config, int num_workers) {
  const JobConfig job = JobWithDefaults(config);
  std::vector<int64_t> clocks;
  if (!HasValidationSplit(job) || job.train().early_stopping_patience() < 0) return clocks;
  KESTREL_ASSIGN_OR_RETURN(const EpochSchedule schedule, PlainSchedule(job, num_workers));
  for (int64_t done = 1; done < schedule.total(); ++done) {
    if (ValidatesAfter(job, done, schedule.At(done - 1).end)) clocks.push_back(done);
  }
  return clocks;
}

}  // namespace kestrel
