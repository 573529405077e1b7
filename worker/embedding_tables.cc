#include "worker/embedding_tables.h"

#include <cstring>
#include <future>

namespace kestrel {

namespace {

// Runs fn(t) for every table, the first on this thread and the rest concurrently; the first error wins (in
// table order).
template <typename Fn>
absl::Status ForEachTable(int tables, const Fn& fn) {
  std::vector<std::future<absl::Status>> others;
  for (int t = 1; t < tables; ++t) others.push_back(std::async(std::launch::async, [&fn, t] { return fn(t); }));
  absl::Status status = fn(0);
  for (auto& other : others) {
    absl::Status s = other.get();
    if (status.ok()) status = s;
  }
  return status;
}

}  // namespace

absl::Status EmbeddingTables::Pull(const PreparedBatch& batch, float* rows, const CallClock& read,
                                   Staging* staging) const {
  if (batch.tables.empty()) return client_->Pull(names_[0], batch.keys, dim_, rows, read);
  if (static_cast<int>(batch.tables.size()) != num_tables()) {
    return absl::InternalError("the batch was prepared for another number of embedding tables");
  }
  staging->rows.resize(batch.tables.size());
  return ForEachTable(num_tables(), [&](int t) -> absl::Status {
    const PreparedBatch::TableKeys& table = batch.tables[t];
    std::vector<float>& buffer = staging->rows[t];
    buffer.resize(table.rows.size() * dim_);
    if (!table.keys.identity()) return absl::InternalError("a table's keys are not in the batch's order");
    absl::Status pulled = client_->Pull(names_[t], table.keys, dim_, buffer.data(), read);
    if (!pulled.ok()) return pulled;
    // The table's KeyBatch keeps the order of its unique keys (identity: grouped by server and increasing).
    for (size_t i = 0; i < table.rows.size(); ++i) {
      std::memcpy(rows + size_t{table.rows[i]} * dim_, buffer.data() + i * dim_, dim_ * sizeof(float));
    }
    return absl::OkStatus();
  });
}

absl::Status EmbeddingTables::Push(const PreparedBatch& batch, const float* grads, const CallClock& at,
                                   Staging* staging) const {
  if (batch.tables.empty()) return client_->Push(names_[0], batch.keys, dim_, grads, at);
  if (static_cast<int>(batch.tables.size()) != num_tables()) {
    return absl::InternalError("the batch was prepared for another number of embedding tables");
  }
  staging->rows.resize(batch.tables.size());
  return ForEachTable(num_tables(), [&](int t) -> absl::Status {
    const PreparedBatch::TableKeys& table = batch.tables[t];
    std::vector<float>& buffer = staging->rows[t];
    if (!table.keys.identity()) return absl::InternalError("a table's keys are not in the batch's order");
    buffer.resize(table.rows.size() * dim_);
    for (size_t i = 0; i < table.rows.size(); ++i) {
      std::memcpy(buffer.data() + i * dim_, grads + size_t{table.rows[i]} * dim_, dim_ * sizeof(float));
    }
    return client_->Push(names_[t], table.keys, dim_, buffer.data(), at);
  });
}

}  // namespace kestrel
