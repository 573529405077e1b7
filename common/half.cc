#include "common/half.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/base/casts.h"
#include "absl/strings/str_format.h"

namespace kestrel {
namespace {

uint32_t Bits(float f) { return absl::bit_cast<uint32_t>(f); }
float FromBits(uint32_t u) { return absl::bit_cast<float>(u); }

// Non-finite encodings: every exponent bit set.
bool Float16NonFinite(uint16_t h) { return (h & 0x7c00) == 0x7c00; }
bool Bfloat16NonFinite(uint16_t h) { return (h & 0x7f80) == 0x7f80; }

[[nodiscard]] absl::Status CheckScale(ValueType type, int scale_exponent) {
  if (scale_exponent < kMinScaleExponent || scale_exponent > kMaxScaleExponent ||
      (scale_exponent != 0 && type != VALUE_TYPE_FLOAT16)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "scale exponent %d: only fp16 values are scaled, by 2^e with e in [%d, %d]", scale_exponent,
        kMinScaleExponent, kMaxScaleExponent));
  }
  return absl::OkStatus();
}

// After an encode that produced a non-finite half: was the input non-finite (the caller's bug) or too large?
[[nodiscard]] absl::Status EncodeError(ValueType type, const float* in, size_t n, size_t at, int scale_exponent) {
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(in[i])) {
      return absl::InvalidArgumentError(absl::StrFormat("value %d is %f: only finite values travel", i, in[i]));
    }
  }
  return absl::OutOfRangeError(absl::StrFormat(
      "value %d (%g, scaled by 2^%d) is beyond %s's range", at, in[at], scale_exponent,
      type == VALUE_TYPE_FLOAT16 ? "fp16 (65504)" : "bf16"));
}

}  // namespace

namespace half_internal {

bool HasF16c() {
  // F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c". AVX (its OS
  // support included) from the builtin.
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0 && __builtin_cpu_supports("avx");
  }();
  return has;
}

void EncodeFloat16Scalar(const float* in, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

void DecodeFloat16Scalar(const uint16_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

__attribute__((target("avx,f16c"))) void EncodeFloat16F16c(const float* in, size_t n, uint16_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

__attribute__((target("avx,f16c"))) void DecodeFloat16F16c(const uint16_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
  for (; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

// Round to nearest even on the low 16 bits, 8 lanes at a time; inputs are finite (checked by the caller).
__attribute__((target("avx2"))) void EncodeBfloat16Avx2(const float* in, size_t n, uint16_t* out) {
  const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i x = _mm256_castps_si256(_mm256_loadu_ps(in + i));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
    const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(bias, lsb)), 16);
    // Pack the 8 low halves (per 128-bit lane), then gather the two lanes' results into the low 128 bits.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(packed));
  }
  for (; i < n; ++i) out[i] = FloatToBfloat16(in[i]);
}

__attribute__((target("avx2"))) void DecodeBfloat16Avx2(const uint16_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_slli_epi32(h, 16));
  }
  for (; i < n; ++i) out[i] = Bfloat16ToFloat(in[i]);
}

// The largest |x| of `x` as bits (an infinity or NaN: >= 0x7f800000), and the largest half with its sign
// cleared (>= the type's exponent mask: infinite or NaN). AVX2 when the CPU has it.
__attribute__((target("avx2"))) uint32_t MaxAbsBitsAvx2(const float* x, size_t n) {
  const __m256i clear = _mm256_set1_epi32(0x7fffffff);
  __m256i acc = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    acc = _mm256_max_epu32(acc, _mm256_and_si256(_mm256_castps_si256(_mm256_loadu_ps(x + i)), clear));
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
  uint32_t max = 0;
  for (uint32_t v : lanes) max = std::max(max, v);
  for (; i < n; ++i) max = std::max(max, Bits(x[i]) & 0x7fffffffu);
  return max;
}

__attribute__((target("avx2"))) uint16_t MaxAbsHalfAvx2(const uint16_t* h, size_t n) {
  const __m256i clear = _mm256_set1_epi16(0x7fff);
  __m256i acc = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc = _mm256_max_epu16(acc, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i)), clear));
  }
  alignas(32) uint16_t lanes[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
  uint16_t max = 0;
  for (uint16_t v : lanes) max = std::max(max, v);
  for (; i < n; ++i) max = std::max<uint16_t>(max, h[i] & 0x7fff);
  return max;
}

uint16_t MaxAbsHalf(const uint16_t* h, size_t n) {
  if (HasAvx2()) return MaxAbsHalfAvx2(h, n);
  uint16_t max = 0;
  for (size_t i = 0; i < n; ++i) max = std::max<uint16_t>(max, h[i] & 0x7fff);
  return max;
}

}  // namespace half_internal

uint32_t MaxMagnitudeBits(const float* x, size_t n) {
  if (half_internal::HasAvx2()) return half_internal::MaxAbsBitsAvx2(x, n);
  uint32_t max = 0;
  for (size_t i = 0; i < n; ++i) max = std::max(max, Bits(x[i]) & 0x7fffffffu);
  return max;
}

uint16_t FloatToHalf(float f) {
  uint32_t x = Bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  x &= 0x7fffffff;
  if (x > 0x7f800000) return sign | 0x7e00 | static_cast<uint16_t>((x >> 13) & 0x3ff);  // NaN, made quiet
  if (x >= 0x477ff000) return sign | 0x7c00;  // >= 65520 (or infinite): rounds to infinity
  if (x >= 0x38800000) {                      // >= 2^-14: a normal half
    x += 0xfff + ((x >> 13) & 1);             // round to nearest, ties to even, on the 13 dropped bits
    return sign | static_cast<uint16_t>((x - 0x38000000) >> 13);  // rebias the exponent: 127 - 15
  }
  // A subnormal half (or zero): its integer significand is |f| * 2^24 rounded to even (exact scaling; the
  // default rounding mode is to nearest even). 1024 rounds up into the smallest normal, encoded the same.
  return sign | static_cast<uint16_t>(std::nearbyint(FromBits(x) * 16777216.0f));
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in fp32
    return FromBits(Bits(static_cast<float>(mantissa) * (1.0f / 16777216.0f)) | sign);
  }
  if (exponent == 31) return FromBits(sign | 0x7f800000 | (mantissa << 13) | (mantissa != 0 ? 0x400000 : 0));
  return FromBits(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t FloatToBfloat16(float f) {
  uint32_t x = Bits(f);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // NaN, made quiet
  x += 0x7fff + ((x >> 16) & 1);  // round to nearest, ties to even (may carry into infinity)
  return static_cast<uint16_t>(x >> 16);
}

float Bfloat16ToFloat(uint16_t h) { return FromBits(static_cast<uint32_t>(h) << 16); }

size_t BytesPerValue(ValueType type) {
  switch (type) {
    case VALUE_TYPE_FLOAT32:
      return 4;
    case VALUE_TYPE_FLOAT16:
    case VALUE_TYPE_BFLOAT16:
      return 2;
    default:
      return 0;
  }
}

absl::Status CheckValueType(ValueType type, const char* what) {
  if (BytesPerValue(type) != 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: value type %d is none of VALUE_TYPE_FLOAT32, VALUE_TYPE_FLOAT16, VALUE_TYPE_BFLOAT16", what,
      static_cast<int>(type)));
}

absl::Status EncodeValues(ValueType type, const float* in, size_t n, int scale_exponent, void* out) {
  if (absl::Status s = CheckValueType(type, "encode"); !s.ok()) return s;
  if (absl::Status s = CheckScale(type, scale_exponent); !s.ok()) return s;
  if (type == VALUE_TYPE_FLOAT32) {
    if (MaxMagnitudeBits(in, n) >= 0x7f800000u) return EncodeError(type, in, n, 0, 0);
    if (n > 0) std::memcpy(out, in, n * sizeof(float));
    return absl::OkStatus();
  }
  // Blocks, each converted straight into `out` and checked while in cache; scaling (exact) goes through a
  // small buffer. The encoded block is checked for non-finite halves: an infinite or NaN input, or a finite
  // one that rounded to infinity.
  constexpr size_t kBlock = 2048;
  alignas(32) float scaled[kBlock];
  const float scale = std::ldexp(1.0f, scale_exponent);
  const bool f16c = half_internal::HasF16c(), avx2 = half_internal::HasAvx2();
  uint16_t* dst_all = static_cast<uint16_t*>(out);  // 2-byte aligned: PullResponseWriter and vectors are
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t m = std::min(kBlock, n - start);
    const float* src = in + start;
    uint16_t* dst = dst_all + start;
    if (scale_exponent != 0) {
      for (size_t i = 0; i < m; ++i) scaled[i] = src[i] * scale;
      src = scaled;
    }
    bool bad;
    if (type == VALUE_TYPE_FLOAT16) {
      if (f16c) {
        half_internal::EncodeFloat16F16c(src, m, dst);
      } else {
        half_internal::EncodeFloat16Scalar(src, m, dst);
      }
      bad = half_internal::MaxAbsHalf(dst, m) >= 0x7c00;
    } else {
      // Inputs must be finite before the integer rounding (a NaN could round to a finite-looking pattern).
      bad = MaxMagnitudeBits(src, m) >= 0x7f800000u;
      if (avx2) {
        half_internal::EncodeBfloat16Avx2(src, m, dst);
      } else {
        for (size_t i = 0; i < m; ++i) dst[i] = FloatToBfloat16(src[i]);
      }
      bad = bad || half_internal::MaxAbsHalf(dst, m) >= 0x7f80;
    }
    if (bad) {
      size_t at = 0;
      while (at + 1 < m && std::isfinite(src[at]) &&
             !(type == VALUE_TYPE_FLOAT16 ? Float16NonFinite(dst[at]) : Bfloat16NonFinite(dst[at]))) {
        ++at;
      }
      return EncodeError(type, in, n, start + at, scale_exponent);
    }
  }
  return absl::OkStatus();
}

absl::Status DecodeValues(ValueType type, const void* in, size_t n, int scale_exponent, float* out) {
  if (absl::Status s = CheckValueType(type, "decode"); !s.ok()) return s;
  if (absl::Status s = CheckScale(type, scale_exponent); !s.ok()) return s;
  if (type == VALUE_TYPE_FLOAT32) {
    if (n > 0) std::memcpy(out, in, n * sizeof(float));  // null pointers of an empty request: no memcpy
    if (MaxMagnitudeBits(out, n) >= 0x7f800000u) {
      return absl::InvalidArgumentError("a float32 value is infinite or NaN");
    }
    return absl::OkStatus();
  }
  const uint16_t* src_all = static_cast<const uint16_t*>(in);
  const uint16_t mask = type == VALUE_TYPE_FLOAT16 ? 0x7c00 : 0x7f80;
  const float unscale = std::ldexp(1.0f, -scale_exponent);
  const bool f16c = half_internal::HasF16c(), avx2 = half_internal::HasAvx2();
  constexpr size_t kBlock = 2048;
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t m = std::min(kBlock, n - start);
    const uint16_t* src = src_all + start;
    if (half_internal::MaxAbsHalf(src, m) >= mask) {
      return absl::InvalidArgumentError(
          absl::StrFormat("a %s value in [%d, %d) is infinite or NaN", ValueType_Name(type), start, start + m));
    }
    float* dst = out + start;
    if (type == VALUE_TYPE_FLOAT16) {
      if (f16c) {
        half_internal::DecodeFloat16F16c(src, m, dst);
      } else {
        half_internal::DecodeFloat16Scalar(src, m, dst);
      }
    } else if (avx2) {
      half_internal::DecodeBfloat16Avx2(src, m, dst);
    } else {
      for (size_t i = 0; i < m; ++i) dst[i] = Bfloat16ToFloat(src[i]);
    }
    if (scale_exponent != 0) {
      for (size_t i = 0; i < m; ++i) dst[i] *= unscale;
    }
  }
  return absl::OkStatus();
}

int Float16ScaleExponent(const float* g, size_t n) {
  const float max_abs = FromBits(MaxMagnitudeBits(g, n));  // |x| orders as its bits
  if (!(max_abs > 0) || !std::isfinite(max_abs)) return max_abs > 0 ? kMinScaleExponent : kMaxScaleExponent;
  // The largest e with max_abs * 2^e <= 65504: start from the exponents and correct by one step.
  // In double: for tiny magnitudes the quotient overflows float (and casting infinity to int is undefined).
  int e = static_cast<int>(std::clamp(std::floor(std::log2(static_cast<double>(kFloat16Max) / max_abs)),
                                      static_cast<double>(kMinScaleExponent), static_cast<double>(kMaxScaleExponent)));
  while (e > kMinScaleExponent && std::ldexp(max_abs, e) > kFloat16Max) --e;
  while (e < kMaxScaleExponent && std::ldexp(max_abs, e + 1) <= kFloat16Max) ++e;
  return e;
}

}  // namespace kestrel
