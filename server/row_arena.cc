// RowArena: one lock stripe's rows in arena chunks and their open-addressing index (see row_arena.h).
#include "server/row_arena.h"

#include "common/hash.h"

namespace kestrel {
namespace {

// log2 of the rows per arena chunk for rows of `row_floats` floats (see RowArena::kChunkBytes).
int ChunkShift(int row_floats) {
  const size_t row_bytes = sizeof(float) * row_floats;
  int shift = 0;
  while ((size_t{2} << shift) <= RowArena::kMaxChunkRows &&
         (size_t{2} << shift) * row_bytes <= RowArena::kChunkBytes) {
    ++shift;
  }
  return shift;
}

}  // namespace

RowArena::RowArena(int row_floats)
    : row_floats_(row_floats), chunk_shift_(ChunkShift(row_floats)), chunk_mask_((uint32_t{1} << chunk_shift_) - 1) {}

uint64_t RowArena::BytesFor(uint64_t rows, int row_floats) {
  const uint64_t chunk_rows = uint64_t{1} << ChunkShift(row_floats);
  const uint64_t chunks = (rows + chunk_rows - 1) / chunk_rows + 1;  // Remove keeps one spare
  uint64_t index = 16;
  while (rows * 4 > index * 3) index *= 2;
  return chunks * (chunk_rows * row_floats * sizeof(float) + sizeof(std::unique_ptr<float[]>)) +
         index * sizeof(uint32_t) + rows;
}

void RowArena::GrowIndex() {
  const size_t capacity = index_.empty() ? 16 : index_.size() * 2;
  std::vector<uint32_t> index(capacity, 0);
  const size_t mask = capacity - 1;
  for (uint32_t id = 0; id < rows_; ++id) {
    size_t i = Mix64(KeyOf(row(id))) & mask;
    while (index[i] != 0) i = (i + 1) & mask;
    index[i] = id + 1;
  }
  index_.swap(index);
}

void RowArena::AddChunk() { chunks_.emplace_back(new float[(size_t{1} << chunk_shift_) * row_floats_]); }

void RowArena::Remove(uint32_t id) {
  Preserve(id);
  const size_t mask = index_.size() - 1;
  // The index slot of `id`, then backward-shift deletion (linear probing keeps no tombstones).
  size_t hole = Mix64(KeyOf(row(id))) & mask;
  while (index_[hole] != id + 1) hole = (hole + 1) & mask;
  for (size_t j = (hole + 1) & mask; index_[j] != 0; j = (j + 1) & mask) {
    const size_t home = Mix64(KeyOf(row(index_[j] - 1))) & mask;
    // The entry at j may fill the hole unless its home lies cyclically in (hole, j].
    if (((j - home) & mask) >= ((j - hole) & mask)) {
      index_[hole] = index_[j];
      hole = j;
    }
  }
  index_[hole] = 0;
  if (flags_[id] & kDirty) --num_dirty_;
  const uint32_t last = rows_ - 1;
  if (id != last) {
    // The last row moves into the freed place; its index slot follows.
    float* from = row(last);
    size_t slot = Mix64(KeyOf(from)) & mask;
    while (index_[slot] != last + 1) slot = (slot + 1) & mask;
    index_[slot] = id + 1;
    std::memcpy(row(id), from, sizeof(float) * row_floats_);
    flags_[id] = flags_[last];
  }
  flags_.pop_back();
  rows_ = last;
  // Free the arena's last chunk once a whole spare chunk is empty (one stays, so a row coming and going does
  // not allocate each time).
  if (chunks_.size() >= 2 && (static_cast<size_t>(rows_) >> chunk_shift_) + 2 <= chunks_.size()) {
    chunks_.pop_back();
  }
}

void RowArena::ClearDirty() {
  std::fill(flags_.begin(), flags_.end(), kStored);
  num_dirty_ = 0;
}

void RowArena::MarkAllDirty() {
  std::fill(flags_.begin(), flags_.end(), kDirty);
  num_dirty_ = rows_;
  cut_pending_ = false;
  DropRetained();
}

void RowArena::PreserveSlow(uint32_t id) {
  const float* r = row(id);
  const uint32_t per = RetainedChunkRows();
  if (retained_rows_ % per == 0) retained_chunks_.emplace_back(new float[static_cast<size_t>(per) * row_floats_]);
  std::memcpy(retained_chunks_.back().get() + static_cast<size_t>(retained_rows_ % per) * row_floats_, r,
              sizeof(float) * row_floats_);
  ++retained_rows_;
  flags_[id] |= kPreserved;
}

void RowArena::EndCut() {
  uint32_t dirty = 0;
  for (uint8_t& f : flags_) {
    // Written by the cut: stored. Written since: dirty.
    const uint8_t next = static_cast<uint8_t>(((f & kDirty) ? kStored : (f & kStored)) | ((f & kNext) ? kDirty : 0) |
                                              (f & kPinned));
    dirty += (next & kDirty) != 0;
    f = next;
  }
  num_dirty_ = dirty;
  cut_pending_ = false;
  DropRetained();
}

void RowArena::Clear() {
  cut_pending_ = false;
  DropRetained();
  std::vector<uint32_t>().swap(index_);
  std::vector<std::unique_ptr<float[]>>().swap(chunks_);
  std::vector<uint8_t>().swap(flags_);
  rows_ = 0;
  num_dirty_ = 0;
}

uint64_t RowArena::memory_bytes() const {
  return index_.capacity() * sizeof(uint32_t) +
         chunks_.size() * ((uint64_t{1} << chunk_shift_) * row_floats_ * sizeof(float)) +
         chunks_.capacity() * sizeof(std::unique_ptr<float[]>) + flags_.capacity();
}

}  // namespace kestrel
