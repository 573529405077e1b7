#include "worker/embedding_tables.h"

#include <cstring>
#include <future>

namespace kestrel {

std::unique_ptr<EmbeddingTables> EmbeddingTables::ForSchema(PsClient* client, const Schema& schema, int dim) {
  std::vector<bool> used(schema.num_tables(), false);
  for (int t : schema.field_tables()) used[t] = true;
  std::vector<std::string> names;
  for (int t = 0; t < schema.num_tables(); ++t) names.push_back(schema.table_name(t));
  return std::make_unique<EmbeddingTables>(client, std::move(names), std::move(used), dim);
}

namespace {

// Runs fn(t) for every used table, the first on this thread and the rest concurrently; the first error wins
// (in table order).
template <typename Fn>
[[nodiscard]] absl::Status ForEachTable(const std::vector<bool>& used, const Fn& fn) {
  std::vector<int> tables;
  for (size_t t = 0; t < used.size(); ++t) {
    if (used[t]) tables.push_back(static_cast<int>(t));
  }
  if (tables.empty()) return absl::OkStatus();
  std::vector<std::future<absl::Status>> others;
  for (size_t i = 1; i < tables.size(); ++i) {
    others.push_back(std::async(std::launch::async, [&fn, t = tables[i]] { return fn(t); }));
  }
  absl::Status status = fn(tables[0]);
  for (auto& other : others) {
    absl::Status s = other.get();
    if (status.ok()) status = s;
  }
  return status;
}

}  // namespace

EmbeddingTables::EmbeddingTables(PsClient* client, std::vector<std::string> names, std::vector<bool> used, int dim)
    : client_(client), names_(std::move(names)), used_(std::move(used)), dim_(dim) {
  used_.resize(names_.size(), false);
}

bool EmbeddingTables::used(absl::string_view name) const {
  for (size_t t = 0; t < names_.size(); ++t) {
    if (names_[t] == name) return used_[t];
  }
  return false;
}

absl::Status EmbeddingTables::ForEachUsed(const PreparedBatch& batch, Staging* staging,
                                          const TableFn& fn) const {
  if (static_cast<int>(batch.tables.size()) != num_tables()) {
    return absl::InternalError("the batch was prepared for another number of embedding tables");
  }
  staging->rows.resize(batch.tables.size());
  return ForEachTable(used_, [&](int t) -> absl::Status {
    const PreparedBatch::TableKeys& table = batch.tables[t];
    // The table's KeyBatch keeps the order of its unique keys (identity: grouped by server and increasing), so
    // row i of its buffer is the batch's row table.rows[i].
    if (!table.keys.identity()) return absl::InternalError("a table's keys are not in the batch's order");
    std::vector<float>& buffer = staging->rows[t];
    buffer.resize(table.rows.size() * dim_);
    return fn(t, table, buffer.data());
  });
}

absl::Status EmbeddingTables::Pull(const PreparedBatch& batch, float* rows, const CallClock& read,
                                   Staging* staging) const {
  if (batch.tables.empty()) return client_->Pull(names_[0], batch.keys, dim_, rows, read);
  return ForEachUsed(batch, staging, [&](int t, const PreparedBatch::TableKeys& table, float* buffer) {
    absl::Status pulled = client_->Pull(names_[t], table.keys, dim_, buffer, read);
    if (!pulled.ok()) return pulled;
    for (size_t i = 0; i < table.rows.size(); ++i) {
      std::memcpy(rows + size_t{table.rows[i]} * dim_, buffer + i * dim_, dim_ * sizeof(float));
    }
    return absl::OkStatus();
  });
}

absl::Status EmbeddingTables::Push(const PreparedBatch& batch, const float* grads, const CallClock& at,
                                   Staging* staging) const {
  if (batch.tables.empty()) return client_->Push(names_[0], batch.keys, dim_, grads, at);
  return ForEachUsed(batch, staging, [&](int t, const PreparedBatch::TableKeys& table, float* buffer) {
    for (size_t i = 0; i < table.rows.size(); ++i) {
      std::memcpy(buffer + i * dim_, grads + size_t{table.rows[i]} * dim_, dim_ * sizeof(float));
    }
    return client_->Push(names_[t], table.keys, dim_, buffer, at);
  });
}

}  // namespace kestrel
