#include "export/export_format.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/row_values.h"
#include "server/table.h"

namespace kestrel {

std::string FileOf(const TableConfig& config) {
  return config.name() + (config.kind() == TableConfig::DENSE ? ".dense" : ".rows");
}

std::string DeletedFileOf(const TableConfig& config) { return config.name() + ".deleted"; }

absl::Status CheckBuiltInModel(const std::string& dir, absl::string_view tool) {
  std::error_code error;
  if (!std::filesystem::exists(std::filesystem::path(dir) / kPythonModuleFile, error)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      dir, " holds a PyTorch model (", kPythonModuleFile, "): ", tool,
      " scores the built-in models; score it with kestrel.torch.load(\"", dir, "\") (docs/python.md)"));
}

size_t ValueBytes(const TableConfig& config) { return sizeof(float) * RowValues::WordsFor(config); }

absl::Status CheckExportedTable(const ExportedTable& t, bool delta) {
  const TableConfig& config = t.config();
  if (absl::Status shape = Table::CheckShape(config); !shape.ok()) {
    return absl::DataLossError(absl::StrCat("MODEL lists a table that cannot be: ", shape.message()));
  }
  if (t.file() != FileOf(config)) {
    return absl::DataLossError(absl::StrFormat("MODEL names table '%s''s file '%s', expected '%s'", config.name(),
                                               t.file().substr(0, 80), FileOf(config)));
  }
  const bool dense = config.kind() == TableConfig::DENSE;
  const bool fits = dense ? t.size() == config.dense_size() * sizeof(float)
                          : t.size() % (sizeof(uint64_t) + ValueBytes(config)) == 0;
  if (!fits) {
    return absl::DataLossError(absl::StrFormat("MODEL says table '%s' takes %d bytes, which its shape cannot explain",
                                               config.name(), t.size()));
  }
  if (delta && !dense) {
    if (t.deleted_file() != DeletedFileOf(config)) {
      return absl::DataLossError(absl::StrFormat("MODEL names table '%s''s deleted keys '%s', expected '%s'",
                                                 config.name(), t.deleted_file().substr(0, 80),
                                                 DeletedFileOf(config)));
    }
    if (t.deleted_size() % sizeof(uint64_t) != 0 || t.deleted_size() / sizeof(uint64_t) != t.deleted_rows()) {
      return absl::DataLossError(absl::StrFormat("MODEL says table '%s' deletes %d keys in %d bytes", config.name(),
                                                 t.deleted_rows(), t.deleted_size()));
    }
  } else if (!t.deleted_file().empty() || t.deleted_rows() != 0 || t.deleted_size() != 0 ||
             t.deleted_crc32c() != 0) {
    return absl::DataLossError(absl::StrFormat(
        "MODEL gives table '%s' deleted keys, which only the sparse tables of a delta export have", config.name()));
  }
  return absl::OkStatus();
}

}  // namespace kestrel
