// HeldReads: the answer a server gives a training read held at a rescale's boundary (elastic jobs under
// server-enforced clocks, docs/elasticity.md). A dead worker holds the others back in the servers' read gates
// (server/read_gate.h), where its lease lets them run past what the scheduler knows; to remove it, the scheduler
// asks every server to answer each read of an iteration >= the boundary with this status instead of waiting
// (RescaleShard HOLD). The worker that gets it has every push before the boundary applied: it reports its
// state at the boundary to the scheduler (worker/trainer.cc) and waits there like any held worker.
//
// Aborted, so no call layer retries it (common/retry.h: the operation is redone from the new state). The one
// home of the message's form: ReadsHeldAt builds it, HeldClockOf recognizes it anywhere in a message (callers
// prefix their context). Pure functions.
#ifndef KESTREL_COMMON_HELD_READS_H_
#define KESTREL_COMMON_HELD_READS_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace kestrel {

inline constexpr absl::string_view kReadsHeldMarker = "reads held at clock ";

// The answer to a read of an iteration >= `clock` while the job is held there.
[[nodiscard]] inline absl::Status ReadsHeldAt(int64_t clock) {
  return absl::AbortedError(absl::StrCat(kReadsHeldMarker, clock,
                                         " for a rescale that removes dead workers: report there and wait"));
}

// The boundary a ReadsHeldAt status names (also inside a longer message), or nullopt for any other status.
inline std::optional<int64_t> HeldClockOf(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kAborted) return std::nullopt;
  const absl::string_view message = status.message();
  const size_t at = message.find(kReadsHeldMarker);
  if (at == absl::string_view::npos) return std::nullopt;
  absl::string_view rest = message.substr(at + kReadsHeldMarker.size());
  size_t digits = 0;
  while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
  int64_t clock;
  if (digits == 0 || !absl::SimpleAtoi(rest.substr(0, digits), &clock)) return std::nullopt;
  return clock;
}

}  // namespace kestrel

#endif  // KESTREL_COMMON_HELD_READS_H_
