// ModelSource: the model a prediction service answers from, and how it changes. Either one export, fixed
// (--model), or a serving directory followed through its manifest (--serving_dir, serving/serving_manifest.h):
// each Refresh() reads the manifest and, when its newest entry is newer than the model served, loads that
// export (its delta chain resolved and every file verified, serving/served_model.h) into a new ServedModel and
// swaps it in with one pointer store. Requests already scoring keep the model they started with (they hold a
// reference); the next ones get the new one; none waits for a load.
//
// A newest entry is refused, and the model served stays, when the manifest is damaged, when the entry is not
// after the served model (its clock at or below the served one's: out of order), when the export it names is
// damaged or incomplete (DataLoss: a truncated or corrupt delta, a file that fails its CRC-32C, a MODEL other
// than the manifest pins), or when it belongs to another job. The refusal is logged once, counted, and kept as
// last_error() until a later entry loads; the same entry is not tried again until the manifest changes.
//
// Thread-safe: current() and the counters from any thread; Refresh() from one thread at a time (the service's
// poller). Owns the models it loaded until the last request using one lets it go.
#ifndef KESTREL_SERVING_MODEL_SOURCE_H_
#define KESTREL_SERVING_MODEL_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "serving/served_model.h"

namespace kestrel {

struct ModelSourceOptions {
  // One export served as it is (a directory holding MODEL). Default: none.
  std::string model_dir;
  // A serving directory whose manifest names the exports to serve, newest last. Default: none. Exactly one of
  // the two is required.
  std::string serving_dir;
};

class ModelSource {
 public:
  // With model_dir: loads it (its errors; nothing is served without it). With serving_dir: loads the newest
  // entry if the manifest has one (a manifest not written yet is not an error: current() stays null until one
  // appears and loads). InvalidArgument without exactly one of the two.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ModelSource>> Open(ModelSourceOptions options);

  // The model to score with now; null before the first one loaded.
  std::shared_ptr<const ServedModel> current() const;

  // Serving directory only: swaps in the manifest's newest entry if it is newer. OK when nothing changed or the
  // new model is in; the refusal otherwise (see the class comment).
  [[nodiscard]] absl::Status Refresh();

  struct Counters {
    int64_t loads = 0;         // models swapped in
    int64_t failed_loads = 0;  // entries refused
    std::string last_error;    // the last refusal, "" once a later entry loaded
    absl::Time loaded_at;      // when the current model was swapped in
  };
  Counters counters() const;

 private:
  explicit ModelSource(ModelSourceOptions options) : options_(std::move(options)) {}
  // Counts and keeps the refusal of `entry` (with `crc`) and returns it.
  absl::Status Refuse(const std::string& entry, uint32_t crc, absl::Status why);
  void Swap(std::shared_ptr<const ServedModel> model);

  const ModelSourceOptions options_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const ServedModel> current_ ABSL_GUARDED_BY(mu_);
  Counters counters_ ABSL_GUARDED_BY(mu_);
  // The entry last refused (its dir and MODEL CRC in the manifest): not tried again while the manifest still
  // ends with it.
  std::string refused_dir_ ABSL_GUARDED_BY(mu_);
  uint32_t refused_crc_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kestrel

#endif  // KESTREL_SERVING_MODEL_SOURCE_H_
