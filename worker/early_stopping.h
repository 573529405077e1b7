// EarlyStopping: which model a run with a validation split ends with (TrainConfig.early_stopping_patience).
// After each validation (at each epoch's end, and every TrainConfig.validation_every_steps) the model is kept when its validation logloss beats every earlier one's
// (`keep_best`), and training stops once `patience` validations in a row did not. The Trainer then brings the
// kept model back for its test evaluation, predictions and export (TrainerOptions::restore_best).
//
// Thread-compatible: the training loop's thread calls it.
#ifndef KESTREL_WORKER_EARLY_STOPPING_H_
#define KESTREL_WORKER_EARLY_STOPPING_H_

#include <cstdint>
#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "proto/job.pb.h"
#include "worker/trainer.h"

namespace kestrel {

// Whether `job` has a validation split (DataConfig.validation_files, validation_every or validation_column).
bool HasValidationSplit(const JobConfig& job);
// Whether a job with a validation split validates after step `done` of an epoch ending after step `epoch_end`:
// at the epoch's end, and every TrainConfig.validation_every_steps.
bool ValidatesAfter(const JobConfig& job, int64_t done, int64_t epoch_end);

class EarlyStopping {
 public:
  // Default patience when the config says 0.
  static constexpr int kDefaultPatience = 2;

  // `patience`: TrainConfig.early_stopping_patience (0: kDefaultPatience; < 0: never stop, keep nothing).
  // `keep_best` null: nothing is kept and training never stops early (validations are only recorded).
  EarlyStopping(int patience, std::function<absl::Status(int64_t step)> keep_best)
      : patience_(patience == 0 ? kDefaultPatience : patience), keep_best_(std::move(keep_best)) {}

  // Records validation `r` in `result` (validations, best_step, stopped_early), keeping the model when it is
  // the best so far. keep_best's error.
  [[nodiscard]] absl::Status Validated(const EvalResult& r, TrainResult* result);

 private:
  const int patience_;
  const std::function<absl::Status(int64_t)> keep_best_;
  double best_logloss_ = 0;
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_EARLY_STOPPING_H_
