#include "export/verified_export.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint_layout.h"
#include "common/crc32c.h"
#include "common/status.h"
#include "export/export_format.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

// DataLoss naming `path` unless the file has exactly `size` bytes and CRC-32C `crc`.
[[nodiscard]] absl::Status VerifyFile(const std::string& path, uint64_t size, uint32_t crc32c) {
  KESTREL_ASSIGN_OR_RETURN(const FileCrc crc, Crc32cOfFile(path));
  if (crc.size != size || crc.crc != crc32c) {
    return absl::DataLossError(absl::StrFormat("%s: %d bytes with crc32c %08x, MODEL says %d bytes, %08x", path,
                                               crc.size, crc.crc, size, crc32c));
  }
  return absl::OkStatus();
}

// A MODEL file's bytes: NotFound when it does not exist; DataLoss when it is not a regular file or larger
// than any MODEL (a path read from a file never makes the loader read a device, a pipe or gigabytes).
[[nodiscard]] absl::StatusOr<std::string> ReadModelFile(const std::string& path) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!error && fs::exists(status)) {
    if (!fs::is_regular_file(status)) return absl::DataLossError(absl::StrCat(path, " is not a regular file"));
    const uintmax_t bytes = fs::file_size(path, error);
    if (!error && bytes > kMaxModelBytes) {
      return absl::DataLossError(absl::StrFormat("%s: %d bytes, more than a MODEL can be", path, bytes));
    }
  }
  return ReadWholeFile(path);
}

// Where a delta's base is: its MODEL's base_dir, relative to the delta's directory unless absolute.
// DataLoss for a base_dir no exporter writes (empty, too long, or with control characters).
[[nodiscard]] absl::StatusOr<std::string> ResolveBaseDir(const std::string& dir, const std::string& base_dir) {
  const bool plain = !base_dir.empty() && base_dir.size() <= kMaxBaseDirBytes &&
                     std::none_of(base_dir.begin(), base_dir.end(), [](char c) {
                       return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
                     });
  if (!plain) return absl::DataLossError(absl::StrCat(dir, "/", kModelFile, " names a base that cannot be a path"));
  const fs::path base(base_dir);
  return base.is_absolute() ? base.string() : (fs::path(dir) / base).string();
}

}  // namespace

// What base_dir an export in `out_dir` records for the base `base_export` (both as given, relative to the
// working directory): the base relative to out_dir (so a tree of exports can move as a whole), or absolute
// when they share no root. Symbolic links are resolved first, so the relative path names the same directory.
std::string BaseDirFor(const std::string& out_dir, const std::string& base_export) {
  std::error_code error;
  const fs::path out = fs::weakly_canonical(fs::absolute(out_dir), error);
  if (error) return fs::absolute(base_export).lexically_normal().string();
  const fs::path base = fs::weakly_canonical(fs::absolute(base_export), error);
  if (error) return fs::absolute(base_export).lexically_normal().string();
  const fs::path relative = base.lexically_relative(out);
  return relative.empty() ? base.string() : relative.string();
}

// How `base` differs from what a delta of job `job_id` with `tables` needs of its base (the same job, the same
// tables with the same configs), in words; "" when it does not.
std::string BaseDifference(const ExportedModel& base, const std::string& job_id,
                           const std::vector<TableConfig>& tables) {
  if (base.job_id() != job_id) {
    return absl::StrFormat("the base is an export of job '%s', not '%s'", base.job_id(), job_id);
  }
  for (const TableConfig& config : tables) {
    const auto it = std::find_if(base.tables().begin(), base.tables().end(),
                                 [&](const ExportedTable& t) { return t.config().name() == config.name(); });
    if (it == base.tables().end()) return absl::StrFormat("table '%s' is not in the base", config.name());
    std::string report;
    google::protobuf::util::MessageDifferencer differencer;
    differencer.ReportDifferencesToString(&report);
    if (!differencer.Compare(it->config(), config)) {
      std::replace(report.begin(), report.end(), '\n', ';');
      return absl::StrFormat("table '%s' has another config than the base's (base -> now: %s)", config.name(),
                             report.substr(0, 400));
    }
  }
  for (const ExportedTable& t : base.tables()) {
    if (std::none_of(tables.begin(), tables.end(),
                     [&](const TableConfig& config) { return config.name() == t.config().name(); })) {
      return absl::StrFormat("the base has table '%s', which is gone", t.config().name());
    }
  }
  return "";
}

// Reads and checks the export in `dir`: MODEL's checksum line, every table's shape and files (sizes and
// CRC-32C), and for a delta its base, recursively: the base must be the very export the delta was made
// against (its MODEL's CRC-32C; FailedPrecondition otherwise) and agree with it (job, tables, checkpoint).
// `depth`: the deltas above this export in the chain being resolved (at most kMaxDeltaChain in all).
absl::StatusOr<std::unique_ptr<VerifiedExport>> VerifyExport(const std::string& dir, int depth) {
  auto e = std::make_unique<VerifiedExport>();
  e->dir = dir;
  const std::string model_path = dir + "/" + kModelFile;
  KESTREL_ASSIGN_OR_RETURN(const std::string contents, ReadModelFile(model_path));
  KESTREL_ASSIGN_OR_RETURN(const std::string body, VerifyChecksumLine(model_path, contents));
  if (!google::protobuf::TextFormat::ParseFromString(body, &e->model) || e->model.format_version() != 1) {
    return absl::DataLossError(absl::StrCat(model_path, ": not a version-1 Kestrel export"));
  }
  e->model_crc32c = Crc32c(contents);
  const ExportedModel& model = e->model;
  const bool delta = !model.base_dir().empty();
  if (!delta && (!model.base_checkpoint().empty() || model.base_model_crc32c() != 0)) {
    return absl::DataLossError(absl::StrCat(model_path, ": names a base checkpoint but no base directory"));
  }
  std::vector<TableConfig> tables;
  for (const ExportedTable& t : model.tables()) {
    KESTREL_RETURN_IF_ERROR(CheckExportedTable(t, delta));
    if (std::any_of(tables.begin(), tables.end(),
                    [&](const TableConfig& c) { return c.name() == t.config().name(); })) {
      return absl::DataLossError(absl::StrFormat("%s lists table '%s' twice", model_path, t.config().name()));
    }
    tables.push_back(t.config());
    KESTREL_RETURN_IF_ERROR(VerifyFile(dir + "/" + t.file(), t.size(), t.crc32c()));
    if (!t.deleted_file().empty()) {
      KESTREL_RETURN_IF_ERROR(VerifyFile(dir + "/" + t.deleted_file(), t.deleted_size(), t.deleted_crc32c()));
    }
  }
  if (!delta) return e;
  if (depth >= kMaxDeltaChain) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: more than %d delta exports on top of a full one (export a full one)", dir, kMaxDeltaChain));
  }
  if (!CheckpointLayout::CheckName(model.base_checkpoint()).ok()) {
    return absl::DataLossError(absl::StrCat(model_path, ": a delta whose base checkpoint is not a checkpoint name"));
  }
  KESTREL_ASSIGN_OR_RETURN(const std::string base_dir, ResolveBaseDir(dir, model.base_dir()));
  KESTREL_ASSIGN_OR_RETURN(e->base, VerifyExport(base_dir, depth + 1));
  if (e->base->model_crc32c != model.base_model_crc32c()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is a delta against the export of %s whose MODEL has crc32c %08x; its base directory %s holds another "
        "(%s, crc32c %08x)",
        dir, model.base_checkpoint(), model.base_model_crc32c(), base_dir, e->base->model.checkpoint(),
        e->base->model_crc32c));
  }
  std::string difference = BaseDifference(e->base->model, model.job_id(), tables);
  if (difference.empty() && e->base->model.checkpoint() != model.base_checkpoint()) {
    difference = absl::StrFormat("the base is of %s, MODEL says %s", e->base->model.checkpoint(),
                                 model.base_checkpoint());
  }
  if (!difference.empty()) {
    return absl::DataLossError(absl::StrCat(model_path, " disagrees with the base it names: ", difference));
  }
  return e;
}

}  // namespace kestrel
