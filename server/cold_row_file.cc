// ColdRowFile: a table's disk-tier rows in an mmapped file of fixed-size records (see cold_row_file.h).
#include "server/cold_row_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/hash.h"
#include "common/status.h"
#include "server/row_arena.h"

namespace kestrel {
namespace {

// Pages whose residency a Read samples before deciding to request its batch's pages.
constexpr size_t kResidencySamples = 8;
// Keys a Read looks ahead: index entries are prefetched this far ahead, records half as far.
constexpr size_t kLookahead = 16;

// The 32 hash bits an index entry keeps: the entry's position (low bits) and a filter on the key.
uint32_t HashOf(uint64_t key) { return static_cast<uint32_t>(Mix64(key) >> 32); }
uint32_t EntryHash(uint64_t entry) { return static_cast<uint32_t>(entry >> 32); }
uint32_t EntrySlot(uint64_t entry) { return static_cast<uint32_t>(entry) - 1; }
uint64_t MakeEntry(uint32_t hash, uint32_t slot) { return (uint64_t{hash} << 32) | (uint64_t{slot} + 1); }

uint64_t KeyOfRecord(const char* record) {
  uint64_t key;
  std::memcpy(&key, record, sizeof(key));
  return key;
}

[[nodiscard]] absl::Status ErrnoError(int error, absl::string_view what, const std::string& path) {
  return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", std::strerror(error)));
}

uint64_t PageBytes() {
  const long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? static_cast<uint64_t>(page) : 4096;
}

}  // namespace

ColdRowFile::Layout ColdRowFile::LayoutFor(int floats, size_t segment_bytes) {
  Layout l;
  l.record_bytes = sizeof(uint64_t) + sizeof(float) * static_cast<uint64_t>(floats);
  l.page_bytes = PageBytes();
  if (l.record_bytes <= l.page_bytes) {
    l.unit_bytes = l.page_bytes;
    l.unit_records = static_cast<uint32_t>(l.page_bytes / l.record_bytes);
  } else {
    l.unit_bytes = (l.record_bytes + l.page_bytes - 1) / l.page_bytes * l.page_bytes;
    l.unit_records = 1;
  }
  const uint64_t units = std::max<uint64_t>(1, segment_bytes / l.unit_bytes);
  l.segment_bytes = units * l.unit_bytes;
  l.segment_records = units * l.unit_records;
  return l;
}

absl::StatusOr<std::unique_ptr<ColdRowFile>> ColdRowFile::Create(const std::string& path, int floats,
                                                                size_t segment_bytes) {
  if (floats < 1 || floats > kMaxFloats) {
    return absl::InvalidArgumentError(
        absl::StrFormat("disk tier file %s: rows of %d floats, expected 1 to %d", path, floats, kMaxFloats));
  }
  if (segment_bytes == 0) return absl::InvalidArgumentError("disk tier file: segment_bytes must be positive");
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError(errno, "cannot create the disk tier file", path);
  // Reads through the descriptor (Read's waits) read the page asked for, not a readahead window.
  posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  return std::unique_ptr<ColdRowFile>(new ColdRowFile(path, fd, floats, LayoutFor(floats, segment_bytes)));
}

ColdRowFile::ColdRowFile(std::string path, int fd, int floats, const Layout& layout)
    : path_(std::move(path)), fd_(fd), floats_(floats), layout_(layout) {}

ColdRowFile::~ColdRowFile() {
  absl::MutexLock lock(&mu_);
  for (char* base : segments_) munmap(base, layout_.segment_bytes);
  close(fd_);
}

ColdRowFile::Place ColdRowFile::PlaceOf(uint32_t slot) const {
  const uint64_t segment = slot / layout_.segment_records;
  const uint64_t within = slot % layout_.segment_records;
  return Place{static_cast<uint32_t>(segment), segment * layout_.segment_bytes +
                                                   within / layout_.unit_records * layout_.unit_bytes +
                                                   within % layout_.unit_records * layout_.record_bytes};
}

char* ColdRowFile::RecordLocked(uint32_t slot) const {
  const Place place = PlaceOf(slot);
  return segments_[place.segment] + (place.offset - place.segment * layout_.segment_bytes);
}

int64_t ColdRowFile::FindLocked(uint64_t key, uint32_t hash) const {
  if (index_.empty()) return -1;
  const size_t mask = index_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const uint64_t entry = index_[i];
    if (entry == 0) return -1;
    if (EntryHash(entry) == hash && KeyOfRecord(RecordLocked(EntrySlot(entry))) == key) return static_cast<int64_t>(i);
  }
}

int64_t ColdRowFile::FirstCandidateLocked(uint32_t hash) const {
  if (index_.empty()) return -1;
  const size_t mask = index_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const uint64_t entry = index_[i];
    if (entry == 0) return -1;
    if (EntryHash(entry) == hash) return EntrySlot(entry);
  }
}

void ColdRowFile::CopyLocked(absl::Span<const uint64_t> keys, float* rows, absl::Span<uint8_t> found) const {
  if (index_.empty()) return;
  const size_t n = keys.size(), mask = index_.size() - 1;
  const size_t row_bytes = sizeof(float) * floats_;
  thread_local std::vector<uint32_t> hashes;
  thread_local std::vector<int64_t> candidates;
  hashes.resize(n);
  candidates.resize(n);
  // A pipeline over the keys: hash and prefetch the index entry of key i, find the candidate record of key
  // i - kLookahead / 2 and prefetch it, copy the row of key i - kLookahead.
  for (size_t i = 0; i < n + kLookahead; ++i) {
    if (i < n) {
      hashes[i] = HashOf(keys[i]);
      PrefetchLine<0>(&index_[hashes[i] & mask]);
    }
    if (i >= kLookahead / 2 && i - kLookahead / 2 < n) {
      const size_t j = i - kLookahead / 2;
      candidates[j] = FirstCandidateLocked(hashes[j]);
      if (candidates[j] >= 0) {
        PrefetchSpan(RecordLocked(static_cast<uint32_t>(candidates[j])), layout_.record_bytes, /*for_write=*/false);
      }
    }
    if (i < kLookahead) continue;
    const size_t j = i - kLookahead;
    if (found[j] || candidates[j] < 0) continue;
    const char* record = RecordLocked(static_cast<uint32_t>(candidates[j]));
    if (KeyOfRecord(record) != keys[j]) {
      // Another key with the same hash bits came first: the full lookup.
      const int64_t pos = FindLocked(keys[j], hashes[j]);
      if (pos < 0) continue;
      record = RecordLocked(EntrySlot(index_[pos]));
    }
    std::memcpy(rows + j * static_cast<size_t>(floats_), record + sizeof(uint64_t), row_bytes);
    found[j] = 1;
  }
}

bool ColdRowFile::SampleResidentLocked(absl::Span<const uint64_t> keys) const {
  // Keys spread over the batch: one held key per 64 keys (a mincore each), at most kResidencySamples, among 4x as
  // many looked up.
  const size_t samples = std::min(kResidencySamples, 1 + keys.size() / 64);
  const size_t stride = std::max<size_t>(1, keys.size() / (4 * samples));
  size_t checked = 0;
  for (size_t i = 0; i < keys.size() && checked < samples; i += stride) {
    const int64_t slot = FirstCandidateLocked(HashOf(keys[i]));
    if (slot < 0) continue;
    ++checked;
    const uintptr_t record = reinterpret_cast<uintptr_t>(RecordLocked(static_cast<uint32_t>(slot)));
    unsigned char resident = 0;
    if (mincore(reinterpret_cast<void*>(record / layout_.page_bytes * layout_.page_bytes), layout_.page_bytes,
                &resident) != 0 ||
        (resident & 1) == 0) {
      return false;
    }
  }
  return true;
}

void ColdRowFile::RequestPages(const std::vector<PageRange>& ranges) const {
  // One process_madvise(MADV_WILLNEED) per up to kMaxRanges ranges where the kernel has it (5.16 and later):
  // about half the CPU of one posix_fadvise per range, and the device gets the batch at once.
  static std::atomic<bool> vector_advice{true};
  static const int self = static_cast<int>(syscall(SYS_pidfd_open, getpid(), 0));
  constexpr size_t kMaxRanges = 1024;  // UIO_MAXIOV
  size_t done = 0;
  if (self >= 0 && vector_advice.load(std::memory_order_relaxed)) {
    thread_local std::vector<iovec> iov;
    iov.clear();
    for (const PageRange& r : ranges) iov.push_back({r.address, r.bytes});
    while (done < ranges.size()) {
      const size_t n = std::min(kMaxRanges, ranges.size() - done);
      const long advised = syscall(SYS_process_madvise, self, iov.data() + done, n, MADV_WILLNEED, 0);
      if (advised < 0) {
        if (errno == EINVAL || errno == ENOSYS || errno == EPERM) vector_advice.store(false, std::memory_order_relaxed);
        break;  // the rest one range at a time
      }
      // Whole ranges advised (all of them unless the kernel stopped early).
      size_t bytes = static_cast<size_t>(advised);
      const size_t end = done + n;
      while (done < end && bytes >= iov[done].iov_len) bytes -= iov[done++].iov_len;
      if (done < end) break;
    }
  }
  for (size_t i = done; i < ranges.size(); ++i) {
    posix_fadvise(fd_, static_cast<off_t>(ranges[i].offset), static_cast<off_t>(ranges[i].bytes),
                  POSIX_FADV_WILLNEED);
  }
}

absl::Status ColdRowFile::Read(absl::Span<const uint64_t> keys, float* rows, absl::Span<uint8_t> found) const {
  if (keys.empty()) return absl::OkStatus();
  const uint64_t page = layout_.page_bytes;
  thread_local std::vector<uint64_t> offsets;
  thread_local std::vector<PageRange> ranges;
  offsets.clear();
  ranges.clear();
  {
    absl::ReaderMutexLock lock(&mu_);
    if (rows_ == 0) return absl::OkStatus();
    if (SampleResidentLocked(keys)) {
      CopyLocked(keys, rows, found);
      return absl::OkStatus();
    }
    for (uint64_t key : keys) {
      const int64_t slot = FirstCandidateLocked(HashOf(key));
      if (slot >= 0) offsets.push_back(PlaceOf(static_cast<uint32_t>(slot)).offset);
    }
    // The pages of those records, in file order; touching ranges of one segment merged. The mappings stay while
    // the file lives, so the addresses are good outside the lock.
    std::sort(offsets.begin(), offsets.end());
    for (uint64_t offset : offsets) {
      const uint64_t first = offset / page * page, end = (offset + layout_.record_bytes + page - 1) / page * page;
      const uint64_t segment = first / layout_.segment_bytes;
      if (!ranges.empty() && first <= ranges.back().offset + ranges.back().bytes &&
          ranges.back().offset / layout_.segment_bytes == segment) {
        ranges.back().bytes = std::max(ranges.back().bytes, end - ranges.back().offset);
        continue;
      }
      ranges.push_back({first, end - first, segments_[segment] + (first - segment * layout_.segment_bytes)});
    }
  }
  // Not cached: ask for every page of the batch at once (the device reads them in parallel), then wait for them
  // outside the lock, so pushes that spill rows meanwhile are not held up by the reads. A page that a Write
  // reuses meanwhile costs nothing: PreadLocked looks every key up again.
  RequestPages(ranges);
  for (const PageRange& r : ranges) {
    for (uint64_t p = r.offset; p < r.offset + r.bytes; p += page) {
      char byte;
      // A pread of one byte returns once the page is read (an error only leaves the copy to fault it in).
      (void)!pread(fd_, &byte, 1, static_cast<off_t>(p));
    }
  }
  absl::ReaderMutexLock lock(&mu_);
  return PreadLocked(keys, rows, found);
}

absl::Status ColdRowFile::PreadLocked(absl::Span<const uint64_t> keys, float* rows,
                                      absl::Span<uint8_t> found) const {
  if (index_.empty()) return absl::OkStatus();
  const size_t mask = index_.size() - 1;
  thread_local std::vector<char> record;
  record.resize(layout_.record_bytes);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (found[i]) continue;
    const uint32_t hash = HashOf(keys[i]);
    for (size_t p = hash & mask; index_[p] != 0; p = (p + 1) & mask) {
      if (EntryHash(index_[p]) != hash) continue;
      const uint32_t slot = EntrySlot(index_[p]);
      const char* from = record.data();
      const ssize_t read =
          pread(fd_, record.data(), layout_.record_bytes, static_cast<off_t>(PlaceOf(slot).offset));
      if (read < 0) return ErrnoError(errno, "cannot read a row of the disk tier file", path_);
      if (read != static_cast<ssize_t>(layout_.record_bytes)) {
        return absl::UnavailableError(absl::StrCat("disk tier file ", path_, ": a row read came back short"));
      }
      if (KeyOfRecord(from) != keys[i]) continue;
      std::memcpy(rows + i * static_cast<size_t>(floats_), from + sizeof(uint64_t), sizeof(float) * floats_);
      found[i] = 1;
      break;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> ColdRowFile::AllocateSlotLocked() {
  if (!free_slots_.empty()) {
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }
  if (next_slot_ == segments_.size() * layout_.segment_records) KESTREL_RETURN_IF_ERROR(AddSegmentLocked());
  return next_slot_++;
}

absl::Status ColdRowFile::AddSegmentLocked() {
  const uint64_t offset = segments_.size() * layout_.segment_bytes;
  // Blocks are reserved now: no write fails for space, and no read through the mapping meets a hole.
  if (const int error = posix_fallocate(fd_, static_cast<off_t>(offset), static_cast<off_t>(layout_.segment_bytes));
      error != 0) {
    return ErrnoError(
        error, absl::StrFormat("cannot grow to %d bytes: the disk tier file", offset + layout_.segment_bytes), path_);
  }
  // Read-only: rows are written with pwrite (see Write).
  void* base = mmap(nullptr, layout_.segment_bytes, PROT_READ, MAP_SHARED, fd_, static_cast<off_t>(offset));
  if (base == MAP_FAILED) return ErrnoError(errno, "cannot map the disk tier file", path_);
  // A fault reads its page, not a readahead window around it.
  madvise(base, layout_.segment_bytes, MADV_RANDOM);
  segments_.push_back(static_cast<char*>(base));
  return absl::OkStatus();
}

void ColdRowFile::GrowIndexLocked() {
  const size_t capacity = index_.empty() ? 16 : index_.size() * 2;
  std::vector<uint64_t> index(capacity, 0);
  const size_t mask = capacity - 1;
  for (uint64_t entry : index_) {
    if (entry == 0) continue;
    size_t i = EntryHash(entry) & mask;
    while (index[i] != 0) i = (i + 1) & mask;
    index[i] = entry;
  }
  index_.swap(index);
}

void ColdRowFile::EraseAtLocked(size_t pos) {
  const size_t mask = index_.size() - 1;
  size_t hole = pos;
  for (size_t j = (hole + 1) & mask; index_[j] != 0; j = (j + 1) & mask) {
    const size_t home = EntryHash(index_[j]) & mask;
    // The entry at j may fill the hole unless its home lies cyclically in (hole, j].
    if (((j - home) & mask) >= ((j - hole) & mask)) {
      index_[hole] = index_[j];
      hole = j;
    }
  }
  index_[hole] = 0;
}

absl::Status ColdRowFile::Write(absl::Span<const uint64_t> keys, absl::Span<const float> rows) {
  if (rows.size() != keys.size() * static_cast<size_t>(floats_)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "disk tier file %s holds rows of %d floats; a write of %d keys brought %d floats", path_, floats_,
        keys.size(), rows.size()));
  }
  const size_t row_bytes = sizeof(float) * floats_;
  thread_local std::vector<char> record;
  record.resize(layout_.record_bytes);
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint32_t hash = HashOf(keys[i]);
    std::memcpy(record.data(), &keys[i], sizeof(uint64_t));
    std::memcpy(record.data() + sizeof(uint64_t), rows.data() + i * static_cast<size_t>(floats_), row_bytes);
    const int64_t pos = FindLocked(keys[i], hash);
    uint32_t slot;
    if (pos >= 0) {
      slot = EntrySlot(index_[pos]);  // replaced in place
    } else {
      if (rows_ >= kMaxRows) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "disk tier file %s holds %d rows, its limit: spread the table over more servers", path_, rows_));
      }
      if ((rows_ + 1) * 4 > index_.size() * 3) GrowIndexLocked();
      KESTREL_ASSIGN_OR_RETURN(slot, AllocateSlotLocked());
    }
    // Written through the descriptor, not the mapping: a store into a mapped page that writeback has cleaned
    // costs a page fault (about 25 us on the machine of bench/results/bounded_tables.md), a pwrite a copy.
    if (pwrite(fd_, record.data(), layout_.record_bytes, static_cast<off_t>(PlaceOf(slot).offset)) !=
        static_cast<ssize_t>(layout_.record_bytes)) {
      const int error = errno;
      if (pos < 0) free_slots_.push_back(slot);
      return ErrnoError(error, "cannot write a row to the disk tier file", path_);
    }
    if (pos < 0) {
      const size_t mask = index_.size() - 1;
      size_t p = hash & mask;
      while (index_[p] != 0) p = (p + 1) & mask;
      index_[p] = MakeEntry(hash, slot);
      ++rows_;
    }
  }
  return absl::OkStatus();
}

void ColdRowFile::Delete(absl::Span<const uint64_t> keys) {
  absl::MutexLock lock(&mu_);
  for (uint64_t key : keys) {
    const int64_t pos = FindLocked(key, HashOf(key));
    if (pos < 0) continue;
    free_slots_.push_back(EntrySlot(index_[pos]));
    EraseAtLocked(static_cast<size_t>(pos));
    --rows_;
  }
  if (rows_ == 0) {
    // Every slot is free: start from the file's beginning again.
    free_slots_.clear();
    next_slot_ = 0;
  }
}

uint64_t ColdRowFile::size() const {
  absl::ReaderMutexLock lock(&mu_);
  return rows_;
}

uint64_t ColdRowFile::memory_bytes() const {
  absl::ReaderMutexLock lock(&mu_);
  return index_.capacity() * sizeof(uint64_t) + free_slots_.capacity() * sizeof(uint32_t) +
         segments_.capacity() * sizeof(char*);
}

uint64_t ColdRowFile::file_bytes() const {
  absl::ReaderMutexLock lock(&mu_);
  return segments_.size() * layout_.segment_bytes;
}

absl::StatusOr<uint64_t> ColdRowFile::ResidentPages() const {
  absl::ReaderMutexLock lock(&mu_);
  const uint64_t page = layout_.page_bytes;
  std::vector<unsigned char> pages(layout_.segment_bytes / page);
  uint64_t resident = 0;
  for (char* base : segments_) {
    if (mincore(base, layout_.segment_bytes, pages.data()) != 0) return ErrnoError(errno, "mincore on", path_);
    for (unsigned char p : pages) resident += p & 1;
  }
  return resident;
}

absl::Status ColdRowFile::TEST_DropCachedPages() {
  absl::MutexLock lock(&mu_);
  for (char* base : segments_) {
    // Unmapped from this process (the pages stay in the page cache): else the page cache keeps them for the
    // mapping.
    if (madvise(base, layout_.segment_bytes, MADV_DONTNEED) != 0) return ErrnoError(errno, "madvise DONTNEED", path_);
  }
  if (fdatasync(fd_) != 0) return ErrnoError(errno, "fdatasync", path_);
  if (const int error = posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED); error != 0) {
    return ErrnoError(error, "posix_fadvise DONTNEED", path_);
  }
  return absl::OkStatus();
}

}  // namespace kestrel
