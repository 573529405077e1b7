#include "worker/trainer_records.h"

#include "absl/strings/str_cat.h"
#include "worker/records.h"

namespace kestrel {

std::string StepsText(int64_t steps) { return steps == INT64_MAX ? "?" : absl::StrCat(steps); }

Record TrainRecord(int worker, int64_t done, int64_t steps, double logloss, double examples_per_second) {
  Record record;
  record.set_kind("train");
  record.set_worker(worker);
  record.set_step(done);
  if (steps != INT64_MAX) record.set_steps(steps);  // a stream's is open (worker/training_feed.h kStreamOpen)
  record.set_logloss(logloss);
  record.set_examples_per_second(examples_per_second);
  return record;
}

Record DoneRecord(int worker, const TrainResult& result, const RowCache* cache) {
  Record record;
  record.set_kind("done");
  record.set_worker(worker);
  record.set_steps(result.steps);
  if (cache != nullptr) {
    const RowCacheStats stats = cache->stats();
    record.set_row_cache_hit_ratio(stats.hit_ratio());
    record.set_row_cache_rows(static_cast<double>(stats.rows));
  }
  record.set_examples(result.examples);
  record.set_seconds(result.seconds);
  record.set_examples_per_second(result.examples_per_second);
  PhaseSeconds* phases = record.mutable_phases();
  phases->set_read(result.phases.read);
  phases->set_batch(result.phases.batch);
  phases->set_pull(result.phases.pull);
  phases->set_compute(result.phases.compute);
  phases->set_push(result.phases.push);
  phases->set_wait(result.phases.wait);
  return record;
}

Record EvalRecord(int worker, const EvalResult& eval, const char* kind) {
  Record record;
  record.set_kind(kind);
  record.set_worker(worker);
  record.set_step(eval.step);
  record.set_examples(eval.examples);
  record.set_logloss(eval.logloss);
  record.set_auc(eval.auc);
  record.set_examples_per_second(eval.examples_per_second);
  record.set_fingerprint(FingerprintHex(eval.fingerprint));
  return record;
}

}  // namespace kestrel
