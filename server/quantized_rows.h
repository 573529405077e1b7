// 8-bit row-wise quantization of stored rows, for compact (lossy, opt-in) checkpoints.
//
// Two codes, each for one run of floats of a row (a row's embedding values, or one optimizer slot's floats):
//
//   Affine8 (any finite floats, e.g. embedding values, Adam's first moment):
//     lo: float32 little-endian, step: float32 little-endian, then one byte q per float;
//     x ~= lo + q * step, with lo the run's minimum and step = (max - lo) / 255. Error <= step / 2 (plus float
//     rounding): 1/510 of the run's range. A run whose floats are all equal decodes exactly (step 0).
//   Log8 (non-negative finite floats, e.g. Adagrad's accumulators, Adam's second moment, which span decades):
//     lo: float32, step: float32, then one byte q per float; q = 0 is exactly 0, else
//     x ~= 2^(lo + (q - 1) * step), lo = log2 of the smallest positive float and step = (log2 max - lo) / 254.
//     Relative error <= 2^(step / 2) - 1.
//
// So n floats take n + 8 bytes instead of 4n (dim 16: 24 bytes against 64). Encoding refuses (InvalidArgument) a
// run holding a NaN or infinity, or (Log8) a negative float: the caller keeps such a row in float32. Decoding
// checks sizes and refuses (DataLoss) a truncated run or a header that is not finite.
//
// Hand-written: the layout is Kestrel's checkpoint format; FBGEMM's fused 8-bit row-wise quantization (the same
// affine idea) is not packaged for Debian, and no packaged library quantizes log-domain accumulators.
// Thread-safe (pure functions).
#ifndef KESTREL_SERVER_QUANTIZED_ROWS_H_
#define KESTREL_SERVER_QUANTIZED_ROWS_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace kestrel {

enum class RowCode { kAffine8, kLog8 };

// Bytes one run of `n` floats takes in either code.
inline size_t QuantizedBytes(size_t n) { return n + 8; }

// Appends the code of `run` to `out`. On error `out` is unchanged.
absl::Status EncodeRun(RowCode code, absl::Span<const float> run, std::string* out);

// Decodes one run of out.size() floats from the front of `in` and advances `in` past it.
absl::Status DecodeRun(RowCode code, absl::string_view* in, absl::Span<float> out);

}  // namespace kestrel

#endif  // KESTREL_SERVER_QUANTIZED_ROWS_H_
