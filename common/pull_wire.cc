#include "common/pull_wire.h"

#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"

namespace kestrel {
namespace {

constexpr size_t kPaddedVarint = 5;
constexpr uint8_t kDimTag = (3 << 3) | 0;     // field 3, varint
constexpr uint8_t kValuesTag = (1 << 3) | 2;  // field 1, length-delimited
constexpr size_t kPrefix = 1 + kPaddedVarint + 1 + kPaddedVarint;

// Lengths are below 2^35 (the Shard bounds responses far below that), so 5 bytes always suffice.
uint8_t* PutPaddedVarint(uint64_t v, uint8_t* p) {
  for (size_t i = 0; i + 1 < kPaddedVarint; ++i) *p++ = static_cast<uint8_t>(((v >> (7 * i)) & 0x7f) | 0x80);
  *p++ = static_cast<uint8_t>((v >> (7 * (kPaddedVarint - 1))) & 0x7f);
  return p;
}

// Reads bytes across the slices of a ByteBuffer.
class SliceReader {
 public:
  explicit SliceReader(std::vector<grpc::Slice> slices) : slices_(std::move(slices)) {}

  bool done() {
    SkipEmpty();
    return index_ == slices_.size();
  }
  bool Byte(uint8_t* b) {
    SkipEmpty();
    if (index_ == slices_.size()) return false;
    *b = slices_[index_].begin()[offset_++];
    return true;
  }
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!Byte(&b)) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  // Copies n bytes to dst (or skips them when dst is null).
  bool Bytes(size_t n, char* dst) {
    while (n > 0) {
      SkipEmpty();
      if (index_ == slices_.size()) return false;
      const size_t take = std::min(n, slices_[index_].size() - offset_);
      if (dst != nullptr) {
        std::memcpy(dst, slices_[index_].begin() + offset_, take);
        dst += take;
      }
      offset_ += take;
      n -= take;
    }
    return true;
  }

 private:
  void SkipEmpty() {
    while (index_ < slices_.size() && offset_ == slices_[index_].size()) {
      ++index_;
      offset_ = 0;
    }
  }
  std::vector<grpc::Slice> slices_;
  size_t index_ = 0;
  size_t offset_ = 0;
};

}  // namespace

float* PullResponseWriter::Allocate(size_t floats, int dim) {
  const size_t bytes = floats * sizeof(float);
  // Our own malloc'ed buffer (16-byte aligned), not grpc::Slice(len): gRPC keeps small slices inline at an
  // odd offset, which would misalign the rows after the 12-byte prefix.
  void* buffer = std::malloc(std::max<size_t>(kPrefix + bytes, 1));
  if (buffer == nullptr) std::abort();  // out of memory, like a failed operator new
  slice_ = grpc::Slice(buffer, kPrefix + bytes, &std::free);
  uint8_t* p = static_cast<uint8_t*>(buffer);
  *p++ = kDimTag;
  p = PutPaddedVarint(static_cast<uint64_t>(dim), p);
  *p++ = kValuesTag;
  p = PutPaddedVarint(bytes, p);
  allocated_ = true;
  return reinterpret_cast<float*>(p);
}

grpc::ByteBuffer PullResponseWriter::Finish() {
  if (!allocated_) return grpc::ByteBuffer();
  return grpc::ByteBuffer(&slice_, 1);
}

absl::Status ReadPullValues(const grpc::ByteBuffer& buffer, float* out, size_t floats) {
  std::vector<grpc::Slice> slices;
  if (buffer.Valid() && !buffer.Dump(&slices).ok()) return absl::DataLossError("unreadable PullResponse");
  SliceReader reader(std::move(slices));
  bool seen_values = false;
  while (!reader.done()) {
    uint64_t tag, value;
    if (!reader.Varint(&tag)) return absl::DataLossError("malformed PullResponse: truncated tag");
    switch (tag & 7) {
      case 0:
        if (!reader.Varint(&value)) return absl::DataLossError("malformed PullResponse: truncated varint");
        break;
      case 2: {
        if (!reader.Varint(&value)) return absl::DataLossError("malformed PullResponse: truncated length");
        const bool is_values = (tag >> 3) == 1;
        if (is_values && value != floats * sizeof(float)) {
          return absl::DataLossError(
              absl::StrFormat("PullResponse carries %d bytes of values, expected %d", value, floats * sizeof(float)));
        }
        if (!reader.Bytes(value, is_values ? reinterpret_cast<char*>(out) : nullptr)) {
          return absl::DataLossError("malformed PullResponse: truncated field");
        }
        seen_values |= is_values;
        break;
      }
      case 1:
        if (!reader.Bytes(8, nullptr)) return absl::DataLossError("malformed PullResponse");
        break;
      case 5:
        if (!reader.Bytes(4, nullptr)) return absl::DataLossError("malformed PullResponse");
        break;
      default:
        return absl::DataLossError("malformed PullResponse: bad wire type");
    }
  }
  if (!seen_values && floats != 0) {
    return absl::DataLossError(absl::StrFormat("PullResponse carries no values, expected %d floats", floats));
  }
  return absl::OkStatus();
}

}  // namespace kestrel
