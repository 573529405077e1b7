// The /metrics flags shared by every binary that serves Prometheus metrics (link this library to get them):
// --metrics_host, --metrics_port, --metrics_port_file.
#ifndef KESTREL_COMMON_METRICS_FLAGS_H_
#define KESTREL_COMMON_METRICS_FLAGS_H_

#include "common/metrics_server.h"

namespace kestrel {

// The metrics server the flags ask for (after absl::ParseCommandLine); port -1 (the default) means none.
MetricsServerOptions MetricsServerOptionsFromFlags();

}  // namespace kestrel

#endif  // KESTREL_COMMON_METRICS_FLAGS_H_
