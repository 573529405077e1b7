// TableRegistry: one shard's tables by name, and the memory budgets of its bounded tables.
//
// Tables are created (Add), never removed: a table lives as long as its registry. Every Add publishes a new
// immutable name -> table map through an atomic pointer, so requests find their tables without a lock; the
// versions published before stay allocated (a request may still read one). A table is created over the shard's
// key span, with the shard's CutMemory (copy-on-write checkpoints) and, when its config has a disk budget, the
// shard's disk tier.
//
// Memory budgets: the server's budget (memory_budget_bytes) is shared by the bounded tables in proportion to
// their row sizes (so they hold about as many rows each: a model's tables see the same keys); a table's own
// capacity.max_memory_bytes caps its share. Every Add shares it anew.
#ifndef KESTREL_SERVER_TABLE_REGISTRY_H_
#define KESTREL_SERVER_TABLE_REGISTRY_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/partition.h"
#include "common/thread_pool.h"
#include "proto/table.pb.h"
#include "server/bounded_policy.h"
#include "server/cut_memory.h"
#include "server/table.h"

namespace kestrel {

// Owned by its Shard; owns the tables. Does not own the CutMemory or the disk tier, which must outlive it.
// Thread-safe: lookups read the newest map without locks; Add and SetColdTier are serialized by a mutex.
class TableRegistry {
 public:
  // `owner`: the server whose range group the shard is (named in errors). `span`: the keys the tables hold.
  // `max_tables`: most tables. `memory_budget_bytes`: the bounded tables' shared budget (0: only their own).
  // `cut_memory`: every table's retained copies. `stripe_pool`: every table's (Table::set_stripe_pool; null:
  // none).
  TableRegistry(int owner, KeyRange span, size_t max_tables, uint64_t memory_budget_bytes, CutMemory* cut_memory,
                ThreadPool* stripe_pool = nullptr);

  TableRegistry(const TableRegistry&) = delete;
  TableRegistry& operator=(const TableRegistry&) = delete;

  // Creates and publishes a table. Idempotent: returns false (and OK) when an identical table exists,
  // AlreadyExists when a table of that name exists with a different config; ResourceExhausted at max_tables;
  // Table::Create's error for a bad config.
  [[nodiscard]] absl::StatusOr<bool> Add(const TableConfig& config) ABSL_LOCKS_EXCLUDED(mu_);
  // The table, or nullptr. The pointer stays valid for the registry's lifetime.
  Table* Find(absl::string_view name) const;
  // Configs of all tables, sorted by name.
  std::vector<TableConfig> Describe() const;
  // All tables, sorted by name.
  std::vector<Table*> All() const;

  // Where tables with a disk budget put the rows they move out of memory (null: none, the default; such tables
  // then drop them): set on the tables there are and given to those made later.
  void SetColdTier(ColdTier* tier) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using TableMap = absl::flat_hash_map<std::string, std::shared_ptr<Table>>;

  // Gives every bounded table of `tables` its memory budget (see the file comment).
  void ApplyBudgetsLocked(const TableMap& tables) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int owner_;
  const KeyRange span_;
  const size_t max_tables_;
  const uint64_t memory_budget_bytes_;
  CutMemory* const cut_memory_;
  ThreadPool* const stripe_pool_;

  mutable absl::Mutex mu_;  // serializes table publication
  std::vector<std::unique_ptr<const TableMap>> maps_ ABSL_GUARDED_BY(mu_);  // every published version
  std::atomic<const TableMap*> tables_{nullptr};  // the newest of maps_
  ColdTier* cold_tier_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_TABLE_REGISTRY_H_
