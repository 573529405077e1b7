// Half-precision values on the wire: IEEE binary16 (fp16) and bfloat16 (bf16), converted from and to the fp32
// that tables store and update.
//
// Hand-written because no Debian-packaged library converts arrays of them (Eigen's half types are scalar and
// pull in Eigen; oneDNN's conversions are internal). Conversions round to nearest, ties to even, and are
// deterministic: the F16C instructions (used when the CPU has them) and the portable scalar code give the
// same bits for every input (half_test checks it), so BSP stays bitwise repeatable whatever the machine.
//
// Only finite values travel: encoding an infinity or NaN is InvalidArgument, a finite value that would round
// to infinity (fp16 beyond 65504, bf16 beyond FLT_MAX) is OutOfRange, and decoding a non-finite half (a
// hostile or corrupt peer) is InvalidArgument. Subnormals are kept on both sides (fp32 subnormals become
// bf16 subnormals, or fp16 zero; fp16 subnormals decode exactly).
//
// Gradients in fp16: they may be anything up to kMaxGradientMagnitude (1e15) and as small as fp32 allows,
// while fp16 holds |x| <= 65504 and loses precision below 2^-14. A push therefore carries a power-of-two scale
// (Float16ScaleExponent): the largest 2^e, e in [kMinScaleExponent, kMaxScaleExponent], with
// max|g| * 2^e <= 65504. By construction nothing overflows (no gradient is ever lost to infinity, which loss
// scaling with a fixed or adaptive-by-retry scale could do), the largest gradient uses fp16's full precision,
// and multiplying by a power of two is exact in fp32. bf16 has fp32's range and needs no scale.
//
// Thread-safe (pure functions).
#ifndef KESTREL_COMMON_HALF_H_
#define KESTREL_COMMON_HALF_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "proto/table.pb.h"

namespace kestrel {

inline constexpr int kMinScaleExponent = -64;
inline constexpr int kMaxScaleExponent = 64;
inline constexpr float kFloat16Max = 65504.0f;

// The type a sparse table's pulls travel in: its storage type when the servers store the values in two bytes
// (TableConfig.storage: the stored values exactly, in half the bytes, whatever wire_type says), else its
// wire_type. Pushes (gradients) always travel as wire_type.
inline ValueType PullWireType(const TableConfig& config) {
  return config.storage().type() != VALUE_TYPE_FLOAT32 ? config.storage().type() : config.wire_type();
}

// Bytes one value of `type` takes on the wire: 4 (FLOAT32) or 2; 0 for an unknown type.
size_t BytesPerValue(ValueType type);
// InvalidArgument naming `what` unless `type` is a known ValueType.
[[nodiscard]] absl::Status CheckValueType(ValueType type, const char* what);

// Writes n values of `type` to `out` (n * BytesPerValue(type) bytes, 2-byte aligned for the half types): in[i] * 2^scale_exponent,
// rounded to nearest even. scale_exponent must be in [kMinScaleExponent, kMaxScaleExponent] (0 unless fp16).
[[nodiscard]] absl::Status EncodeValues(ValueType type, const float* in, size_t n, int scale_exponent, void* out);
// Reads n values of `type` from `in` (2-byte aligned for the half types) into out[i] = value * 2^-scale_exponent.
[[nodiscard]] absl::Status DecodeValues(ValueType type, const void* in, size_t n, int scale_exponent, float* out);

// The largest |x[i]| as its bits (|x| orders as its bits; >= 0x7f800000: some value is infinite or NaN), 0
// for none. AVX2 where the CPU has it.
uint32_t MaxMagnitudeBits(const float* x, size_t n);

// The scale exponent for sending `n` gradients as fp16 (see above); kMaxScaleExponent when all are zero.
int Float16ScaleExponent(const float* g, size_t n);

// Scalar conversions (round to nearest even; infinities and NaNs map to infinities and quiet NaNs, as F16C).
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
uint16_t FloatToBfloat16(float f);
float Bfloat16ToFloat(uint16_t h);

namespace half_internal {
// Whether the F16C path is used on this CPU, and the scalar path forced (tests compare the two).
bool HasF16c();
void EncodeFloat16Scalar(const float* in, size_t n, uint16_t* out);
void DecodeFloat16Scalar(const uint16_t* in, size_t n, float* out);
void EncodeFloat16F16c(const float* in, size_t n, uint16_t* out);
void DecodeFloat16F16c(const uint16_t* in, size_t n, float* out);
bool HasAvx2();
void EncodeBfloat16Avx2(const float* in, size_t n, uint16_t* out);  // finite inputs only
void DecodeBfloat16Avx2(const uint16_t* in, size_t n, float* out);
uint16_t MaxAbsHalf(const uint16_t* h, size_t n);   // the largest half with its sign bit cleared
}  // namespace half_internal

}  // namespace kestrel

#endif  // KESTREL_COMMON_HALF_H_
