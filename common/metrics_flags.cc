#include "common/metrics_flags.h"

#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, metrics_host, "127.0.0.1",
          "Address /metrics listens on (with --metrics_port). Default: 127.0.0.1, this machine only; 0.0.0.0 "
          "for a Prometheus elsewhere.");
ABSL_FLAG(int, metrics_port, -1,
          "Serve Prometheus metrics at http://<--metrics_host>:<port>/metrics: -1 off (default), 0 any free port "
          "(logged, see --metrics_port_file), N that port.");
ABSL_FLAG(std::string, metrics_port_file, "",
          "If set, the bound metrics port is written to this file (atomically) once metrics are served. Default: "
          "none.");

namespace kestrel {

MetricsServerOptions MetricsServerOptionsFromFlags() {
  MetricsServerOptions options;
  options.host = absl::GetFlag(FLAGS_metrics_host);
  options.port = absl::GetFlag(FLAGS_metrics_port);
  options.port_file = absl::GetFlag(FLAGS_metrics_port_file);
  return options;
}

}  // namespace kestrel
