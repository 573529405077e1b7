// Fault injection for crash tests: named points in the checkpoint protocol where a test can make the process
// die as if by kill -9.
//
// A process dies at point P when the environment variable KESTREL_FAULT_POINT equals P: the first time it
// reaches P, or the N-th time when KESTREL_FAULT_POINT is "P@N". Without the variable every point is one
// relaxed atomic load. Points are listed where they are used (grep for CrashPoint).
//
// With KESTREL_FAULT_ONCE set to a file path as well, the selected hit dies only in the process that creates that
// file (exclusively); every other process, and every later one (a launcher's replacement, which inherits the
// environment), lives on. So one job-wide variable kills exactly one process once, whichever gets there first.
//
// Thread-safe.
#ifndef KESTREL_COMMON_FAULT_INJECTION_H_
#define KESTREL_COMMON_FAULT_INJECTION_H_

#include "absl/strings/string_view.h"

namespace kestrel {

// Dies with SIGKILL (after logging the point) when KESTREL_FAULT_POINT selects this hit of `point`.
void CrashPoint(absl::string_view point);

}  // namespace kestrel

#endif  // KESTREL_COMMON_FAULT_INJECTION_H_
