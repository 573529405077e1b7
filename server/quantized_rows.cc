#include "server/quantized_rows.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_format.h"

namespace kestrel {
namespace {

void AppendFloat(float f, std::string* out) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

float ReadFloat(const char* p) {
  uint32_t bits = 0;
  for (int i = 0; i < 4; ++i) bits |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint8_t Level(double position, int top) {  // position in [0, top], rounded to the nearest level
  return static_cast<uint8_t>(std::clamp<long>(std::lround(position), 0, top));
}

}  // namespace

absl::Status EncodeRun(RowCode code, absl::Span<const float> run, std::string* out) {
  for (size_t i = 0; i < run.size(); ++i) {
    if (!std::isfinite(run[i]) || (code == RowCode::kLog8 && run[i] < 0)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "float %d of the run is %g: %s", i, run[i],
          code == RowCode::kLog8 ? "the log code takes non-negative finite floats" : "not finite"));
    }
  }
  std::string coded;
  coded.reserve(QuantizedBytes(run.size()));
  if (code == RowCode::kAffine8) {
    float lo = 0, hi = 0;
    if (!run.empty()) {
      const auto [mn, mx] = std::minmax_element(run.begin(), run.end());
      lo = *mn;
      hi = *mx;
    }
    const float step = (static_cast<double>(hi) - lo) / 255.0;  // finite: float32's whole range / 255 fits
    AppendFloat(lo, &coded);
    AppendFloat(step, &coded);
    for (float x : run) coded.push_back(static_cast<char>(step > 0 ? Level((x - double{lo}) / step, 255) : 0));
  } else {
    float lo = 0, hi = 0;
    bool any = false;
    for (float x : run) {
      if (x > 0) {
        const float l = std::log2(x);
        lo = any ? std::min(lo, l) : l;
        hi = any ? std::max(hi, l) : l;
        any = true;
      }
    }
    const float step = (static_cast<double>(hi) - lo) / 254.0;
    AppendFloat(lo, &coded);
    AppendFloat(step, &coded);
    for (float x : run) {
      if (x == 0) {
        coded.push_back(0);
      } else {
        coded.push_back(static_cast<char>(1 + (step > 0 ? Level((std::log2(double{x}) - lo) / step, 254) : 0)));
      }
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
  const float lo = ReadFloat(in->data());
  const float step = ReadFloat(in->data() + 4);
  if (!std::isfinite(lo) || !std::isfinite(step) || step < 0) {
    return absl::DataLossError(absl::StrFormat("a quantized run's header (%g, %g) is not a finite base and step", lo,
                                               step));
  }
  const auto* q = reinterpret_cast<const uint8_t*>(in->data() + 8);
  for (size_t i = 0; i < out.size(); ++i) {
    if (code == RowCode::kAffine8) {
      out[i] = static_cast<float>(double{lo} + double{step} * q[i]);
    } else {
      out[i] = q[i] == 0 ? 0.0f : static_cast<float>(std::exp2(double{lo} + double{step} * (q[i] - 1)));
    }
  }
  in->remove_prefix(QuantizedBytes(out.size()));
  return absl::OkStatus();
}

}  // namespace kestrel
