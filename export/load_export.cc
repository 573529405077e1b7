#include "export/load_export.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/checkpoint_layout.h"
#include "common/partition.h"
#include "common/status.h"
#include "export/export_format.h"
#include "export/export_rows.h"
#include "export/verified_export.h"

namespace kestrel {

absl::StatusOr<LoadedExport> LoadExport(const std::string& dir) {
  KESTREL_ASSIGN_OR_RETURN(const std::unique_ptr<VerifiedExport> verified, VerifyExport(dir, /*depth=*/0));
  LoadedExport loaded;
  loaded.model = verified->model;
  loaded.model_crc32c = verified->model_crc32c;
  const bool delta = verified->base != nullptr;
  std::vector<TableConfig> serving;
  for (const ExportedTable& t : loaded.model.tables()) {
    TableConfig config = t.config();
    config.clear_optimizer();  // serving: plain rows, no optimizer state
    config.clear_capacity();   // nor bounds: every exported row is live
    serving.push_back(config);
  }
  ShardOptions shard_options;
  shard_options.job_id = loaded.model.job_id();
  KESTREL_ASSIGN_OR_RETURN(loaded.shard, Shard::Create(shard_options, *Partition::Uniform(1)));
  KESTREL_RETURN_IF_ERROR(loaded.shard->Restore(serving, 0, [&](Shard::RowSink sink, Shard::SketchSink) -> absl::Status {
    for (int i = 0; i < loaded.model.tables_size(); ++i) {
      const TableConfig& config = serving[i];
      const int dim = config.dim();
      // A sparse row is its stored values (the serving table keeps the export's storage type), a dense block dim
      // floats.
      const size_t value_bytes = config.kind() == TableConfig::DENSE ? dim * sizeof(float) : ValueBytes(config);
      std::vector<float> row(value_bytes / sizeof(float));
      if (config.kind() != TableConfig::DENSE && delta) {  // the base chain's rows, streamed
        KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<ExportRowStream> rows, ExportRowStream::Open(*verified, config));
        while (rows->Valid()) {
          std::memcpy(row.data(), rows->values(), value_bytes);
          KESTREL_RETURN_IF_ERROR(sink(config.name(), rows->key(), row).status());
          KESTREL_RETURN_IF_ERROR(rows->Next());
        }
        continue;
      }
      KESTREL_ASSIGN_OR_RETURN(const std::string bytes, ReadWholeFile(dir + "/" + loaded.model.tables(i).file()));
      if (config.kind() == TableConfig::DENSE) {
        const uint64_t blocks = Partition::DenseBlockCount(config.dense_size(), dim);
        for (uint64_t b = 0; b < blocks; ++b) {
          std::fill(row.begin(), row.end(), 0.0f);
          const size_t begin = b * dim * sizeof(float);
          if (begin >= bytes.size()) break;  // (CheckExportedTable: the file holds dense_size floats)
          std::memcpy(row.data(), bytes.data() + begin, std::min(bytes.size() - begin, dim * sizeof(float)));
          KESTREL_RETURN_IF_ERROR(sink(config.name(), Partition::DenseBlockKey(config.name(), b), row).status());
        }
      } else {
        const size_t record = sizeof(uint64_t) + value_bytes;
        for (size_t at = 0; at + record <= bytes.size(); at += record) {
          uint64_t key;
          std::memcpy(&key, bytes.data() + at, sizeof(key));
          std::memcpy(row.data(), bytes.data() + at + sizeof(key), value_bytes);
          KESTREL_RETURN_IF_ERROR(sink(config.name(), key, row).status());
        }
      }
    }
    return absl::OkStatus();
  }));
  return loaded;
}

}  // namespace kestrel
