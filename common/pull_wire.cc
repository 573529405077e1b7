#include "common/pull_wire.h"

#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/half.h"

namespace kestrel {
namespace {

constexpr size_t kPaddedVarint = 5;
constexpr uint8_t kDimTag = (3 << 3) | 0;     // field 3, varint
constexpr uint8_t kValuesTag = (1 << 3) | 2;  // field 1, length-delimited
constexpr uint8_t kValueTypeTag = (2 << 3) | 0;  // field 2, varint
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
  // The next n bytes: a view into the current slice when they lie inside it, else a copy in `scratch`.
  bool View(size_t n, absl::string_view* out, std::string* scratch) {
    SkipEmpty();
    if (index_ < slices_.size() && slices_[index_].size() - offset_ >= n) {
      *out = absl::string_view(reinterpret_cast<const char*>(slices_[index_].begin()) + offset_, n);
      offset_ += n;
      return true;
    }
    if (n > remaining()) return false;  // checked before allocating: a hostile length cannot make us reserve it
    scratch->resize(n);
    if (!Bytes(n, scratch->data())) return false;
    *out = *scratch;
    return true;
  }
  size_t remaining() const {
    size_t left = 0;
    for (size_t i = index_; i < slices_.size(); ++i) left += slices_[i].size() - (i == index_ ? offset_ : 0);
    return left;
  }
  std::vector<grpc::Slice>& slices() { return slices_; }
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

void* PullResponseWriter::Allocate(size_t values, int dim, ValueType type) {
  const size_t bytes = values * BytesPerValue(type);
  const bool typed = type != VALUE_TYPE_FLOAT32;
  const size_t prefix = kPrefix + (typed ? 1 + kPaddedVarint : 0);
  // Our own malloc'ed buffer (16-byte aligned), not grpc::Slice(len): gRPC keeps small slices inline at an
  // odd offset, which would misalign the rows after the prefix.
  void* buffer = std::malloc(std::max<size_t>(prefix + bytes, 1));
  if (buffer == nullptr) std::abort();  // out of memory, like a failed operator new
  slice_ = grpc::Slice(buffer, prefix + bytes, &std::free);
  uint8_t* p = static_cast<uint8_t*>(buffer);
  *p++ = kDimTag;
  p = PutPaddedVarint(static_cast<uint64_t>(dim), p);
  if (typed) {
    *p++ = kValueTypeTag;
    p = PutPaddedVarint(static_cast<uint64_t>(type), p);
  }
  *p++ = kValuesTag;
  p = PutPaddedVarint(bytes, p);
  allocated_ = true;
  return p;
}

grpc::ByteBuffer PullResponseWriter::Finish() {
  if (!allocated_) return grpc::ByteBuffer();
  return grpc::ByteBuffer(&slice_, 1);
}

namespace {

// Groups nested deeper than this are refused (protobuf's default recursion limit).
constexpr int kMaxGroupDepth = 100;

// Skips a field the reader does not know, as protobuf skips unknown fields: `tag` (already read) gives its wire
// type. A group (wire type 3, deprecated but still parsed) is skipped through its matching end tag. False when
// truncated, of field number 0, an end tag without its start, nested past kMaxGroupDepth, or of a wire type
// protobuf refuses (6, 7).
bool SkipField(SliceReader& reader, uint64_t tag, int depth = 0) {
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
        if (!SkipField(reader, inner, depth + 1)) return false;
      }
    case 5:
      return reader.Bytes(4, nullptr);
    default:
      return false;
  }
}

}  // namespace

absl::Status ReadPullValues(const grpc::ByteBuffer& buffer, float* out, size_t floats, ValueType type) {
  std::vector<grpc::Slice> slices;
  if (buffer.Valid() && !buffer.Dump(&slices).ok()) return absl::DataLossError("unreadable PullResponse");
  const size_t expected = floats * BytesPerValue(type);
  if (BytesPerValue(type) == 0) return absl::InvalidArgumentError("ReadPullValues: unknown value type");
  SliceReader reader(std::move(slices));
  bool seen_values = false;
  uint64_t answered_type = VALUE_TYPE_FLOAT32;
  thread_local std::string halves;
  while (!reader.done()) {
    uint64_t tag, value;
    if (!reader.Varint(&tag)) return absl::DataLossError("malformed PullResponse: truncated tag");
    const uint64_t field = tag >> 3;
    if (field == 1 && (tag & 7) == 2) {
      if (!reader.Varint(&value)) return absl::DataLossError("malformed PullResponse: truncated length");
      if (value != expected) {
        return absl::DataLossError(absl::StrFormat("PullResponse carries %d bytes of values, expected %d (%d %s)",
                                                   value, expected, floats, ValueType_Name(type)));
      }
      if (type == VALUE_TYPE_FLOAT32) {
        if (!reader.Bytes(value, reinterpret_cast<char*>(out))) {
          return absl::DataLossError("malformed PullResponse: truncated values");
        }
      } else {
        absl::string_view bytes;
        if (!reader.View(value, &bytes, &halves)) return absl::DataLossError("malformed PullResponse: truncated values");
        if (reinterpret_cast<uintptr_t>(bytes.data()) % 2 != 0) {  // halves are read 2-byte aligned
          halves.assign(bytes.data(), bytes.size());
          bytes = halves;
        }
        if (absl::Status s = DecodeValues(type, bytes.data(), floats, 0, out); !s.ok()) return s;
      }
      seen_values = true;
    } else if (field == 2 && (tag & 7) == 0) {
      if (!reader.Varint(&answered_type)) return absl::DataLossError("malformed PullResponse: truncated varint");
    } else if (!SkipField(reader, tag)) {
      return absl::DataLossError("malformed PullResponse: truncated or bad field");
    }
  }
  if (answered_type != static_cast<uint64_t>(type)) {
    return absl::DataLossError(absl::StrFormat("PullResponse answers value type %d, expected %s", answered_type,
                                               ValueType_Name(type)));
  }
  if (!seen_values && floats != 0) {
    return absl::DataLossError(absl::StrFormat("PullResponse carries no values, expected %d floats", floats));
  }
  return absl::OkStatus();
}

absl::Status ReadPushRequest(const grpc::ByteBuffer& buffer, PushRequestView* out) {
  std::vector<grpc::Slice> slices;
  if (buffer.Valid() && !buffer.Dump(&slices).ok()) return absl::InvalidArgumentError("unreadable PushRequest");
  SliceReader reader(std::move(slices));
  auto bad = [](const char* what) { return absl::InvalidArgumentError(absl::StrCat("malformed PushRequest: ", what)); };
  while (!reader.done()) {
    uint64_t tag, value;
    if (!reader.Varint(&tag)) return bad("truncated tag");
    const uint64_t field = tag >> 3, wire = tag & 7;
    if (wire == 2 && field >= 1 && field <= 4) {
      if (!reader.Varint(&value) || value > reader.remaining()) return bad("truncated length-delimited field");
      absl::string_view bytes;
      std::string header_bytes;
      switch (field) {
        case 1:
          // Merged, as protobuf merges repeated occurrences of a message field.
          if (!reader.View(value, &bytes, &header_bytes) ||
              !out->header_storage.MergeFromString(std::string(bytes))) {
            return bad("bad header");
          }
          break;
        case 2:
          if (!reader.View(value, &out->table, &out->table_scratch)) return bad("truncated table");
          break;
        case 3:
          if (!reader.View(value, &out->keys, &out->key_scratch)) return bad("truncated keys");
          break;
        case 4:
          if (!reader.View(value, &out->values, &out->value_scratch)) return bad("truncated values");
          break;
      }
    } else if (wire == 0 && field >= 5 && field <= 9) {
      if (!reader.Varint(&value)) return bad("truncated varint");
      const int32_t v = static_cast<int32_t>(static_cast<uint32_t>(value));  // int32 varints: two's complement
      switch (field) {
        case 5:
          out->value_type = static_cast<ValueType>(v);
          break;
        case 6:
          out->dim = v;
          break;
        case 7:
          out->part = v;
          break;
        case 8:
          out->parts = v;
          break;
        case 9:
          out->scale_exponent = v;
          break;
      }
    } else if (!SkipField(reader, tag)) {
      return bad("truncated or bad field");
    }
  }
  out->slices = std::move(reader.slices());
  return absl::OkStatus();
}

}  // namespace kestrel
