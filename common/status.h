// Status helpers shared by every Kestrel module.
//
// Debian's Abseil 20220623 has no ABSL_RETURN_IF_ERROR / ASSIGN_OR_RETURN, so Kestrel defines its own.
// Status codes follow Abseil's retry policy (common/retry.h is the one classifier): Unavailable = retry the call,
// Aborted = retry at a higher level, InvalidArgument = fix the input, FailedPrecondition = fix the system state
// first.
#ifndef KESTREL_COMMON_STATUS_H_
#define KESTREL_COMMON_STATUS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define KESTREL_RETURN_IF_ERROR(expr)              \
  do {                                             \
    ::absl::Status kestrel_status_ = (expr);       \
    if (!kestrel_status_.ok()) return kestrel_status_; \
  } while (0)

#define KESTREL_STATUS_CONCAT_INNER_(a, b) a##b
#define KESTREL_STATUS_CONCAT_(a, b) KESTREL_STATUS_CONCAT_INNER_(a, b)

// `KESTREL_ASSIGN_OR_RETURN(auto x, Foo());` assigns the value of an absl::StatusOr or returns its status.
#define KESTREL_ASSIGN_OR_RETURN(lhs, expr) \
  KESTREL_ASSIGN_OR_RETURN_IMPL_(KESTREL_STATUS_CONCAT_(kestrel_statusor_, __LINE__), lhs, expr)
#define KESTREL_ASSIGN_OR_RETURN_IMPL_(var, lhs, expr) \
  auto var = (expr);                                   \
  if (!var.ok()) return std::move(var).status();       \
  lhs = std::move(var).value()

#endif  // KESTREL_COMMON_STATUS_H_
