#include "common/slice_reader.h"

#include <algorithm>
#include <cstring>

#include "grpcpp/support/byte_buffer.h"

namespace kestrel {
namespace {

// Groups nested deeper than this are refused (protobuf's default recursion limit).
constexpr int kMaxGroupDepth = 100;

bool SkipFieldAt(SliceReader& reader, uint64_t tag, int depth) {
  if ((tag >> 3) == 0) return false;
  uint64_t value;
  switch (tag & 7) {
    case 0:
      return reader.Varint(&value);
    case 1:
      return reader.Bytes(8, nullptr);
    case 2:
      return reader.Varint(&value) && value <= reader.remaining() && reader.Bytes(value, nullptr);
    case 3:
      if (depth >= kMaxGroupDepth) return false;
      for (;;) {
        uint64_t inner;
        if (!reader.Varint(&inner)) return false;
        if ((inner & 7) == 4) return (inner >> 3) == (tag >> 3);
        if (!SkipFieldAt(reader, inner, depth + 1)) return false;
      }
    case 5:
      return reader.Bytes(4, nullptr);
    default:
      return false;
  }
}

}  // namespace

SliceReader::SliceReader(const std::vector<grpc::Slice>* slices) : slices_(slices) {
  for (const grpc::Slice& s : *slices) limit_ += s.size();
}

void SliceReader::SkipEmpty() {
  while (index_ < slices_->size() && offset_ == (*slices_)[index_].size()) {
    ++index_;
    offset_ = 0;
  }
}

bool SliceReader::done() { return limit_ == 0; }

bool SliceReader::Byte(uint8_t* b) {
  if (limit_ == 0) return false;
  SkipEmpty();
  *b = (*slices_)[index_].begin()[offset_++];
  --limit_;
  return true;
}

bool SliceReader::Varint(uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    uint8_t b;
    if (!Byte(&b)) return false;
    if (shift < 64) *v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

bool SliceReader::View(size_t n, absl::string_view* out, std::string* scratch) {
  if (n > limit_) return false;  // checked before allocating: a hostile length cannot make us reserve it
  SkipEmpty();
  if (n == 0) {
    *out = absl::string_view();
    return true;
  }
  const grpc::Slice& slice = (*slices_)[index_];
  if (slice.size() - offset_ >= n) {
    *out = absl::string_view(reinterpret_cast<const char*>(slice.begin()) + offset_, n);
    offset_ += n;
    limit_ -= n;
    return true;
  }
  scratch->resize(n);
  if (!Bytes(n, scratch->data())) return false;
  *out = *scratch;
  return true;
}

bool SliceReader::Bytes(size_t n, char* dst) {
  if (n > limit_) return false;
  limit_ -= n;
  while (n > 0) {
    SkipEmpty();
    const grpc::Slice& slice = (*slices_)[index_];
    const size_t take = std::min(n, slice.size() - offset_);
    if (dst != nullptr) {
      std::memcpy(dst, slice.begin() + offset_, take);
      dst += take;
    }
    offset_ += take;
    n -= take;
  }
  return true;
}

bool SliceReader::Sub(size_t n, SliceReader* sub) {
  if (n > limit_) return false;
  SliceReader inner;
  inner.slices_ = slices_;
  inner.index_ = index_;
  inner.offset_ = offset_;
  inner.limit_ = n;
  *sub = inner;
  return Bytes(n, nullptr);
}

bool SkipField(SliceReader& reader, uint64_t tag) { return SkipFieldAt(reader, tag, 0); }

bool DumpSlices(const grpc::ByteBuffer& buffer, std::vector<grpc::Slice>* slices) {
  slices->clear();
  return !buffer.Valid() || buffer.Dump(slices).ok();
}

}  // namespace kestrel
