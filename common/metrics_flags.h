// --metrics_host, shared by every binary that serves /metrics (link this library to get the flag).
#ifndef KESTREL_COMMON_METRICS_FLAGS_H_
#define KESTREL_COMMON_METRICS_FLAGS_H_

#include <string>

namespace kestrel {

// The flag's value (after absl::ParseCommandLine).
std::string MetricsHostFromFlags();

}  // namespace kestrel

#endif  // KESTREL_COMMON_METRICS_FLAGS_H_
