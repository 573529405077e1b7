#include "server/quantized_rows.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_format.h"
#include "common/half.h"

namespace kestrel {
namespace {

constexpr size_t kHeaderBytes = 4;
constexpr int kAffineTop = 255;  // Affine8's top level
constexpr int kLogTop = 254;     // Log8's top level (q - 1; q = 0 is zero)

void AppendHalf(uint16_t h, std::string* out) {
  out->push_back(static_cast<char>(h & 0xff));
  out->push_back(static_cast<char>(h >> 8));
}

uint16_t ReadHalf(const char* p) {
  return static_cast<uint16_t>(static_cast<uint8_t>(p[0]) | static_cast<uint16_t>(static_cast<uint8_t>(p[1])) << 8);
}

// Finite halves as ordered integers ("ranks"): -0x7bff (-65504) ... -1 (-2^-24), 0 (both zeros), 1 ... 0x7bff.
constexpr int kMaxRank = 0x7bff;

uint16_t HalfOfRank(int rank) {
  return rank >= 0 ? static_cast<uint16_t>(rank) : static_cast<uint16_t>(0x8000 | -rank);
}

double RankValue(int rank) { return HalfToFloat(HalfOfRank(rank)); }  // exact

// The rank of the largest finite half <= v (`down`), or of the smallest >= v; false if there is none.
bool RoundToHalf(double v, bool down, int* rank) {
  // Start at fp16's nearest (v clamped first: a double beyond float's range must not be converted), at most a step
  // or two from the answer, and walk.
  const uint16_t nearest = FloatToHalf(static_cast<float>(std::clamp(v, -1e6, 1e6)));
  int r = std::clamp((nearest & 0x8000) ? -static_cast<int>(nearest & 0x7fff) : static_cast<int>(nearest),
                     -kMaxRank, kMaxRank);
  if (down) {
    while (r > -kMaxRank && RankValue(r) > v) --r;
    while (r < kMaxRank && RankValue(r + 1) <= v) ++r;
    if (RankValue(r) > v) return false;
  } else {
    while (r < kMaxRank && RankValue(r) < v) ++r;
    while (r > -kMaxRank && RankValue(r - 1) >= v) --r;
    if (RankValue(r) < v) return false;
  }
  *rank = r;
  return true;
}

struct Header {
  uint16_t lo = 0, step = 0;  // the halves written
  double lo_value = 0, step_value = 0;
};

// The header of a run whose (log2-domain, for Log8) floats lie in [low, high]: lo the largest half <= low, step the
// smallest half with lo + top * step >= high (0 only if high == lo). lo + top * step is exact in double (two
// halves' significands, 11 and 11 + 8 bits, between 2^-24 and 2^25), so the check is too.
[[nodiscard]] absl::Status ChooseHeader(double low, double high, int top, Header* header) {
  int lo_rank, step_rank = 0;
  if (!RoundToHalf(low, /*down=*/true, &lo_rank)) {
    return absl::InvalidArgumentError(absl::StrFormat("the run's base %g is below fp16's range", low));
  }
  const double lo = RankValue(lo_rank);
  if (high > lo) {
    if (!RoundToHalf((high - lo) / top, /*down=*/false, &step_rank)) step_rank = kMaxRank + 1;
    while (step_rank <= kMaxRank && lo + top * RankValue(step_rank) < high) ++step_rank;
    if (step_rank > kMaxRank) {
      return absl::InvalidArgumentError(
          absl::StrFormat("the run's range [%g, %g] needs a step beyond fp16's range", low, high));
    }
  }
  header->lo = HalfOfRank(lo_rank);
  header->step = HalfOfRank(step_rank);
  header->lo_value = lo;
  header->step_value = RankValue(step_rank);
  return absl::OkStatus();
}

// What level q of a run with header (lo, step) decodes to: in Affine8 exact in double (two halves, as above),
// then rounded once to float.
float Decoded(RowCode code, double lo, double step, uint8_t q) {
  if (code == RowCode::kAffine8) return static_cast<float>(lo + step * q);
  return q == 0 ? 0.0f : static_cast<float>(std::exp2(lo + step * (q - 1)));
}

uint8_t Level(double position, int top) {  // position in [0, top], rounded to the nearest level
  return static_cast<uint8_t>(std::clamp<long>(std::lround(position), 0, top));
}

}  // namespace

absl::Status EncodeRun(RowCode code, absl::Span<const float> run, std::string* out) {
  for (size_t i = 0; i < run.size(); ++i) {
    if (!std::isfinite(run[i]) || (code == RowCode::kLog8 && run[i] < 0) ||
        (code == RowCode::kAffine8 && std::fabs(run[i]) > kFloat16Max)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "float %d of the run is %g: %s", i, run[i],
          code == RowCode::kLog8 ? "the log code takes non-negative finite floats"
                                 : "the affine code takes finite floats in fp16's range [-65504, 65504]"));
    }
  }
  std::string coded;
  coded.reserve(QuantizedBytes(run.size()));
  Header h;
  if (code == RowCode::kAffine8) {
    if (!run.empty()) {
      const auto [mn, mx] = std::minmax_element(run.begin(), run.end());
      if (absl::Status s = ChooseHeader(*mn, *mx, kAffineTop, &h); !s.ok()) return s;
    }
    AppendHalf(h.lo, &coded);
    AppendHalf(h.step, &coded);
    for (float x : run) {
      coded.push_back(static_cast<char>(h.step_value > 0 ? Level((x - h.lo_value) / h.step_value, kAffineTop) : 0));
    }
  } else {
    double low = 0, high = 0;
    bool any = false;
    for (float x : run) {
      if (x > 0) {
        const double l = std::log2(double{x});  // in [-149, 128)
        low = any ? std::min(low, l) : l;
        high = any ? std::max(high, l) : l;
        any = true;
      }
    }
    if (absl::Status s = ChooseHeader(low, high, kLogTop, &h); !s.ok()) return s;
    AppendHalf(h.lo, &coded);
    AppendHalf(h.step, &coded);
    uint8_t top = 0;
    for (float x : run) {
      if (x == 0) {
        coded.push_back(0);
      } else {
        const double position = h.step_value > 0 ? (std::log2(double{x}) - h.lo_value) / h.step_value : 0;
        const uint8_t q = 1 + Level(position, kLogTop);
        top = std::max(top, q);
        coded.push_back(static_cast<char>(q));
      }
    }
    // The largest float's level may lie up to step / 2 above it: past float's range for one near FLT_MAX.
    if (!std::isfinite(Decoded(code, h.lo_value, h.step_value, top))) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the run's largest float %g would decode beyond float's range", std::exp2(high)));
    }
  }
  out->append(coded);
  return absl::OkStatus();
}

absl::Status DecodeRun(RowCode code, absl::string_view* in, absl::Span<float> out) {
  if (in->size() < QuantizedBytes(out.size())) {
    return absl::DataLossError(absl::StrFormat("a quantized run of %d floats needs %d bytes, %d are left",
                                               out.size(), QuantizedBytes(out.size()), in->size()));
  }
  const uint16_t lo_bits = ReadHalf(in->data());
  const uint16_t step_bits = ReadHalf(in->data() + 2);
  const float lo = HalfToFloat(lo_bits);
  const float step = HalfToFloat(step_bits);
  if (!std::isfinite(lo) || !std::isfinite(step) || (step_bits & 0x8000) != 0) {
    return absl::DataLossError(absl::StrFormat(
        "a quantized run's header (fp16 0x%04x, 0x%04x: %g, %g) is not a finite base and a non-negative step",
        lo_bits, step_bits, lo, step));
  }
  const auto* q = reinterpret_cast<const uint8_t*>(in->data() + kHeaderBytes);
  for (size_t i = 0; i < out.size(); ++i) out[i] = Decoded(code, lo, step, q[i]);
  in->remove_prefix(QuantizedBytes(out.size()));
  return absl::OkStatus();
}

}  // namespace kestrel
