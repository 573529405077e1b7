// ConsistencyPolicy: a job's consistency mode (proto/consistency.proto) and SSP bound, and the one place that
// decides what the mode means: when the scheduler lets an iteration start, and how a worker's client and a
// server's BSP aggregation behave under it. Every process reads the mode from here, never from a string.
#ifndef KESTREL_COMMON_CONSISTENCY_H_
#define KESTREL_COMMON_CONSISTENCY_H_

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/consistency.pb.h"

namespace kestrel {

struct ConsistencyPolicy {
  // Default: BSP.
  Consistency mode = CONSISTENCY_BSP;
  // SSP only: how many iterations a worker may run ahead of the slowest one (>= 0). Default: 0.
  int staleness = 0;

  static ConsistencyPolicy Bsp() { return {CONSISTENCY_BSP, 0}; }
  static ConsistencyPolicy Ssp(int s) { return {CONSISTENCY_SSP, s}; }
  static ConsistencyPolicy Asp() { return {CONSISTENCY_ASP, 0}; }

  // The policy named `name` ("bsp", "ssp" or "asp", as the scheduler's --consistency flag takes it) with SSP's
  // `staleness` (ignored otherwise). InvalidArgument for any other name or a negative staleness under SSP.
  [[nodiscard]] static absl::StatusOr<ConsistencyPolicy> Parse(absl::string_view name, int staleness);
  // The policy a scheduler announced (ClusterView.consistency, .staleness). InvalidArgument for an unspecified
  // or unknown mode, or a negative staleness under SSP.
  [[nodiscard]] static absl::StatusOr<ConsistencyPolicy> FromProto(Consistency mode, int staleness);

  // "bsp", "ssp" or "asp" ("unknown" for anything else).
  absl::string_view name() const;
  // For logs: "bsp", "ssp(2)", "asp".
  std::string ToString() const;

  // The scheduler: the smallest min clock at which iteration `clock` may start (the lowest int64 for ASP).
  int64_t RequiredMinClock(int64_t clock) const {
    switch (mode) {
      case CONSISTENCY_BSP:
        return clock;
      case CONSISTENCY_SSP:
        return clock - staleness;
      default:
        break;
    }
    return std::numeric_limits<int64_t>::min();
  }

  // Servers sum every worker's part of a clock before applying it, and workers send each server a part for
  // every clock (BSP only).
  bool bsp() const { return mode == CONSISTENCY_BSP; }
  // A worker may pull the next step's rows before its current step's push is acknowledged: ASP, and SSP with
  // staleness >= 1.
  bool prefetch_pulls() const { return mode == CONSISTENCY_ASP || (mode == CONSISTENCY_SSP && staleness >= 1); }
  // A worker may start its next step while its pushes are in flight (ASP only).
  bool overlap_pushes() const { return mode == CONSISTENCY_ASP; }
  // How many clocks a cached row may serve reads for: SSP's staleness (when >= 1), ASP's `asp_cache_clocks`
  // (the worker's flag), 0 (no row cache) otherwise.
  int row_cache_bound(int asp_cache_clocks) const {
    if (mode == CONSISTENCY_SSP) return staleness >= 1 ? staleness : 0;
    if (mode == CONSISTENCY_ASP) return asp_cache_clocks > 0 ? asp_cache_clocks : 0;
    return 0;
  }
  // The row cache counts freshness in this worker's own clocks (ASP) rather than the job's min clock (SSP).
  bool row_cache_own_clock() const { return mode == CONSISTENCY_ASP; }
};

}  // namespace kestrel

#endif  // KESTREL_COMMON_CONSISTENCY_H_
