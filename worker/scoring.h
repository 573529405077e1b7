// Scoring: a model's probabilities for the examples of labeled files, and the metrics of an evaluation. What a
// Trainer's evaluations (test and validation splits) and Trainer::Score run; rows are pulled through the
// iteration's StepExchange as training reads them, never from a row cache.
#ifndef KESTREL_WORKER_SCORING_H_
#define KESTREL_WORKER_SCORING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/partition.h"
#include "proto/job.pb.h"
#include "worker/compute/backend.h"
#include "worker/data/record_reader.h"
#include "worker/data/schema.h"
#include "worker/model.h"
#include "worker/step_exchange.h"
#include "worker/trainer.h"

namespace kestrel {

// What scoring reads with: the job (its data format and batch size), the schema, the partition keys are routed
// by, the model, the exchange its rows come through and the backend of its buffers. All must outlive the call.
struct Scorer {
  const JobConfig* job = nullptr;
  std::shared_ptr<const Schema> schema;
  const Partition* partition = nullptr;
  Model* model = nullptr;
  StepExchange* exchange = nullptr;
  Backend* backend = nullptr;
  int64_t read_clock = 0;  // the clock the pulls carry (iterations done: the current weights)
};

// One probability per example of `files` (at most `limit`; 0: all), in file order, and the labels. `holdout`:
// the lines of `files` read (a validation split held out of the training files; default: every line).
[[nodiscard]] absl::Status ScoreFiles(const Scorer& scorer, const std::vector<std::string>& files, int64_t limit,
                                      std::vector<float>* probs, std::vector<float>* labels,
                                      const ReaderOptions::Holdout& holdout = {});

// What an evaluation reads: the test files, or (`validation`) the validation split — its files, or the lines held
// out of the training files.
struct EvalSplit {
  std::vector<std::string> files;
  ReaderOptions::Holdout holdout;
};
[[nodiscard]] absl::StatusOr<EvalSplit> EvalSplitOf(const DataConfig& data, bool validation);

// The metrics of `probs` against `labels` after `step` iterations, scored in `took`.
EvalResult MetricsOf(int64_t step, const std::vector<float>& probs, const std::vector<float>& labels,
                     absl::Duration took);

}  // namespace kestrel

#endif  // KESTREL_WORKER_SCORING_H_
