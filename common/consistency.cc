#include "common/consistency.h"

#include "absl/strings/str_cat.h"

namespace kestrel {

absl::StatusOr<ConsistencyPolicy> ConsistencyPolicy::FromProto(Consistency mode, int staleness) {
  switch (mode) {
    case CONSISTENCY_BSP:
      return Bsp();
    case CONSISTENCY_SSP:
      if (staleness < 0) {
        return absl::InvalidArgumentError(absl::StrCat("SSP staleness must be >= 0, got ", staleness));
      }
      return Ssp(staleness);
    case CONSISTENCY_ASP:
      return Asp();
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown consistency mode ", static_cast<int>(mode)));
}

absl::StatusOr<ConsistencyPolicy> ConsistencyPolicy::Parse(absl::string_view name, int staleness) {
  for (Consistency mode : {CONSISTENCY_BSP, CONSISTENCY_SSP, CONSISTENCY_ASP}) {
    if (name == ConsistencyPolicy{mode, 0}.name()) return FromProto(mode, staleness);
  }
  return absl::InvalidArgumentError(absl::StrCat("consistency must be bsp, ssp or asp, got '", name, "'"));
}

absl::string_view ConsistencyPolicy::name() const {
  switch (mode) {
    case CONSISTENCY_BSP:
      return "bsp";
    case CONSISTENCY_SSP:
      return "ssp";
    case CONSISTENCY_ASP:
      return "asp";
    default:
      break;
  }
  return "unknown";
}

std::string ConsistencyPolicy::ToString() const {
  if (mode == CONSISTENCY_SSP) return absl::StrCat(name(), "(", staleness, ")");
  return std::string(name());
}

}  // namespace kestrel
