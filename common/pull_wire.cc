#include "common/pull_wire.h"

#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/half.h"
#include "common/slice_reader.h"

namespace kestrel {
namespace {

constexpr uint8_t kDimTag = (3 << 3) | 0;        // field 3, varint
constexpr uint8_t kValuesTag = (1 << 3) | 2;     // field 1, length-delimited
constexpr uint8_t kValueTypeTag = (2 << 3) | 0;  // field 2, varint
constexpr uint8_t kPullsTag = (1 << 3) | 2;      // StepResponse.pulls: field 1, length-delimited
// Lengths are below 2^35 (the Shard bounds responses far below that), so 5 bytes always suffice. A nested
// response's dim takes 7 (still a valid varint) to keep the rows after its 6 extra bytes 4-byte aligned.
constexpr size_t kPaddedVarint = 5;
constexpr size_t kNestedDimVarint = 7;

uint8_t* PutPaddedVarint(uint64_t v, size_t width, uint8_t* p) {
  for (size_t i = 0; i + 1 < width; ++i) *p++ = static_cast<uint8_t>(((v >> (7 * i)) & 0x7f) | 0x80);
  *p++ = static_cast<uint8_t>((v >> (7 * (width - 1))) & 0x7f);
  return p;
}

}  // namespace

void* AllocatePullSlice(size_t values, int dim, ValueType type, bool nested, grpc::Slice* slice) {
  const size_t bytes = values * BytesPerValue(type);
  const bool typed = type != VALUE_TYPE_FLOAT32;
  const size_t dim_width = nested ? kNestedDimVarint : kPaddedVarint;
  const size_t inner = 1 + dim_width + (typed ? 1 + kPaddedVarint : 0) + 1 + kPaddedVarint + bytes;
  const size_t total = (nested ? 1 + kPaddedVarint : 0) + inner;
  // Our own malloc'ed buffer (16-byte aligned), not grpc::Slice(len): gRPC keeps small slices inline at an
  // odd offset, which would misalign the rows after the prefix.
  void* buffer = std::malloc(std::max<size_t>(total, 1));
  if (buffer == nullptr) std::abort();  // out of memory, like a failed operator new
  *slice = grpc::Slice(buffer, total, &std::free);
  uint8_t* p = static_cast<uint8_t*>(buffer);
  if (nested) {
    *p++ = kPullsTag;
    p = PutPaddedVarint(inner, kPaddedVarint, p);
  }
  *p++ = kDimTag;
  p = PutPaddedVarint(static_cast<uint64_t>(dim), dim_width, p);
  if (typed) {
    *p++ = kValueTypeTag;
    p = PutPaddedVarint(static_cast<uint64_t>(type), kPaddedVarint, p);
  }
  *p++ = kValuesTag;
  p = PutPaddedVarint(bytes, kPaddedVarint, p);
  return p;
}

void* PullResponseWriter::Allocate(size_t values, int dim, ValueType type) {
  allocated_ = true;
  return AllocatePullSlice(values, dim, type, /*nested=*/false, &slice_);
}

grpc::ByteBuffer PullResponseWriter::Finish() {
  if (!allocated_) return grpc::ByteBuffer();
  return grpc::ByteBuffer(&slice_, 1);
}

absl::Status ReadPullValues(SliceReader& reader, float* out, size_t floats, ValueType type) {
  const size_t expected = floats * BytesPerValue(type);
  if (BytesPerValue(type) == 0) return absl::InvalidArgumentError("ReadPullValues: unknown value type");
  // Protobuf keeps the last occurrence of a field: so does this reader (each values field is decoded over the
  // previous one, and the last one's verdict stands).
  bool seen_values = false;
  absl::Status values_status;
  uint64_t answered_type = VALUE_TYPE_FLOAT32;
  thread_local std::string halves;
  while (!reader.done()) {
    uint64_t tag, value;
    if (!reader.Varint(&tag)) return absl::DataLossError("malformed PullResponse: truncated tag");
    const uint64_t field = tag >> 3;
    if (field == 1 && (tag & 7) == 2) {
      if (!reader.Varint(&value)) return absl::DataLossError("malformed PullResponse: truncated length");
      seen_values = true;
      if (value != expected) {
        if (!reader.Bytes(value, nullptr)) return absl::DataLossError("malformed PullResponse: truncated values");
        values_status = absl::DataLossError(absl::StrFormat(
            "PullResponse carries %d bytes of values, expected %d (%d %s)", value, expected, floats,
            ValueType_Name(type)));
        continue;
      }
      if (type == VALUE_TYPE_FLOAT32) {
        if (!reader.Bytes(value, reinterpret_cast<char*>(out))) {
          return absl::DataLossError("malformed PullResponse: truncated values");
        }
        values_status = absl::OkStatus();
      } else {
        absl::string_view bytes;
        if (!reader.View(value, &bytes, &halves)) return absl::DataLossError("malformed PullResponse: truncated values");
        if (reinterpret_cast<uintptr_t>(bytes.data()) % 2 != 0) {  // halves are read 2-byte aligned
          halves.assign(bytes.data(), bytes.size());
          bytes = halves;
        }
        values_status = DecodeValues(type, bytes.data(), floats, 0, out);
      }
    } else if (field == 2 && (tag & 7) == 0) {
      if (!reader.Varint(&answered_type)) return absl::DataLossError("malformed PullResponse: truncated varint");
    } else if (!SkipField(reader, tag)) {
      return absl::DataLossError("malformed PullResponse: truncated or bad field");
    }
  }
  if (static_cast<int32_t>(static_cast<uint32_t>(answered_type)) != type) {  // an enum varint: int32, as protobuf
    return absl::DataLossError(absl::StrFormat("PullResponse answers value type %d, expected %s", answered_type,
                                               ValueType_Name(type)));
  }
  if (!seen_values && floats != 0) {
    return absl::DataLossError(absl::StrFormat("PullResponse carries no values, expected %d floats", floats));
  }
  return values_status;
}

absl::Status ReadPullValues(const grpc::ByteBuffer& buffer, float* out, size_t floats, ValueType type) {
  std::vector<grpc::Slice> slices;
  if (!DumpSlices(buffer, &slices)) return absl::DataLossError("unreadable PullResponse");
  SliceReader reader(&slices);
  return ReadPullValues(reader, out, floats, type);
}

absl::Status ReadPushRequest(const grpc::ByteBuffer& buffer, PushRequestView* out) {
  if (!DumpSlices(buffer, &out->slices)) return absl::InvalidArgumentError("unreadable PushRequest");
  SliceReader reader(&out->slices);
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
  return absl::OkStatus();
}

}  // namespace kestrel
