// ColdRowFile: one bounded table's rows on the disk tier, in a file of fixed-size records that reads cost one
// memory copy when the file's pages are cached and one page read per row when they are not.
//
// The file holds records [key (8 bytes) | row (floats 32-bit words)] in slots. A record never straddles a page
// when it fits in one (a page holds floor(4096 / record) of them; wider records start on a page boundary), so
// reading a row reads one page. The file grows by segments (fallocated: no write fails for space) that are mapped
// read-only with MADV_RANDOM (a fault reads its page, not a readahead window). Records are written with pwrite: a
// store into a mapped page that writeback has cleaned would cost a page fault each time.
//
// An in-memory open-addressing index maps key -> slot: linear probing over 8-byte entries (32 bits of the
// key's hash, slot id + 1), kept at most 3/4 full, so it costs 10.7-21.3 bytes per row (memory_bytes()). The
// hash bits let a lookup skip every entry but its key's without touching the file (a record read on a
// mismatched probe would be a page read when uncached), and let the index grow without reading the file. The
// key stored in the record is compared before a row is used. A Write of a key held replaces its record in
// place; deleted keys' slots are reused, so the file is bounded by the most keys held at once.
//
// Reads of a batch: the keys' slots are found in the index; when a sample of their pages is not resident
// (mincore), the whole batch's pages are requested from the kernel at once (process_madvise WILLNEED, or
// posix_fadvise per page before Linux 5.16, so the device reads them in parallel) and waited for outside the
// lock, then the rows are copied with pread (mapping each page would cost a page fault).
//
// The file is scratch: it is created empty (an existing file at the path is truncated), never synced, and
// nothing survives the object (ShardStore keeps it under its working store, which is discarded on a restart).
//
// Thread-safe: Read from many threads at once (a shared lock), Write and Delete exclusive.
#ifndef KESTREL_SERVER_COLD_ROW_FILE_H_
#define KESTREL_SERVER_COLD_ROW_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace kestrel {

// Owns its file descriptor, mappings and index. Thread-safe (see the file comment).
class ColdRowFile {
 public:
  // The widest row: 2^20 words (4 MiB), beyond any table's stored row.
  static constexpr int kMaxFloats = 1 << 20;
  // The most rows one file holds (the index's hash bits and 32-bit slot ids): 3 * 2^30.
  static constexpr uint64_t kMaxRows = uint64_t{3} << 30;
  // The file grows by segments of this many bytes (rounded up to whole records' pages). Default: 64 MiB.
  static constexpr size_t kDefaultSegmentBytes = size_t{64} << 20;

  // Creates (or truncates) the file at `path` for rows of `floats` words ([1, kMaxFloats]); InvalidArgument for
  // another width, Unavailable when the file cannot be created.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ColdRowFile>> Create(const std::string& path, int floats,
                                                            size_t segment_bytes = kDefaultSegmentBytes);
  ~ColdRowFile();

  ColdRowFile(const ColdRowFile&) = delete;
  ColdRowFile& operator=(const ColdRowFile&) = delete;

  int floats() const { return floats_; }
  const std::string& path() const { return path_; }

  // Stores the rows of `keys` (keys.size() * floats() words; a key may appear once), replacing the records of
  // keys held. InvalidArgument for another row width (nothing written); ResourceExhausted past kMaxRows or
  // Unavailable when the file cannot grow or be written (the keys before the failing one are written).
  [[nodiscard]] absl::Status Write(absl::Span<const uint64_t> keys, absl::Span<const float> rows) ABSL_LOCKS_EXCLUDED(mu_);
  // Reads the rows of `keys` into `rows` (keys.size() * floats() words), setting found[i] to 1 for each key held
  // (`found` has keys.size() entries; a key not held leaves its row and entry untouched). Unavailable when the
  // device fails a read of rows not in the page cache.
  [[nodiscard]] absl::Status Read(absl::Span<const uint64_t> keys, float* rows, absl::Span<uint8_t> found) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Deletes the records of `keys` (absent ones are no error); their slots are reused.
  void Delete(absl::Span<const uint64_t> keys) ABSL_LOCKS_EXCLUDED(mu_);

  // Keys held.
  uint64_t size() const ABSL_LOCKS_EXCLUDED(mu_);
  // Bytes of memory held outside the file's pages: index, free slot list and segment table (capacities).
  uint64_t memory_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  // Bytes of the file (whole segments).
  uint64_t file_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  // Pages of the file in the page cache now (mincore over the mappings).
  [[nodiscard]] absl::StatusOr<uint64_t> ResidentPages() const ABSL_LOCKS_EXCLUDED(mu_);

  // For benchmarks of the uncached path: unmaps the file's pages from this process (MADV_DONTNEED), writes the
  // dirty ones back (fdatasync) and drops the file from the page cache (posix_fadvise DONTNEED). The rows stay.
  [[nodiscard]] absl::Status TEST_DropCachedPages() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Where a slot's record is: its segment and byte offset in the file.
  struct Place {
    uint32_t segment;
    uint64_t offset;
  };
  // Where records go. A unit is a page holding whole records, or the pages of one record wider than a page.
  struct Layout {
    uint64_t record_bytes;     // key + row
    uint64_t page_bytes;
    uint64_t unit_bytes;
    uint32_t unit_records;     // records per unit
    uint64_t segment_bytes;    // whole units
    uint64_t segment_records;  // records per segment
  };
  static Layout LayoutFor(int floats, size_t segment_bytes);
  // Pages of the file: at `offset` in the file, mapped at `address`.
  struct PageRange {
    uint64_t offset;
    uint64_t bytes;
    char* address;
  };

  ColdRowFile(std::string path, int fd, int floats, const Layout& layout);

  Place PlaceOf(uint32_t slot) const;
  char* RecordLocked(uint32_t slot) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The index position holding `key` (whose hash is `hash`), or -1. Touches the records of entries whose hash
  // bits match.
  int64_t FindLocked(uint64_t key, uint32_t hash) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The slot of the first entry with `hash`'s bits (the key's record, unless two keys share the bits), or -1.
  // Touches no record.
  int64_t FirstCandidateLocked(uint32_t hash) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Copies the rows of the keys held; rows already found are skipped.
  void CopyLocked(absl::Span<const uint64_t> keys, float* rows, absl::Span<uint8_t> found) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The same through pread (no page table update: the pages were just read, and mapping each would cost a page
  // fault); Unavailable when a read fails.
  [[nodiscard]] absl::Status PreadLocked(absl::Span<const uint64_t> keys, float* rows, absl::Span<uint8_t> found) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Whether the records of a sample of the keys held among `keys` are in the page cache.
  bool SampleResidentLocked(absl::Span<const uint64_t> keys) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Asks the kernel to read the pages of `ranges` (sorted) into the page cache now, without waiting.
  void RequestPages(const std::vector<PageRange>& ranges) const;
  // A free slot (reused or new; the file grows when needed).
  [[nodiscard]] absl::StatusOr<uint32_t> AllocateSlotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::Status AddSegmentLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void GrowIndexLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the entry at index position `pos` (backward-shift deletion: no tombstones).
  void EraseAtLocked(size_t pos) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  const int fd_;
  const int floats_;
  const Layout layout_;

  mutable absl::Mutex mu_;
  std::vector<char*> segments_ ABSL_GUARDED_BY(mu_);  // mappings of segment_bytes_ each
  // Entry: hash bits << 32 | (slot + 1); 0 = empty. Size a power of two (or 0).
  std::vector<uint64_t> index_ ABSL_GUARDED_BY(mu_);
  uint64_t rows_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t next_slot_ ABSL_GUARDED_BY(mu_) = 0;       // slots below it have been used
  std::vector<uint32_t> free_slots_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_COLD_ROW_FILE_H_
