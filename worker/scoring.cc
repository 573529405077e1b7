#include "worker/scoring.h"

#include <algorithm>
#include <memory>

#include "common/evaluation.h"
#include "common/status.h"
#include "worker/batch_pipeline.h"
#include "worker/batch_reader.h"

namespace kestrel {

absl::Status ScoreFiles(const Scorer& scorer, const std::vector<std::string>& files, int64_t limit,
                        std::vector<float>* probs, std::vector<float>* labels, const ReaderOptions::Holdout& holdout) {
  const JobConfig& job = *scorer.job;
  ReaderOptions options = ReaderOptionsFor(job.data());
  options.holdout = holdout;
  KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<BatchReader> reader, BatchReader::Open(scorer.schema, files, options));
  StepData step_data(scorer.backend);
  step_data.read = CallClock{scorer.read_clock};  // never from a row cache
  std::vector<float> batch_probs;
  probs->clear();
  labels->clear();
  while (limit == 0 || static_cast<int64_t>(probs->size()) < limit) {
    int64_t want = job.train().batch_size();
    if (limit > 0) want = std::min<int64_t>(want, limit - static_cast<int64_t>(probs->size()));
    KESTREL_ASSIGN_OR_RETURN(const int64_t got, reader->Fill(want, &step_data.batch.batch));
    if (got == 0) break;
    step_data.batch.Prepare(*scorer.partition, scorer.schema->field_tables(), scorer.schema->num_tables());
    KESTREL_RETURN_IF_ERROR(scorer.exchange->Pull(&step_data));
    batch_probs.resize(got);
    KESTREL_RETURN_IF_ERROR(
        scorer.model
            ->Step(step_data.batch, {step_data.wide.data(), step_data.emb.data(), step_data.dense.data()}, nullptr,
                   batch_probs.data())
            .status());
    probs->insert(probs->end(), batch_probs.begin(), batch_probs.end());
    labels->insert(labels->end(), step_data.batch.batch.labels.begin(), step_data.batch.batch.labels.end());
  }
  return absl::OkStatus();
}

absl::StatusOr<EvalSplit> EvalSplitOf(const DataConfig& data, bool validation) {
  EvalSplit split;
  KESTREL_ASSIGN_OR_RETURN(split.holdout, validation ? TrainingHoldout(data) : ReaderOptions::Holdout{});
  split.holdout.validation = true;
  const auto& names = !validation ? data.test_files() : split.holdout.active() ? data.train_files() : data.validation_files();
  split.files.assign(names.begin(), names.end());
  return split;
}

EvalResult MetricsOf(int64_t step, const std::vector<float>& probs, const std::vector<float>& labels,
                     absl::Duration took) {
  EvalResult r;
  r.step = step;
  r.examples = static_cast<int64_t>(probs.size());
  r.logloss = LogLoss(probs, labels);
  r.auc = ExactAuc(probs, labels);
  const double seconds = absl::ToDoubleSeconds(took);
  r.examples_per_second = seconds > 0 ? r.examples / seconds : 0;
  r.fingerprint = PredictionFingerprint(probs);
  return r;
}

}  // namespace kestrel
