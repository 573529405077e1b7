// CheckpointRowCodec: raw and Q8 checkpoint records of stored rows (see checkpoint_row_codec.h).
#include "server/checkpoint_row_codec.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/status.h"
#include "server/bounded_policy.h"
#include "server/quantized_rows.h"

namespace kestrel {
namespace {

void AppendRaw(const float* words, int n, std::string* out) {
  out->append(reinterpret_cast<const char*>(words), sizeof(float) * static_cast<size_t>(n));
}

// Takes n words from the front of `in`.
[[nodiscard]] absl::Status ReadRaw(absl::string_view* in, float* words, int n, const char* what) {
  const size_t bytes = sizeof(float) * static_cast<size_t>(n);
  if (in->size() < bytes) {
    return absl::DataLossError(absl::StrFormat("Q8 row: %s needs %d bytes, %d are left", what, bytes, in->size()));
  }
  std::memcpy(words, in->data(), bytes);
  in->remove_prefix(bytes);
  return absl::OkStatus();
}

// Takes a code of floats.size() floats from the front of `in`, refusing floats that are not finite (a kLog8 header
// whose base and step overflow float; EncodeRun never writes one).
[[nodiscard]] absl::Status ReadCoded(RowCode code, absl::string_view* in, absl::Span<float> floats, const char* what) {
  if (absl::Status s = DecodeRun(code, in, floats); !s.ok()) {
    return absl::DataLossError(absl::StrFormat("Q8 row: %s: %s", what, s.message()));
  }
  for (size_t i = 0; i < floats.size(); ++i) {
    if (!std::isfinite(floats[i])) {
      return absl::DataLossError(absl::StrFormat("Q8 row: %s: float %d decodes to %g", what, i, floats[i]));
    }
  }
  return absl::OkStatus();
}

bool KeptRaw(const Optimizer::SlotRun& run, int max_raw_run) {
  return run.kind == Optimizer::SlotRun::kBits || run.floats <= max_raw_run;
}

}  // namespace

absl::Status CheckCheckpointCodec(const TableConfig& config) {
  if (!CheckpointCodec_IsValid(config.checkpoint_codec())) {
    return absl::InvalidArgumentError(absl::StrFormat("table '%s': checkpoint_codec %d is no CheckpointCodec",
                                                      config.name(), config.checkpoint_codec()));
  }
  if (config.checkpoint_codec() == CHECKPOINT_Q8 && config.kind() != TableConfig::SPARSE) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "dense table '%s' is checkpointed exactly: checkpoint_codec CHECKPOINT_Q8 applies to sparse tables only",
        config.name()));
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointRowCodec> CheckpointRowCodec::Create(const TableConfig& config) {
  KESTREL_RETURN_IF_ERROR(CheckCheckpointCodec(config));
  if (config.dim() < 1 || config.dim() > RowValues::kMaxDim) {
    return absl::InvalidArgumentError(absl::StrFormat("table '%s': dim must be in [1, %d], got %d", config.name(),
                                                      RowValues::kMaxDim, config.dim()));
  }
  KESTREL_RETURN_IF_ERROR(RowValues::Check(config));
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = Optimizer::Create(config.optimizer(), config.dim());
  if (!optimizer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table '%s': %s", config.name(), optimizer.status().message()));
  }
  std::vector<Optimizer::SlotRun> runs = (*optimizer)->slot_runs();
  int floats = 0;
  for (const Optimizer::SlotRun& run : runs) floats += run.floats;
  if (floats != (*optimizer)->slot_floats()) {
    return absl::InternalError(absl::StrFormat("table '%s': the optimizer's slot runs hold %d floats, its slots %d",
                                               config.name(), floats, (*optimizer)->slot_floats()));
  }
  return CheckpointRowCodec(config, std::move(runs), config.has_capacity() ? BoundedPolicy::kMetaFloats : 0);
}

CheckpointRowCodec::CheckpointRowCodec(const TableConfig& config, std::vector<Optimizer::SlotRun> runs,
                                       int meta_floats)
    : codec_(config.checkpoint_codec()), values_(config), runs_(std::move(runs)), meta_floats_(meta_floats) {
  slot_floats_ = 0;
  size_t body = values_.dim() > kMaxRawRun ? QuantizedBytes(values_.dim()) : sizeof(float) * values_.words();
  for (const Optimizer::SlotRun& run : runs_) {
    slot_floats_ += run.floats;
    body += KeptRaw(run, kMaxRawRun) ? sizeof(float) * run.floats : QuantizedBytes(run.floats);
  }
  body += sizeof(float) * meta_floats_;
  stored_floats_ = values_.words() + slot_floats_ + meta_floats_;
  header_bytes_ = (1 + body) % sizeof(float) == 0 ? 2 : 1;
  q8_bytes_ = header_bytes_ + body;
}

void CheckpointRowCodec::Encode(absl::Span<const float> stored_row, std::string* out) const {
  out->clear();
  if (codec_ == CHECKPOINT_Q8 && stored_row.size() == static_cast<size_t>(stored_floats_)) {
    out->reserve(q8_bytes_);
    if (EncodeQ8(stored_row, out)) return;
    out->clear();
  }
  AppendRaw(stored_row.data(), static_cast<int>(stored_row.size()), out);
}

bool CheckpointRowCodec::EncodeQ8(absl::Span<const float> stored_row, std::string* out) const {
  out->push_back(kTag);
  if (header_bytes_ == 2) out->push_back('\0');
  const float* p = stored_row.data();
  const int dim = values_.dim();
  if (dim > kMaxRawRun) {
    float values[RowValues::kMaxDim];
    values_.Decode(p, values);
    if (!EncodeRun(RowCode::kAffine8, absl::MakeConstSpan(values, dim), out).ok()) return false;
  } else {
    AppendRaw(p, values_.words(), out);
  }
  p += values_.words();
  for (const Optimizer::SlotRun& run : runs_) {
    if (KeptRaw(run, kMaxRawRun)) {
      AppendRaw(p, run.floats, out);
    } else {
      const RowCode code = run.kind == Optimizer::SlotRun::kSigned ? RowCode::kAffine8 : RowCode::kLog8;
      if (!EncodeRun(code, absl::MakeConstSpan(p, run.floats), out).ok()) return false;
    }
    p += run.floats;
  }
  AppendRaw(p, meta_floats_, out);
  return true;
}

absl::Status CheckpointRowCodec::Decode(absl::string_view record, absl::Span<float> stored_row) const {
  if (stored_row.size() != static_cast<size_t>(stored_floats_)) {
    return absl::InvalidArgumentError(absl::StrFormat("a stored row of this table has %d words, not %d",
                                                      stored_floats_, stored_row.size()));
  }
  if (record.size() == raw_bytes()) {
    std::memcpy(stored_row.data(), record.data(), record.size());
    return absl::OkStatus();
  }
  if (record.size() == q8_bytes_) return DecodeQ8(record, stored_row);
  return absl::DataLossError(
      absl::StrFormat("a checkpoint row of %d bytes: this table's rows take %d (raw) or %d (Q8)", record.size(),
                      raw_bytes(), q8_bytes_));
}

absl::Status CheckpointRowCodec::Decode(absl::string_view record, std::vector<float>* stored_row) const {
  stored_row->resize(stored_floats_);
  return Decode(record, absl::MakeSpan(*stored_row));
}

absl::Status CheckpointRowCodec::DecodeQ8(absl::string_view record, absl::Span<float> stored_row) const {
  if (record[0] != kTag || (header_bytes_ == 2 && record[1] != '\0')) {
    return absl::DataLossError(absl::StrFormat("a Q8 row of %d bytes has a bad header (0x%02x)", record.size(),
                                               static_cast<unsigned char>(record[0])));
  }
  absl::string_view in = record.substr(header_bytes_);
  float* p = stored_row.data();
  const int dim = values_.dim();
  if (dim > kMaxRawRun) {
    float values[RowValues::kMaxDim];
    KESTREL_RETURN_IF_ERROR(ReadCoded(RowCode::kAffine8, &in, absl::MakeSpan(values, dim), "values"));
    if (values_.compact()) {
      // To nearest even (FLOAT16 clamped) whatever the storage's rounding, which then keeps these exact halves.
      values_.Round(values);
      values_.Encode(values, p, 0);
    } else {
      std::memcpy(p, values, sizeof(float) * dim);
    }
  } else {
    KESTREL_RETURN_IF_ERROR(ReadRaw(&in, p, values_.words(), "values"));
  }
  p += values_.words();
  for (const Optimizer::SlotRun& run : runs_) {
    if (KeptRaw(run, kMaxRawRun)) {
      KESTREL_RETURN_IF_ERROR(ReadRaw(&in, p, run.floats, "a slot run"));
    } else {
      const RowCode code = run.kind == Optimizer::SlotRun::kSigned ? RowCode::kAffine8 : RowCode::kLog8;
      KESTREL_RETURN_IF_ERROR(ReadCoded(code, &in, absl::MakeSpan(p, run.floats), "a slot run"));
    }
    p += run.floats;
  }
  KESTREL_RETURN_IF_ERROR(ReadRaw(&in, p, meta_floats_, "meta"));
  if (!in.empty()) {
    return absl::DataLossError(absl::StrFormat("a Q8 row has %d bytes past its codes", in.size()));
  }
  return absl::OkStatus();
}

}  // namespace kestrel
