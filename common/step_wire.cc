#include "common/step_wire.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/half.h"
#include "common/limits.h"
#include "common/pull_wire.h"
#include "common/slice_reader.h"

namespace kestrel {
namespace {

constexpr int kVarint = 0;
constexpr int kLengthDelimited = 2;

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}

void PutTag(int field, int wire, std::string* out) { PutVarint(static_cast<uint64_t>(field) << 3 | wire, out); }

// A length-delimited field's size on the wire (tags of the fields written here take one byte); 0 when empty,
// as protobuf omits empty bytes fields.
size_t BytesFieldSize(size_t n) { return n == 0 ? 0 : 1 + VarintSize(n) + n; }

void PutBytesField(int field, absl::string_view bytes, std::string* out) {
  if (bytes.empty()) return;
  PutTag(field, kLengthDelimited, out);
  PutVarint(bytes.size(), out);
  out->append(bytes.data(), bytes.size());
}

absl::string_view KeyBytes(absl::Span<const uint64_t> keys) {
  return absl::string_view(reinterpret_cast<const char*>(keys.data()), keys.size() * sizeof(uint64_t));
}

// The next n bytes as a view, copied into `scratch` (which then keeps them) only when they span slices.
bool ViewField(SliceReader& reader, size_t n, absl::string_view* out, std::deque<std::string>* scratch) {
  std::string copy;
  if (!reader.View(n, out, &copy)) return false;
  if (!copy.empty() && out->data() == copy.data()) {  // moving may move a short string's bytes: view the new home
    scratch->push_back(std::move(copy));
    *out = scratch->back();
  }
  return true;
}

[[nodiscard]] absl::Status ReadStepTable(SliceReader& reader, std::deque<std::string>* scratch, StepTableFields* t) {
  auto bad = [](const char* what) { return absl::InvalidArgumentError(absl::StrCat("malformed StepTable: ", what)); };
  while (!reader.done()) {
    uint64_t tag, value;
    if (!reader.Varint(&tag)) return bad("truncated tag");
    const uint64_t field = tag >> 3, wire = tag & 7;
    const bool bytes_field = field == 1 || field == 5 || field == 6 || field == 10;
    if (wire == kLengthDelimited && bytes_field) {
      if (!reader.Varint(&value) || value > reader.remaining()) return bad("truncated length-delimited field");
      absl::string_view* to = field == 1   ? &t->table
                              : field == 5 ? &t->push_keys
                              : field == 6 ? &t->push_values
                                           : &t->pull_keys;
      if (!ViewField(reader, value, to, scratch)) return bad("truncated bytes");
    } else if (wire == kVarint && !bytes_field && field >= 2 && field <= 11) {
      if (!reader.Varint(&value)) return bad("truncated varint");
      const int32_t v = static_cast<int32_t>(static_cast<uint32_t>(value));  // int32 and enum varints: two's complement
      switch (field) {
        case 2:
          t->dense = value != 0;
          break;
        case 3:
          t->dim = v;
          break;
        case 4:
          t->push = value != 0;
          break;
        case 7:
          t->push_type = static_cast<ValueType>(v);
          break;
        case 8:
          t->scale_exponent = v;
          break;
        case 9:
          t->pull = value != 0;
          break;
        case 11:
          t->pull_type = static_cast<ValueType>(v);
          break;
      }
    } else if (!SkipField(reader, tag)) {
      return bad("truncated or bad field");
    }
  }
  return absl::OkStatus();
}

}  // namespace

StepFields StepFieldsOf(const StepRequest& request) {
  StepFields fields;
  fields.header = &request.header();
  fields.pull_clock = request.pull_clock();
  fields.tables.reserve(request.tables_size());
  for (const StepTable& t : request.tables()) {
    StepTableFields& f = fields.tables.emplace_back();
    f.table = t.table();
    f.dense = t.dense();
    f.dim = t.dim();
    f.push = t.push();
    f.push_keys = t.push_keys();
    f.push_values = t.push_values();
    f.push_type = t.push_type();
    f.scale_exponent = t.scale_exponent();
    f.pull = t.pull();
    f.pull_keys = t.pull_keys();
    f.pull_type = t.pull_type();
  }
  return fields;
}

absl::Status ReadStepRequest(const grpc::ByteBuffer& buffer, StepRequestView* out) {
  if (!DumpSlices(buffer, &out->slices)) return absl::InvalidArgumentError("unreadable StepRequest");
  SliceReader reader(&out->slices);
  auto bad = [](const char* what) { return absl::InvalidArgumentError(absl::StrCat("malformed StepRequest: ", what)); };
  while (!reader.done()) {
    uint64_t tag, value;
    if (!reader.Varint(&tag)) return bad("truncated tag");
    const uint64_t field = tag >> 3, wire = tag & 7;
    if (wire == kLengthDelimited && (field == 1 || field == 2)) {
      if (!reader.Varint(&value) || value > reader.remaining()) return bad("truncated length-delimited field");
      if (field == 1) {
        absl::string_view bytes;
        std::string copy;
        // Merged, as protobuf merges repeated occurrences of a message field.
        if (!reader.View(value, &bytes, &copy) || !out->header_storage.MergeFromString(std::string(bytes))) {
          return bad("bad header");
        }
        continue;
      }
      if (out->tables.size() >= static_cast<size_t>(kMaxStepTables)) {
        return absl::InvalidArgumentError(absl::StrFormat("a step names more than %d tables", kMaxStepTables));
      }
      SliceReader table;
      if (!reader.Sub(value, &table)) return bad("truncated table");
      absl::Status read = ReadStepTable(table, &out->scratch, &out->tables.emplace_back());
      if (!read.ok()) return read;
    } else if (wire == kVarint && field == 3) {
      if (!reader.Varint(&value)) return bad("truncated varint");
      out->pull_clock = static_cast<int64_t>(value);
    } else if (!SkipField(reader, tag)) {
      return bad("truncated or bad field");
    }
  }
  return absl::OkStatus();
}

void* StepResponseWriter::AddPull(size_t values, int dim, ValueType type) {
  return AllocatePullSlice(values, dim, type, /*nested=*/true, &slices_.emplace_back());
}

void StepResponseWriter::AddPull(const PullResponse& pull) {
  const std::string message = pull.SerializeAsString();
  std::string field;
  PutTag(1, kLengthDelimited, &field);
  PutVarint(message.size(), &field);
  field += message;
  slices_.emplace_back(field);
}

grpc::ByteBuffer StepResponseWriter::Finish() {
  if (slices_.empty()) slices_.emplace_back();  // an empty StepResponse: a valid buffer of no bytes
  return grpc::ByteBuffer(slices_.data(), slices_.size());
}

absl::StatusOr<std::string> WriteStepRequest(const RequestHeader& header, int64_t pull_clock,
                                             absl::Span<const StepTableWrite> tables) {
  const std::string head = header.SerializeAsString();
  size_t estimate = BytesFieldSize(head.size()) + 11;
  for (const StepTableWrite& t : tables) {
    estimate += 64 + t.table.size() + (t.push_keys.size() + t.pull_keys.size()) * sizeof(uint64_t) +
                t.push_keys.size() * t.dim * BytesPerValue(t.push_type);
  }
  std::string out;
  out.reserve(estimate);
  PutBytesField(1, head, &out);
  if (pull_clock != 0) {
    PutTag(3, kVarint, &out);
    PutVarint(static_cast<uint64_t>(pull_clock), &out);
  }
  for (const StepTableWrite& t : tables) {
    const size_t floats = t.push ? t.push_keys.size() * static_cast<size_t>(t.dim) : 0;
    const size_t value_bytes = floats * BytesPerValue(t.push_type);
    if (floats > 0 && BytesPerValue(t.push_type) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("table '", t.table, "': unknown push type"));
    }
    StepTable meta;  // the small fields, serialized by protobuf; the large ones follow (fields come in any order)
    meta.set_table(std::string(t.table));
    meta.set_dense(t.dense);
    meta.set_dim(t.dim);
    if (t.push) {
      meta.set_push(true);
      meta.set_push_type(t.push_type);
      if (t.push_type == VALUE_TYPE_FLOAT16 && floats > 0)
        meta.set_scale_exponent(Float16ScaleExponent(t.grads, floats));
    }
    if (t.pull) {
      meta.set_pull(true);
      meta.set_pull_type(t.pull_type);
    }
    const std::string small = meta.SerializeAsString();
    const absl::string_view push_keys = t.push ? KeyBytes(t.push_keys) : absl::string_view();
    const absl::string_view pull_keys = t.pull ? KeyBytes(t.pull_keys) : absl::string_view();
    PutTag(2, kLengthDelimited, &out);
    PutVarint(small.size() + BytesFieldSize(push_keys.size()) + BytesFieldSize(value_bytes) +
                  BytesFieldSize(pull_keys.size()),
              &out);
    out += small;
    PutBytesField(5, push_keys, &out);
    if (value_bytes > 0) {
      PutTag(6, kLengthDelimited, &out);
      PutVarint(value_bytes, &out);
      const size_t at = out.size();
      out.resize(at + value_bytes);
      char* to = out.data() + at;
      thread_local std::vector<uint16_t> halves;  // halves are written 2-byte aligned: misaligned, via here
      const bool misaligned = reinterpret_cast<uintptr_t>(to) % alignof(uint16_t) != 0;
      if (misaligned) halves.resize(value_bytes / sizeof(uint16_t));
      absl::Status encoded = EncodeValues(t.push_type, t.grads, floats, meta.scale_exponent(),
                                          misaligned ? static_cast<void*>(halves.data()) : to);
      if (!encoded.ok()) return encoded;
      if (misaligned) std::memcpy(to, halves.data(), value_bytes);
    }
    PutBytesField(10, pull_keys, &out);
  }
  return out;
}

absl::Status ReadStepPulls(const grpc::ByteBuffer& buffer, absl::Span<const StepRead> reads) {
  std::vector<grpc::Slice> slices;
  if (!DumpSlices(buffer, &slices)) return absl::DataLossError("unreadable StepResponse");
  SliceReader reader(&slices);
  size_t next = 0;
  while (!reader.done()) {
    uint64_t tag, length;
    if (!reader.Varint(&tag)) return absl::DataLossError("malformed StepResponse: truncated tag");
    if (tag == (1 << 3 | kLengthDelimited)) {
      SliceReader pull;
      if (!reader.Varint(&length) || !reader.Sub(length, &pull)) {
        return absl::DataLossError("malformed StepResponse: truncated read");
      }
      if (next == reads.size()) {
        return absl::DataLossError(
            absl::StrFormat("the step's answer carries more than the %d reads asked", reads.size()));
      }
      const StepRead& read = reads[next++];
      absl::Status decoded = ReadPullValues(pull, read.out, read.floats, read.type);
      if (!decoded.ok()) return decoded;
    } else if (!SkipField(reader, tag)) {
      return absl::DataLossError("malformed StepResponse: truncated or bad field");
    }
  }
  if (next != reads.size()) {
    return absl::DataLossError(absl::StrFormat("the step's answer carries %d reads, %d asked", next, reads.size()));
  }
  return absl::OkStatus();
}

}  // namespace kestrel
