#include "serving/model_source.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "serving/predict_limits.h"
#include "serving/serving_manifest.h"

namespace kestrel {

absl::StatusOr<std::unique_ptr<ModelSource>> ModelSource::Open(ModelSourceOptions options) {
  if (options.model_dir.empty() == options.serving_dir.empty()) {
    return absl::InvalidArgumentError("give exactly one of a model directory (--model) and a serving directory (--serving_dir)");
  }
  std::unique_ptr<ModelSource> source(new ModelSource(std::move(options)));
  if (!source->options_.model_dir.empty()) {
    KESTREL_ASSIGN_OR_RETURN(std::shared_ptr<const ServedModel> model,
                             LoadServedModel(source->options_.model_dir, source->options_.model_dir));
    source->Swap(std::move(model));
    return source;
  }
  if (absl::Status first = source->Refresh(); !first.ok() && !absl::IsNotFound(first)) {
    KLOG(Warning) << "serving nothing yet: " << first;
  }
  return source;
}

std::shared_ptr<const ServedModel> ModelSource::current() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

ModelSource::Counters ModelSource::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

void ModelSource::Swap(std::shared_ptr<const ServedModel> model) {
  KLOG(Info) << "serving " << model->name << " (checkpoint " << model->loaded.model.checkpoint() << ", clock "
             << model->loaded.model.clock() << ")";
  std::shared_ptr<const ServedModel> old;  // freed after the lock is let go (a model's rows take a while)
  absl::MutexLock lock(&mu_);
  old = std::move(current_);
  current_ = std::move(model);
  ++counters_.loads;
  counters_.last_error.clear();
  counters_.loaded_at = absl::Now();
  refused_dir_.clear();
}

absl::Status ModelSource::Refuse(const std::string& entry, uint32_t crc, absl::Status why) {
  KLOG(Warning) << "keeping the model served; refused " << entry << ": " << why;
  absl::MutexLock lock(&mu_);
  ++counters_.failed_loads;
  counters_.last_error = absl::StrCat(entry, ": ", why.ToString());
  refused_dir_ = entry;
  refused_crc_ = crc;
  return why;
}

absl::Status ModelSource::Refresh() {
  if (options_.serving_dir.empty()) return absl::OkStatus();
  absl::StatusOr<ServingManifest> manifest = ReadServingManifest(options_.serving_dir);
  if (absl::IsNotFound(manifest.status())) return manifest.status();
  if (!manifest.ok()) return Refuse(kServingManifestFile, 0, manifest.status());
  if (manifest->entries().empty()) return absl::OkStatus();
  const ServingEntry& newest = *manifest->entries().rbegin();
  const std::shared_ptr<const ServedModel> served = current();
  {
    absl::MutexLock lock(&mu_);
    if (newest.dir() == refused_dir_ && newest.model_crc32c() == refused_crc_) return absl::OkStatus();  // said
  }
  if (served != nullptr) {
    if (served->name == newest.dir() && served->model_crc32c == newest.model_crc32c()) return absl::OkStatus();
    if (manifest->job_id() != served->loaded.model.job_id()) {
      return Refuse(newest.dir(), newest.model_crc32c(),
                    absl::FailedPreconditionError(absl::StrCat("the manifest is of job '", manifest->job_id(),
                                                               "', the model served of job '",
                                                               served->loaded.model.job_id(), "'")));
    }
    if (newest.clock() <= served->loaded.model.clock()) {
      return Refuse(newest.dir(), newest.model_crc32c(),
                    absl::FailedPreconditionError(absl::StrCat(
                        "out of order: its clock ", newest.clock(), " is not after the served model's (",
                        served->name, ", clock ", served->loaded.model.clock(), ")")));
    }
  }
  absl::StatusOr<std::shared_ptr<const ServedModel>> loaded =
      LoadServedModel(absl::StrCat(options_.serving_dir, "/", newest.dir()), newest.dir(), newest.published_unix_micros());
  if (!loaded.ok()) return Refuse(newest.dir(), newest.model_crc32c(), loaded.status());
  if ((*loaded)->model_crc32c != newest.model_crc32c() || (*loaded)->loaded.model.clock() != newest.clock()) {
    return Refuse(newest.dir(), newest.model_crc32c(),
                  absl::DataLossError(absl::StrCat("its MODEL (CRC-32C ", (*loaded)->model_crc32c, ", clock ",
                                                   (*loaded)->loaded.model.clock(), ") is not the one the manifest pins (",
                                                   newest.model_crc32c(), ", clock ", newest.clock(), ")")));
  }
  if ((*loaded)->loaded.model.job_id() != manifest->job_id()) {
    return Refuse(newest.dir(), newest.model_crc32c(),
                  absl::FailedPreconditionError(absl::StrCat("the export is of job '", (*loaded)->loaded.model.job_id(),
                                                             "', the manifest of job '", manifest->job_id(), "'")));
  }
  Swap(*std::move(loaded));
  return absl::OkStatus();
}

}  // namespace kestrel
