// 8-bit row-wise quantization of stored rows, for compact (lossy, opt-in) checkpoints.
//
// Two codes, each for one run of floats of a row (a row's embedding values, or one optimizer slot's floats). A run
// is a 4-byte header, lo and step as IEEE binary16 (fp16, common/half.h), each little-endian, then one byte q per
// float. The header is chosen conservatively (lo rounded down, step up, to a half) and the floats are quantized
// against the header's decoded values, so the bounds below hold for the header actually written:
//
//   Affine8 (finite floats in [-65504, 65504], e.g. embedding values, Adam's first moment):
//     x ~= lo + q * step (in exact arithmetic, then rounded once to float). lo is the largest half <= the run's
//     minimum, step the smallest half with lo + 255 * step >= the run's maximum. Every float decodes within
//     step / 2 of itself, plus the float rounding of the decoded value (2^-24 of it), where
//       step <= ((max - min) + 2^-10 |min| + 2^-24) / 255 * (1 + 2^-10) + 2^-24:
//     1/510 of the run's range, up to fp16's rounding of the header. step is 0 only when every float equals lo: a
//     constant run of halves decodes exactly, one of other floats within about 2^-19 of their magnitude (+ 2^-25).
//   Log8 (non-negative finite floats, e.g. Adagrad's accumulators, Adam's second moment, which span decades):
//     q = 0 is exactly 0, else x ~= 2^(lo + (q - 1) * step): lo is the largest half <= log2 of the smallest positive
//     float, step the smallest half with lo + 254 * step >= log2 of the largest (the same bound as Affine8's in the
//     log2 domain, with 254 levels). Relative error <= 2^(step / 2) - 1, plus float rounding (2^-24).
//
// So n floats take n + 4 bytes instead of 4n (dim 16: 20 bytes against 64). Encoding refuses (InvalidArgument) a
// run holding a NaN or infinity, (Affine8) a float beyond fp16's +-65504, or (Log8) a negative float or a largest
// float whose level would decode past FLT_MAX (within 2^(step / 2) of it): the caller keeps such a row in float32.
// Decoding checks sizes and refuses (DataLoss) a truncated run or a header that is not finite or whose step is
// negative (its sign bit set). A finite header always decodes Affine8 to finite floats (at most 65504 * 256);
// Log8's lo may be as large as 65504, so a corrupt header may decode to infinities (the caller checks).
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

// Bytes one run of `n` floats takes in either code: the 4-byte header and a byte a float.
inline size_t QuantizedBytes(size_t n) { return n + 4; }

// Appends the code of `run` to `out`. On error `out` is unchanged.
[[nodiscard]] absl::Status EncodeRun(RowCode code, absl::Span<const float> run, std::string* out);

// Decodes one run of out.size() floats from the front of `in` and advances `in` past it.
[[nodiscard]] absl::Status DecodeRun(RowCode code, absl::string_view* in, absl::Span<float> out);

}  // namespace kestrel

#endif  // KESTREL_SERVER_QUANTIZED_ROWS_H_
