// Publisher: a training job's committed checkpoints published into a serving directory (serving/serving_manifest.h)
// as a chain of exports — a full export, then deltas (export/export.h: the rows changed and removed since the
// entry before), a new full export every full_every publications — for kestrel_serve to follow. kestrel_publish
// runs one beside the scheduler; the job's checkpoint cadence (kestrel_scheduler --checkpoint_every,
// --checkpoint_every_clocks) is the delta clock.
//
// Each publication writes its export directory (MODEL last), then the manifest naming it (by a rename), then
// drops whole chains older than the newest keep_chains (from the manifest first, then from disk). A publisher
// that stopped anywhere in between resumes from the manifest: an export directory it lists is complete; one it
// does not list is a leftover and is removed before it is written again.
//
// Thread-compatible: one thread calls PublishLatest.
#ifndef KESTREL_SERVING_PUBLISHER_H_
#define KESTREL_SERVING_PUBLISHER_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "proto/serving.pb.h"

namespace kestrel {

// Attempts of one PublishLatest while the job commits past the checkpoint being exported.
inline constexpr int kPublishAttempts = 3;

struct PublisherOptions {
  // The job's checkpoint root. Required.
  std::string checkpoint_dir;
  // The job config it trains with (its data format pinned, Schema::Pinned, when its training files can be read).
  // Required.
  JobConfig job;
  // The serving directory (created). Required.
  std::string serving_dir;
  // A full export every this many publications (1: every one is full); at most kMaxDeltaChain + 1. Default: 10.
  int full_every = 10;
  // Chains (a full export and its deltas) kept; older ones are removed. At least 1. Default: 2.
  int keep_chains = 2;
  // For tests: called with the checkpoint's name after LATEST was read and before the checkpoint is exported
  // (where the job may commit a newer one and retire this one). Default: none.
  std::function<void(const std::string& checkpoint)> before_export;
};

class Publisher {
 public:
  // Reads the serving directory's manifest, if any (its entries must be of this job). InvalidArgument for
  // options out of range; the manifest's errors.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Publisher>> Open(PublisherOptions options);

  // Publishes the newest committed checkpoint unless it is published already (its clock not after the manifest's
  // newest entry): returns its entry, or nullopt when there is nothing new. The job goes on committing (and
  // retiring old checkpoints, kestrel_scheduler --keep_checkpoints) meanwhile: an attempt that fails while LATEST
  // moved on is the job's doing, not damage, and the newest is tried instead (kPublishAttempts in all). Errors of
  // the export (the checkpoint or the base damaged) and of writing; the manifest is then unchanged, and no
  // partial export is left.
  [[nodiscard]] absl::StatusOr<std::optional<ServingEntry>> PublishLatest();

  const ServingManifest& manifest() const { return manifest_; }

 private:
  explicit Publisher(PublisherOptions options) : options_(std::move(options)) {}
  // One attempt of PublishLatest; `*tried` is set to the checkpoint it read ("" when none).
  [[nodiscard]] absl::StatusOr<std::optional<ServingEntry>> PublishOnce(std::string* tried);
  // Removes the chains before the newest keep_chains from the manifest (written) and then from disk.
  [[nodiscard]] absl::Status DropOldChains();

  const PublisherOptions options_;
  ServingManifest manifest_;
  int since_full_ = 0;  // deltas published since the newest full export
};

}  // namespace kestrel

#endif  // KESTREL_SERVING_PUBLISHER_H_
