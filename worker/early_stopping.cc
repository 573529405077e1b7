#include "worker/early_stopping.h"

#include "common/logging.h"

namespace kestrel {

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
