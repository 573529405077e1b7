#include "serving/serving_manifest.h"

#include <filesystem>
#include <system_error>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "common/status.h"
#include "google/protobuf/text_format.h"
#include "serving/predict_limits.h"

namespace kestrel {

bool ServingEntryNameOk(absl::string_view name) {
  if (name.empty() || name.size() > 255 || name[0] == '.') return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

absl::Status CheckManifest(const ServingManifest& manifest) {
  absl::flat_hash_set<std::string> seen;
  for (int i = 0; i < manifest.entries_size(); ++i) {
    const ServingEntry& e = manifest.entries(i);
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("manifest entry ", i, " ('", e.dir(), "'): ", why));
    };
    if (!ServingEntryNameOk(e.dir())) return bad("not a plain directory name");
    if (i == 0 && !e.full()) return bad("the first entry must be a full export");
    if (!e.full() && !seen.contains(e.base())) return bad(absl::StrCat("its base '", e.base(), "' is no earlier entry"));
    if (i > 0 && e.clock() <= manifest.entries(i - 1).clock()) {
      return bad(absl::StrCat("clock ", e.clock(), " is not after the previous entry's ", manifest.entries(i - 1).clock()));
    }
    if (!seen.insert(e.dir()).second) return bad("listed twice");
  }
  return absl::OkStatus();
}

absl::StatusOr<ServingManifest> ReadServingManifest(const std::string& serving_dir) {
  const std::string path = absl::StrCat(serving_dir, "/", kServingManifestFile);
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(path, error);
  if (error) {
    if (error == std::errc::no_such_file_or_directory) return absl::NotFoundError(absl::StrCat(path, " does not exist yet"));
    return absl::UnavailableError(absl::StrCat("cannot read ", path, ": ", error.message()));
  }
  if (size > kMaxManifestBytes) {
    return absl::DataLossError(absl::StrCat(path, " is ", size, " bytes; a manifest is at most ", kMaxManifestBytes));
  }
  KESTREL_ASSIGN_OR_RETURN(const std::string contents, ReadWholeFile(path));
  KESTREL_ASSIGN_OR_RETURN(const std::string body, VerifyChecksumLine(path, contents));
  ServingManifest manifest;
  if (!google::protobuf::TextFormat::ParseFromString(body, &manifest)) {
    return absl::DataLossError(absl::StrCat(path, " is not a ServingManifest"));
  }
  KESTREL_RETURN_IF_ERROR(CheckManifest(manifest));
  return manifest;
}

absl::Status WriteServingManifest(const std::string& serving_dir, const ServingManifest& manifest) {
  KESTREL_RETURN_IF_ERROR(CheckManifest(manifest));
  std::string body;
  if (!google::protobuf::TextFormat::PrintToString(manifest, &body)) {
    return absl::InternalError("cannot print the serving manifest");
  }
  return WriteFileAtomically(absl::StrCat(serving_dir, "/", kServingManifestFile), WithChecksumLine(body));
}

}  // namespace kestrel
