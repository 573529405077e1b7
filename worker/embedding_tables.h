// EmbeddingTables: the embedding tables a model's fields look up, pulled and pushed for one PreparedBatch.
//
// The model sees one matrix of embedding rows per batch, [num_unique, dim] in keys.unique_keys() order, whatever
// table each row lives in. With one table (every field looks up "emb", e.g. the Criteo and libsvm presets) the
// rows travel straight between that matrix and the servers. With several (proto/schema.proto
// FeatureSchema.tables), PreparedBatch::tables says which unique keys belong to which table: each table's rows
// are pulled into a staging buffer and placed into the matrix, and each table's gradient rows are gathered from
// the model's gradient matrix and pushed; the tables travel concurrently. Every table some field looks up is
// pulled and pushed every step, also when the batch has no key of it (BSP servers need every worker's part of
// every table); a table no field looks up is left alone.
//
// Thread-compatible: Pull and Push may run concurrently on different Staging objects. The PsClient must outlive
// it.
#ifndef KESTREL_WORKER_EMBEDDING_TABLES_H_
#define KESTREL_WORKER_EMBEDDING_TABLES_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "worker/prepared_batch.h"
#include "worker/data/schema.h"
#include "worker/ps_client.h"

namespace kestrel {

class EmbeddingTables {
 public:
  // Per-table row buffers of one step, reused across steps.
  struct Staging {
    std::vector<std::vector<float>> rows;
  };

  // `names[t]`: table t's name on the servers (field_tables values index it); `used[t]`: some field looks it
  // up (default: all). Every table has `dim` floats per row.
  EmbeddingTables(PsClient* client, std::vector<std::string> names, std::vector<bool> used, int dim);
  EmbeddingTables(PsClient* client, std::vector<std::string> names, int dim)
      : EmbeddingTables(client, names, std::vector<bool>(names.size(), true), dim) {}
  // The tables of `schema` (worker/data/schema.h: table t's name, and whether some field looks it up).
  static std::unique_ptr<EmbeddingTables> ForSchema(PsClient* client, const Schema& schema, int dim);

  int num_tables() const { return static_cast<int>(names_.size()); }
  const std::string& name(int t) const { return names_[t]; }
  // Whether some field looks up the table of this name.
  bool used(absl::string_view name) const;

  // Pulls the rows of batch's unique keys into `rows` (num_unique x dim), at `read`.
  [[nodiscard]] absl::Status Pull(const PreparedBatch& batch, float* rows, const CallClock& read, Staging* staging) const;
  // Pushes `grads` (num_unique x dim, one row per unique key) to the keys' tables, at `at`.
  [[nodiscard]] absl::Status Push(const PreparedBatch& batch, const float* grads, const CallClock& at, Staging* staging) const;

 private:
  using TableFn = std::function<absl::Status(int t, const PreparedBatch::TableKeys& table, float* buffer)>;
  // Checks the batch's tables, then runs fn for every used table (concurrently) with its staging buffer sized
  // for its rows.
  [[nodiscard]] absl::Status ForEachUsed(const PreparedBatch& batch, Staging* staging, const TableFn& fn) const;

  PsClient* client_;
  std::vector<std::string> names_;
  std::vector<bool> used_;
  int dim_;
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_EMBEDDING_TABLES_H_
