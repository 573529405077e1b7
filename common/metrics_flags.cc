#include "common/metrics_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, metrics_host, "127.0.0.1",
          "Address /metrics listens on (with --metrics_port). Default: 127.0.0.1, this machine only; 0.0.0.0 "
          "for a Prometheus elsewhere.");

namespace kestrel {

std::string MetricsHostFromFlags() { return absl::GetFlag(FLAGS_metrics_host); }

}  // namespace kestrel
