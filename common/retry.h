// The one rule for what a failed call's status code asks of its caller (Abseil's guidance, docs/protocol.md):
// whether sending the same call again may succeed, whether the operation it belongs to must be redone from a new
// state, or whether nothing but a fix helps. Every retry loop in Kestrel classifies through it; each keeps its own
// policy of how often and how long (client/registration.h, worker/ps_client.h, worker/scheduler_gate.h, the
// scheduler's job controller).
#ifndef KESTREL_COMMON_RETRY_H_
#define KESTREL_COMMON_RETRY_H_

#include "absl/status/status.h"

namespace kestrel {

enum class RetryScope {
  // OK, or a failure sending the call again cannot fix: fix the input (INVALID_ARGUMENT, OUT_OF_RANGE), the
  // system's state (FAILED_PRECONDITION, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED) or the program.
  kNone,
  // UNAVAILABLE, DEADLINE_EXCEEDED: the peer was unreachable, slow or not ready yet; the same call may succeed
  // (every Kestrel call is idempotent: a repeat is recognized and answered, never applied twice).
  kCall,
  // ABORTED, CANCELLED: the call was cut short because the peer's state moved on (a rollback, a rescale, a
  // shutdown); the operation it belongs to may succeed when redone from the new state.
  kOperation,
};

inline RetryScope RetryScopeOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return RetryScope::kCall;
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
      return RetryScope::kOperation;
    default:
      return RetryScope::kNone;
  }
}

// A call that failed this way may succeed if sent again unchanged (RetryScope::kCall).
inline bool IsTransient(const absl::Status& status) { return RetryScopeOf(status) == RetryScope::kCall; }

}  // namespace kestrel

#endif  // KESTREL_COMMON_RETRY_H_
