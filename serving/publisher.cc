#include "serving/publisher.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checkpoint_layout.h"
#include "common/crc32c.h"
#include "common/logging.h"
#include "common/status.h"
#include "export/export.h"
#include "export/export_format.h"
#include "serving/serving_manifest.h"

namespace kestrel {

namespace fs = std::filesystem;

absl::StatusOr<std::unique_ptr<Publisher>> Publisher::Open(PublisherOptions options) {
  if (options.checkpoint_dir.empty() || options.serving_dir.empty()) {
    return absl::InvalidArgumentError("the publisher needs a checkpoint directory and a serving directory");
  }
  if (options.full_every < 1 || options.full_every > kMaxDeltaChain + 1 || options.keep_chains < 1) {
    return absl::InvalidArgumentError(absl::StrCat("full_every must be in [1, ", kMaxDeltaChain + 1,
                                                   "] and keep_chains at least 1; got ", options.full_every, " and ",
                                                   options.keep_chains));
  }
  std::error_code error;
  fs::create_directories(options.serving_dir, error);
  if (error) return absl::UnavailableError(absl::StrCat("cannot create ", options.serving_dir, ": ", error.message()));
  std::unique_ptr<Publisher> publisher(new Publisher(std::move(options)));
  absl::StatusOr<ServingManifest> manifest = ReadServingManifest(publisher->options_.serving_dir);
  if (manifest.ok()) {
    publisher->manifest_ = *std::move(manifest);
    for (const ServingEntry& e : publisher->manifest_.entries()) publisher->since_full_ = e.full() ? 0 : publisher->since_full_ + 1;
  } else if (!absl::IsNotFound(manifest.status())) {
    return manifest.status();
  }
  return publisher;
}

absl::StatusOr<std::optional<ServingEntry>> Publisher::PublishLatest() {
  for (int attempt = 1;; ++attempt) {
    std::string tried;
    absl::StatusOr<std::optional<ServingEntry>> published = PublishOnce(&tried);
    if (published.ok() || attempt == kPublishAttempts) return published;
    // LATEST read again: unchanged, the failure is the checkpoint's (or this directory's) own.
    absl::StatusOr<std::optional<CheckpointManifest>> now = CheckpointLayout(options_.checkpoint_dir).ReadLatest();
    if (!now.ok() || !now->has_value() || CheckpointLayout::CheckpointName((*now)->sequence()) == tried) {
      return published;
    }
    KLOG(Info) << "the job committed past " << (tried.empty() ? "LATEST" : tried) << " while it was read ("
               << published.status().message() << "); publishing the newest instead";
  }
}

absl::StatusOr<std::optional<ServingEntry>> Publisher::PublishOnce(std::string* tried) {
  const CheckpointLayout layout(options_.checkpoint_dir);
  KESTREL_ASSIGN_OR_RETURN(const std::optional<CheckpointManifest> latest, layout.ReadLatest());
  if (!latest.has_value()) return std::nullopt;
  *tried = CheckpointLayout::CheckpointName(latest->sequence());
  if (!manifest_.job_id().empty() && latest->job_id() != manifest_.job_id()) {
    return absl::FailedPreconditionError(absl::StrCat("the serving directory ", options_.serving_dir,
                                                      " holds job '", manifest_.job_id(), "', the checkpoints are of job '",
                                                      latest->job_id(), "'"));
  }
  const ServingEntry* newest = manifest_.entries().empty() ? nullptr : &*manifest_.entries().rbegin();
  if (newest != nullptr && latest->clock() <= newest->clock()) return std::nullopt;
  const std::string name = CheckpointLayout::CheckpointName(latest->sequence());
  const bool full = newest == nullptr || since_full_ + 1 >= options_.full_every;
  ServingEntry entry;
  entry.set_dir(absl::StrCat(name, full ? ".full" : ".delta"));
  entry.set_full(full);
  if (!full) entry.set_base(newest->dir());
  entry.set_checkpoint(name);
  const std::string out = absl::StrCat(options_.serving_dir, "/", entry.dir());
  std::error_code error;
  fs::remove_all(out, error);  // a leftover of a publication that stopped before its manifest
  ExportOptions export_options;
  export_options.checkpoint_dir = options_.checkpoint_dir;
  export_options.checkpoint = name;
  export_options.job = options_.job;
  export_options.out_dir = out;
  if (!full) export_options.base_export = absl::StrCat(options_.serving_dir, "/", newest->dir());
  if (options_.before_export) options_.before_export(name);
  absl::StatusOr<ExportedModel> exported = ExportCheckpoint(export_options);
  if (!exported.ok()) {
    fs::remove_all(out, error);  // no partial export left behind
    return exported.status();
  }
  KESTREL_ASSIGN_OR_RETURN(const std::string model_file, ReadWholeFile(absl::StrCat(out, "/", kModelFile)));
  entry.set_clock(exported->clock());
  entry.set_model_crc32c(Crc32c(model_file));
  entry.set_published_unix_micros(absl::ToUnixMicros(absl::Now()));
  ServingManifest next = manifest_;
  next.set_job_id(exported->job_id());
  *next.add_entries() = entry;
  KESTREL_RETURN_IF_ERROR(WriteServingManifest(options_.serving_dir, next));
  manifest_ = std::move(next);
  since_full_ = full ? 0 : since_full_ + 1;
  KLOG(Info) << "published " << entry.dir() << " (clock " << entry.clock() << ")";
  KESTREL_RETURN_IF_ERROR(DropOldChains());
  return entry;
}

absl::Status Publisher::DropOldChains() {
  int chains = 0, first_kept = 0;
  for (int i = manifest_.entries_size() - 1; i >= 0; --i) {
    if (!manifest_.entries(i).full()) continue;
    if (++chains == options_.keep_chains) {
      first_kept = i;
      break;
    }
  }
  if (first_kept == 0) return absl::OkStatus();
  ServingManifest kept;
  kept.set_job_id(manifest_.job_id());
  for (int i = first_kept; i < manifest_.entries_size(); ++i) *kept.add_entries() = manifest_.entries(i);
  KESTREL_RETURN_IF_ERROR(WriteServingManifest(options_.serving_dir, kept));
  for (int i = 0; i < first_kept; ++i) {
    std::error_code error;
    fs::remove_all(absl::StrCat(options_.serving_dir, "/", manifest_.entries(i).dir()), error);
    if (error) KLOG(Warning) << "cannot remove " << manifest_.entries(i).dir() << ": " << error.message();
  }
  manifest_ = std::move(kept);
  return absl::OkStatus();
}

}  // namespace kestrel
