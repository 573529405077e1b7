// RowValues: how a sparse table stores each row's `dim` embedding values (TableConfig.storage): fp32, one per
// 32-bit word of the row, or bf16 / fp16, two per word (the last word's upper half zero for an odd dim).
//
// Compact storage halves the values' bytes; it never changes the arithmetic's precision. A push decodes the
// stored values to fp32, the optimizer updates them (and its fp32 state) in fp32, and the result is rounded
// once: to nearest even, or stochastically (ValueStorage.stochastic_rounding) with random bits that are a pure
// function of (table seed, key, clock, position), so a BSP run and a replica applying the same push agree bit
// for bit. FLOAT16 clamps to +-65504 before rounding (a value beyond it would be infinity). A fresh row holds
// its initial values rounded the same way, and so does a pull of an absent key, so reading a key before and
// after its row exists gives the same values.
//
// The conversions are common/half.h's scalar ones (the ones the wire uses; round to nearest even), except bf16
// decoding, a 16-bit shift written here so that the compiler vectorizes it in the pull loop.
//
// Immutable after construction: thread-safe.
#ifndef KESTREL_SERVER_ROW_VALUES_H_
#define KESTREL_SERVER_ROW_VALUES_H_

#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "proto/table.pb.h"

namespace kestrel {

class RowValues {
 public:
  // The widest row (Table::kMaxDim).
  static constexpr int kMaxDim = 4096;

  // InvalidArgument naming the table unless its storage is a known ValueType, compact only on a sparse table,
  // and stochastic rounding only with a compact type.
  [[nodiscard]] static absl::Status Check(const TableConfig& config);
  // 32-bit words a row's values take: dim, or ceil(dim / 2) for the half types.
  static int WordsFor(const TableConfig& config);

  // For a config that passed Check().
  explicit RowValues(const TableConfig& config);

  int dim() const { return dim_; }
  int words() const { return words_; }
  ValueType type() const { return type_; }
  bool compact() const { return type_ != VALUE_TYPE_FLOAT32; }

  // Writes the stored values `stored` (words() words) to `out` as dim floats.
  void Decode(const float* stored, float* out) const {
    if (type_ == VALUE_TYPE_FLOAT32) {
      std::memcpy(out, stored, sizeof(float) * dim_);
    } else if (type_ == VALUE_TYPE_BFLOAT16) {
      const char* h = reinterpret_cast<const char*>(stored);
      for (int i = 0; i < dim_; ++i) {
        uint16_t half;
        std::memcpy(&half, h + 2 * i, sizeof(half));
        const uint32_t bits = static_cast<uint32_t>(half) << 16;
        std::memcpy(out + i, &bits, sizeof(bits));
      }
    } else {
      DecodeFloat16(stored, out);
    }
  }
  // Stores dim floats `in` as the row's values (words() words, any padding zero): rounded to nearest even, or
  // stochastically from `noise` (a per-row hash; see the file comment) when the config asks for it.
  void Encode(const float* in, float* stored, uint64_t noise) const;
  // Rounds dim floats in place to what the storage holds, to nearest even: a fresh row's initial values.
  void Round(float* values) const;
  // The random bits for one row's update: a hash of the table seed, key and clock.
  uint64_t Noise(uint64_t key, int64_t clock) const;

 private:
  void DecodeFloat16(const float* stored, float* out) const;
  // Encode to nearest even (the padding half, if any, left as it is).
  void EncodeNearest(const float* in, float* stored) const;

  int dim_;
  int words_;
  ValueType type_;
  bool stochastic_;
  uint64_t seed_;
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_ROW_VALUES_H_
