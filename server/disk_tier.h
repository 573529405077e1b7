// DiskTier: the disk tier of one server's bounded tables (ColdTier, server/bounded_policy.h): the rows they move
// out of memory.
//
// A row on the disk tier is recorded twice: in the server's working store (RocksDB, server/shard_store.h), under
// the same key as a checkpointed row, so that a checkpoint's snapshot holds it; and in its table's ColdRowFile
// (server/cold_row_file.h: fixed-size records, mmapped, an in-memory index of 10.7-21.3 bytes per disk row), in
// <dir>/<hex of the table name>.rows, which serves the reads. Every Write and Delete keeps the two equal. A cold
// read costs a memory copy when the file's pages are cached and one page read per row (one batch of reads per
// request) when not, against a RocksDB MultiGet's ~3 us per row.
//
// While a checkpoint's cut is written and snapshotted (StartDeferring until ApplyDeferred), the writes into the
// working store are held back in memory, counted in the shard's CutMemory, so that the snapshot holds the rows as
// of the cut; the files stay current meanwhile, so reads are unaffected.
#ifndef KESTREL_SERVER_DISK_TIER_H_
#define KESTREL_SERVER_DISK_TIER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "rocksdb/write_batch.h"
#include "server/bounded_policy.h"
#include "server/cold_row_file.h"
#include "server/cut_memory.h"

namespace rocksdb {
class DB;
}  // namespace rocksdb

namespace kestrel {

// Owned by its ShardStore; owns the table files; does not own the working store it writes into (Attach).
// Thread-safe: Write, Read and Delete may come from any number of request threads at once (the files are
// guarded by one mutex, the held-back writes by another), but none while Attach or Detach runs (the server
// replaces its working store inside the shard's exclusive section).
class DiskTier : public ColdTier {
 public:
  // The longest table name the tier takes (its file's name is the name's hex).
  static constexpr size_t kMaxTableName = 100;

  // `dir`: where the tables' files go (created with the first one); `shard`: the server, named in errors.
  DiskTier(std::string dir, int shard) : dir_(std::move(dir)), shard_(shard) {}
  ~DiskTier() override = default;

  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // The working store rows are recorded in from now on (must outlive its use: until Detach).
  void Attach(rocksdb::DB* db) { db_ = db; }
  // The working store goes: forgets every file (a file being read lives until its Read is done) and drops the
  // writes held back. No Write, Read or Delete may come until the next Attach.
  void Detach() ABSL_LOCKS_EXCLUDED(files_mu_, deferred_mu_);

  // ColdTier. A table's rows keep one width until the next Detach: a Write or Read of another width is
  // FailedPrecondition (nothing written), a table name of over kMaxTableName bytes InvalidArgument.
  [[nodiscard]] absl::Status Write(absl::string_view table, absl::Span<const uint64_t> keys, absl::Span<const float> rows) override
      ABSL_LOCKS_EXCLUDED(files_mu_, deferred_mu_);
  [[nodiscard]] absl::Status Read(absl::string_view table, absl::Span<const uint64_t> keys, int floats, float* rows,
                    std::vector<uint8_t>* found) override ABSL_LOCKS_EXCLUDED(files_mu_);
  [[nodiscard]] absl::Status Delete(absl::string_view table, absl::Span<const uint64_t> keys) override
      ABSL_LOCKS_EXCLUDED(files_mu_, deferred_mu_);

  // From now until ApplyDeferred, the writes into the working store are held back, counted in `memory` (the
  // shard's CutMemory, which must outlive the hold).
  void StartDeferring(CutMemory* memory) ABSL_LOCKS_EXCLUDED(deferred_mu_);
  // Applies the writes held back, in their order (after a failure, drops the rest), releases their memory and
  // stops holding back. Returns the first failure.
  [[nodiscard]] absl::Status ApplyDeferred() ABSL_LOCKS_EXCLUDED(deferred_mu_);

  // The tier's files, summed over tables: rows, bytes of memory their indexes hold (outside the tables'
  // budgets), bytes on disk.
  struct FileStats {
    uint64_t rows = 0;
    uint64_t index_bytes = 0;
    uint64_t file_bytes = 0;
  };
  FileStats file_stats() const ABSL_LOCKS_EXCLUDED(files_mu_);

  // For tests. While `on`, ApplyDeferred fails (Unavailable) when it has writes to apply. Default: false.
  void TEST_FailHeldBackWrites(bool on) ABSL_LOCKS_EXCLUDED(deferred_mu_) {
    absl::MutexLock lock(&deferred_mu_);
    fail_held_back_writes_ = on;
  }
  // For benchmarks. Serves reads from the working store (MultiGet) instead of the files. Default: false.
  void TEST_ReadFromStore(bool on) { reads_from_store_.store(on, std::memory_order_relaxed); }
  // Drops the files' pages from the page cache (ColdRowFile::TEST_DropCachedPages) and answers how many of their
  // pages are still resident.
  [[nodiscard]] absl::StatusOr<uint64_t> TEST_DropCachedPages() ABSL_LOCKS_EXCLUDED(files_mu_);

 private:
  // The file of `table` for rows of `floats` floats, created if `create` (else null when there is none);
  // FailedPrecondition when the table's file holds rows of another width.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<ColdRowFile>> File(absl::string_view table, int floats, bool create)
      ABSL_LOCKS_EXCLUDED(files_mu_);
  // Writes `batch` into the working store now, or holds it back (StartDeferring); `what` names it in errors.
  [[nodiscard]] absl::Status WriteOrDefer(rocksdb::WriteBatch batch, const char* what) ABSL_LOCKS_EXCLUDED(deferred_mu_);
  void DropDeferredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(deferred_mu_);
  // Read from the working store instead of the files (TEST_ReadFromStore).
  [[nodiscard]] absl::Status ReadFromStore(absl::string_view table, absl::Span<const uint64_t> keys, int floats, float* rows,
                             std::vector<uint8_t>* found);

  const std::string dir_;
  const int shard_;
  rocksdb::DB* db_ = nullptr;  // Attach/Detach, which no other call overlaps
  mutable absl::Mutex files_mu_;
  // By table name; a Read holds its file's reference, so a Detach never unmaps a file being read.
  absl::flat_hash_map<std::string, std::shared_ptr<ColdRowFile>> files_ ABSL_GUARDED_BY(files_mu_);
  std::atomic<bool> reads_from_store_{false};  // TEST_ReadFromStore
  absl::Mutex deferred_mu_;
  CutMemory* deferred_memory_ ABSL_GUARDED_BY(deferred_mu_) = nullptr;  // non-null: writes wait
  std::vector<rocksdb::WriteBatch> deferred_ ABSL_GUARDED_BY(deferred_mu_);
  uint64_t deferred_bytes_ ABSL_GUARDED_BY(deferred_mu_) = 0;
  bool fail_held_back_writes_ ABSL_GUARDED_BY(deferred_mu_) = false;  // TEST_FailHeldBackWrites
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_DISK_TIER_H_
