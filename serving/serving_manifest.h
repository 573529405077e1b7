// A serving directory (docs/serving.md): the exports a training job publishes for kestrel_serve, and MANIFEST
// (proto/serving.proto ServingManifest, text format + checksum line), the chain they make. The publisher
// (serving/publisher.h) writes an export's directory first (its MODEL last) and then replaces MANIFEST by a
// rename, so an export the manifest lists is complete and one it does not list is still being written.
//
// Thread-compatible functions.
#ifndef KESTREL_SERVING_SERVING_MANIFEST_H_
#define KESTREL_SERVING_SERVING_MANIFEST_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/serving.pb.h"

namespace kestrel {

// The manifest of `serving_dir`: NotFound when it has none yet; DataLoss naming the file when it is larger than
// kMaxManifestBytes, fails its checksum or does not parse; InvalidArgument for entries that break the rules
// (CheckManifest).
[[nodiscard]] absl::StatusOr<ServingManifest> ReadServingManifest(const std::string& serving_dir);

// Replaces the manifest of `serving_dir` (atomically and durably) after checking it (CheckManifest).
[[nodiscard]] absl::Status WriteServingManifest(const std::string& serving_dir, const ServingManifest& manifest);

// The rules every manifest keeps: entries name plain directory names (ServingEntryNameOk), distinct; clocks
// strictly increase; the first entry is a full export and every delta's base is an earlier entry.
// InvalidArgument naming the first entry at fault.
[[nodiscard]] absl::Status CheckManifest(const ServingManifest& manifest);

// Whether `name` may name an export inside a serving directory: 1 to 255 characters of [A-Za-z0-9._-], not
// starting with '.', so that it can never leave the directory.
bool ServingEntryNameOk(absl::string_view name);

}  // namespace kestrel

#endif  // KESTREL_SERVING_SERVING_MANIFEST_H_
