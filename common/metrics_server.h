// MetricsServer: the HTTP server of a process's metrics (GET /metrics, text exposition format 0.0.4, from
// common/metrics.h MetricsText()).
//
// Kestrel's own (a few dozen lines over sockets), not prometheus-cpp's Exposer: the Exposer runs on civetweb, whose
// threads get a fixed 100 KiB stack, and glibc places a process's static TLS on every thread's stack; in a worker
// linked with CUDA (cuBLASLt alone has 92 KiB of TLS) civetweb cannot start a thread at all.
//
//   MetricsServerOptions options;
//   options.port = 0;  // any free port
//   absl::StatusOr<std::unique_ptr<MetricsServer>> server = MetricsServer::Start(options);
#ifndef KESTREL_COMMON_METRICS_SERVER_H_
#define KESTREL_COMMON_METRICS_SERVER_H_

#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kestrel {

struct MetricsServerOptions {
  // Address to listen on. Default: "127.0.0.1" (this machine only; a Prometheus elsewhere needs
  // --metrics_host=0.0.0.0 or the pod's address).
  std::string host = "127.0.0.1";
  // -1: no server (Start returns null); 0: any free port (logged, and written to port_file); N in [1, 65535]:
  // that port. Default: -1.
  int port = -1;
  // If non-empty, the bound port is written to this file atomically (common/process_setup.h WritePortFile)
  // once the server is serving. Default: "" (none).
  std::string port_file;
  // How long one connection may take to send its request and read the answer; then it is closed. Default: 5 s.
  absl::Duration io_timeout = absl::Seconds(5);
  // Connections answered at once (one thread each), and accepted connections waiting for one; a connection
  // beyond both is closed at once. Defaults: 4 and 64.
  int handler_threads = 4;
  int max_waiting = 64;
};

// Serves MetricsText() at http://host:port/metrics (HTTP/1.0 and 1.1, one request per connection; other paths
// are 404, other methods 405). One thread accepts; handler_threads answer concurrently, each connection for at
// most io_timeout, so idle or stalled clients cannot hold scrapes up; past max_waiting queued connections, new
// ones are closed unanswered. The threads block every asynchronous signal, so the server may be started before
// or after BlockShutdownSignals(). Thread-safe.
class MetricsServer {
 public:
  // Null (and OK) when options.port is -1. InvalidArgument for a port outside [-1, 65535] or a timeout <= 0;
  // Unavailable when the address cannot be bound; the error of writing port_file.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const MetricsServerOptions& options);
  // Stops serving (finishes a scrape in progress first).
  ~MetricsServer();

  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The port actually bound.
  int port() const { return port_; }

 private:
  MetricsServer() = default;
  void Serve();
  void Handle();
  void Answer(int connection);

  int listen_fd_ = -1;
  int stop_fd_ = -1;  // eventfd: readable once the destructor asks the thread to stop
  absl::Duration io_timeout_;
  size_t max_waiting_ = 64;
  int port_ = 0;
  std::thread thread_;
  std::vector<std::thread> handlers_;
  absl::Mutex mu_;
  std::deque<int> waiting_ ABSL_GUARDED_BY(mu_);  // accepted connections for the handlers
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kestrel

#endif  // KESTREL_COMMON_METRICS_SERVER_H_
