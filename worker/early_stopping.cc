#include "worker/early_stopping.h"

#include "common/logging.h"

namespace kestrel {

bool HasValidationSplit(const JobConfig& job) {
  return job.data().validation_files_size() > 0 || job.data().validation_every() > 0 ||
         !job.data().validation_column().empty();
}

bool ValidatesAfter(const JobConfig& job, int64_t done, int64_t epoch_end) {
  const int64_t every = job.train().validation_every_steps();
  return HasValidationSplit(job) && (done == epoch_end || (every > 0 && done % every == 0));
}

absl::Status EarlyStopping::Validated(const EvalResult& r, TrainResult* result) {
  result->validations.push_back(r);
  if (!keep_best_ || patience_ < 0) return absl::OkStatus();
  if (result->best_step < 0 || r.logloss < best_logloss_) {
    result->best_step = r.step;
    best_logloss_ = r.logloss;
    return keep_best_(r.step);
  }
  int worse = 0;
  for (auto v = result->validations.rbegin(); v != result->validations.rend() && v->step > result->best_step; ++v) {
    ++worse;
  }
  if (worse >= patience_) {
    result->stopped_early = true;
    KLOG(Info) << "early stopping after step " << r.step << ": " << worse << " validations in a row did not beat "
               << "step " << result->best_step << "'s validation logloss " << best_logloss_;
  }
  return absl::OkStatus();
}

}  // namespace kestrel
