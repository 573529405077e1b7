#include "server/table_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "google/protobuf/util/message_differencer.h"

namespace kestrel {

TableRegistry::TableRegistry(int owner, KeyRange span, size_t max_tables, uint64_t memory_budget_bytes,
                             CutMemory* cut_memory, ThreadPool* stripe_pool)
    : owner_(owner),
      span_(span),
      max_tables_(max_tables),
      memory_budget_bytes_(memory_budget_bytes),
      cut_memory_(cut_memory),
      stripe_pool_(stripe_pool) {
  absl::MutexLock lock(&mu_);
  maps_.push_back(std::make_unique<TableMap>());
  tables_.store(maps_.back().get(), std::memory_order_release);
}

absl::StatusOr<bool> TableRegistry::Add(const TableConfig& config) {
  auto table = Table::Create(config, span_);
  if (!table.ok()) return table.status();
  absl::MutexLock lock(&mu_);
  const TableMap& current = *tables_.load(std::memory_order_acquire);
  auto it = current.find(config.name());
  if (it != current.end()) {
    if (google::protobuf::util::MessageDifferencer::Equals(it->second->config(), config)) return false;
    return absl::AlreadyExistsError(absl::StrFormat(
        "table '%s' already exists on shard %d with a different config", config.name(), owner_));
  }
  if (current.size() >= max_tables_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "shard %d already holds %d tables, its limit (--max_tables)", owner_, current.size()));
  }
  auto next = std::make_unique<TableMap>(current);
  Table* added = table->get();
  (*next)[config.name()] = std::shared_ptr<Table>(std::move(table).value());
  if (config.capacity().max_disk_bytes() > 0) added->SetColdTier(cold_tier_);
  added->set_cut_memory(cut_memory_);
  added->set_stripe_pool(stripe_pool_);
  ApplyBudgetsLocked(*next);
  maps_.push_back(std::move(next));
  tables_.store(maps_.back().get(), std::memory_order_release);
  return true;
}

Table* TableRegistry::Find(absl::string_view name) const {
  const TableMap& tables = *tables_.load(std::memory_order_acquire);
  auto it = tables.find(name);
  return it == tables.end() ? nullptr : it->second.get();
}

std::vector<TableConfig> TableRegistry::Describe() const {
  std::vector<TableConfig> out;
  for (const auto& [name, table] : *tables_.load(std::memory_order_acquire)) out.push_back(table->config());
  std::sort(out.begin(), out.end(), [](const TableConfig& a, const TableConfig& b) { return a.name() < b.name(); });
  return out;
}

std::vector<Table*> TableRegistry::All() const {
  std::vector<Table*> out;
  for (const auto& [name, table] : *tables_.load(std::memory_order_acquire)) out.push_back(table.get());
  std::sort(out.begin(), out.end(),
            [](const Table* a, const Table* b) { return a->config().name() < b->config().name(); });
  return out;
}

void TableRegistry::SetColdTier(ColdTier* tier) {
  absl::MutexLock lock(&mu_);
  cold_tier_ = tier;
  for (const auto& [name, table] : *tables_.load(std::memory_order_acquire)) {
    table->SetColdTier(table->config().capacity().max_disk_bytes() > 0 ? tier : nullptr);
  }
}

void TableRegistry::ApplyBudgetsLocked(const TableMap& tables) {
  uint64_t total_row_floats = 0;
  for (const auto& [name, table] : tables) {
    if (table->bounded()) total_row_floats += table->stored_floats() + 2;
  }
  for (const auto& [name, table] : tables) {
    if (!table->bounded()) continue;
    uint64_t budget = table->config().capacity().max_memory_bytes();
    if (memory_budget_bytes_ > 0) {
      const uint64_t share = static_cast<uint64_t>(static_cast<long double>(memory_budget_bytes_) *
                                                   (table->stored_floats() + 2) / total_row_floats);
      budget = budget == 0 ? share : std::min(budget, share);
    }
    table->SetMemoryBudget(budget);
  }
}

}  // namespace kestrel
