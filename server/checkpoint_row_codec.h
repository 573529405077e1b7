// CheckpointRowCodec: the bytes a checkpoint holds for one stored row of a table (TableConfig.checkpoint_codec), and
// back.
//
// A stored row is what Table keeps and copies (Table::stored_floats() 32-bit words): the value words (fp32, or
// bf16 / fp16 two to a word: RowValues), the optimizer's slot floats (Optimizer::slot_runs()), then for a bounded
// table its meta (last-push clock and push count, BoundedPolicy::kMetaFloats words). Two record formats:
//
//   Raw (CHECKPOINT_FP32, and any row Q8 cannot code): the row's words, little-endian, 4 * stored_floats bytes:
//     bitwise the row, and exactly what checkpoints held before codecs existed.
//   Q8 (CHECKPOINT_Q8): the byte 'Q', a zero byte when needed so that the record's length is not a multiple of 4,
//     then one code after another:
//       values            dim > 2: RowCode::kAffine8 of the dim values as floats (dim + 4 bytes);
//                         dim <= 2: the value words raw
//       each slot run     kSigned: kAffine8; kNonNegative: kLog8 (n + 4 bytes); kBits, or a run of n <= 2 floats
//                         (row-wise Adagrad's accumulator): raw (4n bytes), since the code would save at most 2
//                         bytes (none for n = 1) and lose the floats' precision
//       meta              raw (8 bytes)
//     (quantized_rows.h describes the codes, their fp16 run headers and their error: half the written step, about
//     1/510 of the run's range, for kAffine8; a relative 2^(step/2) - 1 for kLog8, zeros exact.) A row with a
//     value or slot that its code refuses (not finite; beyond fp16's +-65504 in a kAffine8 run; negative, or so
//     close to FLT_MAX that its level would decode past it, in a kNonNegative run) is written raw.
//
// A record's length says which it is: raw records are 4 * stored_floats bytes, Q8 records q8_bytes(), which is
// never a multiple of 4. So Decode reads both whatever the codec, and a table may change codec between (incremental)
// checkpoints. Decoded Q8 values are rounded back into the table's storage type (to nearest even), so the row is one
// the table could hold.
//
// Size: a dim-16 Adagrad row takes 1 + (16 + 4) + (16 + 4) = 41 bytes instead of 128 (3.1x smaller); dim-16 Adam 65
// instead of 196 (3.0x); dim-64 Adagrad 137 instead of 512 (3.7x).
//
// Endianness: the raw words are copied as the host holds them (little-endian, as ShardStore assumes).
// Immutable after Create(): thread-safe.
#ifndef KESTREL_SERVER_CHECKPOINT_ROW_CODEC_H_
#define KESTREL_SERVER_CHECKPOINT_ROW_CODEC_H_

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/table.pb.h"
#include "common/optimizer.h"
#include "server/row_values.h"

namespace kestrel {

// InvalidArgument naming the table unless config.checkpoint_codec() is a known CheckpointCodec, and CHECKPOINT_Q8
// is on a sparse table (a dense table's weights are checkpointed exactly). Part of what a table's config must
// satisfy (Table::CheckShape calls it).
[[nodiscard]] absl::Status CheckCheckpointCodec(const TableConfig& config);

class CheckpointRowCodec {
 public:
  // The codec of a table of `config`: InvalidArgument naming the table for a codec CheckCheckpointCodec refuses, a
  // dim outside [1, RowValues::kMaxDim], a storage RowValues::Check refuses or an invalid optimizer.
  [[nodiscard]] static absl::StatusOr<CheckpointRowCodec> Create(const TableConfig& config);

  CheckpointCodec codec() const { return codec_; }
  // 32-bit words of a stored row (Table::stored_floats()).
  int stored_floats() const { return stored_floats_; }
  // Bytes of a raw record.
  size_t raw_bytes() const { return sizeof(float) * static_cast<size_t>(stored_floats_); }
  // Bytes of a Q8 record of this table's rows (never a multiple of 4).
  size_t q8_bytes() const { return q8_bytes_; }
  // The longest record Encode writes.
  size_t max_encoded_bytes() const { return codec_ == CHECKPOINT_Q8 ? std::max(raw_bytes(), q8_bytes_) : raw_bytes(); }

  // Replaces *out with the record of `stored_row` (stored_floats() words): raw for CHECKPOINT_FP32, Q8 for
  // CHECKPOINT_Q8 unless the row cannot be coded. A row of another width (a caller's bug) is written raw, and
  // Decode refuses it.
  void Encode(absl::Span<const float> stored_row, std::string* out) const;
  // Whether a record is a Q8 one (else raw), from its length alone.
  static bool IsQ8(absl::string_view record) { return record.size() % sizeof(float) != 0; }

  // Writes the stored row of a record (raw or Q8, whatever codec()) to `stored_row` (stored_floats() words).
  // DataLoss, naming what is wrong, for a record of neither length, a Q8 record with a bad header, a run
  // header that is not finite, or a decoded value or slot that is not finite; `stored_row` is then unspecified.
  // Reads nothing past the record and allocates nothing, whatever the bytes.
  [[nodiscard]] absl::Status Decode(absl::string_view record, absl::Span<float> stored_row) const;
  // The same into a vector, resized to stored_floats() words.
  [[nodiscard]] absl::Status Decode(absl::string_view record, std::vector<float>* stored_row) const;

 private:
  CheckpointRowCodec(const TableConfig& config, std::vector<Optimizer::SlotRun> runs, int meta_floats);

  // The Q8 code of `stored_row` appended to *out; false (out then partly written) if a run cannot be coded.
  bool EncodeQ8(absl::Span<const float> stored_row, std::string* out) const;
  [[nodiscard]] absl::Status DecodeQ8(absl::string_view record, absl::Span<float> stored_row) const;

  // The 'Q' and, when the codes' bytes would make the length a multiple of 4, a zero byte.
  static constexpr char kTag = 'Q';
  // Runs of at most this many floats are kept raw in a Q8 record.
  static constexpr int kMaxRawRun = 2;

  CheckpointCodec codec_;
  RowValues values_;
  std::vector<Optimizer::SlotRun> runs_;
  int slot_floats_;
  int meta_floats_;
  int stored_floats_;
  size_t header_bytes_;  // 1 or 2
  size_t q8_bytes_;
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_CHECKPOINT_ROW_CODEC_H_
