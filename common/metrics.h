// Prometheus metrics of Kestrel's processes (Debian's prometheus-cpp core): one process-wide registry, helpers
// to declare metrics in it, scrape hooks that refresh gauges from a component's state just before each scrape,
// per-RPC request metrics, and the HTTP server that serves them (GET /metrics, text exposition format 0.0.4).
//
// Names follow Prometheus conventions: kestrel_<process>_<what>[_<unit>][_total], snake_case, base units
// (`_seconds`, `_bytes`), `_total` on counters only. The metrics each process exports are declared in one place
// per process: server/server_metrics.h, scheduler/scheduler_metrics.h, cmd/worker_main.cc.
//
// The HTTP server is Kestrel's own (a few dozen lines over sockets), not prometheus-cpp's Exposer: the Exposer
// runs on civetweb, whose threads get a fixed 100 KiB stack, and glibc places a process's static TLS on every
// thread's stack; in a worker linked with CUDA (cuBLASLt alone has 92 KiB of TLS) civetweb cannot start a
// thread at all.
//
// Core classes (Shard, Table, ClockTable, Membership, Trainer) do not depend on this file: the gRPC services, the
// job controller and the binaries' mains read their state and record events.
//
//   prometheus::Counter& done = NewCounter("kestrel_worker_examples_total", "Training examples processed.");
//   done.Increment(batch_size);
//   ScrapeHook hook([&] { NewGauge("kestrel_server_tables", "Tables held.").Set(shard.Stats().tables.size()); });
//   MetricsServerOptions options;
//   options.port = 0;  // any free port
//   absl::StatusOr<std::unique_ptr<MetricsServer>> server = MetricsServer::Start(options);
#ifndef KESTREL_COMMON_METRICS_H_
#define KESTREL_COMMON_METRICS_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace kestrel {

// The process-wide registry (never destroyed). Families merge by name and constant labels: declaring a metric a
// second time returns the first declaration. Thread-safe.
prometheus::Registry& MetricsRegistry();

// Declare (or find) metrics in MetricsRegistry(). Names and label names must be valid Prometheus names and a
// name must keep one type: a violation is a programming error, and prometheus-cpp throws std::invalid_argument.
// Help texts must hold no backslash or newline (prometheus-cpp 1.0.1 writes HELP lines unescaped).
// The returned references stay valid for the life of the process. Thread-safe.
prometheus::Family<prometheus::Counter>& CounterFamily(const std::string& name, const std::string& help);
prometheus::Family<prometheus::Gauge>& GaugeFamily(const std::string& name, const std::string& help);
prometheus::Family<prometheus::Histogram>& HistogramFamily(const std::string& name, const std::string& help);
prometheus::Counter& NewCounter(const std::string& name, const std::string& help,
                                const prometheus::Labels& labels = {});
prometheus::Gauge& NewGauge(const std::string& name, const std::string& help, const prometheus::Labels& labels = {});
// kestrel_rpcs_sent_total{peer, method}: RPCs this process started to a peer of kind `peer` ("server",
// "scheduler"), by method name. The gRPC clients count every call they start (a worker's RPCs per step are
// these counters' growth over its clock's); callers on a hot path keep the reference.
prometheus::Counter& RpcsSentCounter(const std::string& peer, const std::string& method);
prometheus::Histogram& NewHistogram(const std::string& name, const std::string& help,
                                    const prometheus::Histogram::BucketBoundaries& buckets,
                                    const prometheus::Labels& labels = {});

// Bucket boundaries, in seconds: RPC latencies (50 us .. 10 s) and long operations such as checkpoints and
// restores (10 ms .. 30 min).
const prometheus::Histogram::BucketBoundaries& RpcLatencyBuckets();
const prometheus::Histogram::BucketBoundaries& LongOperationBuckets();

// Raises `counter` to `total`, a cumulative count kept elsewhere (e.g. Shard::Stats()); never lowers it. Not
// atomic as a whole: call it from scrape hooks only (they run one at a time).
void AdvanceCounterTo(prometheus::Counter& counter, double total);

// A function run before every scrape (HTTP or MetricsText()), to set gauges from a component's current state;
// unregistered when the ScrapeHook is destroyed or reset. Hooks run one at a time, in registration order, under
// a process-wide lock: a hook must not block for long, must not create or destroy ScrapeHooks, and a ScrapeHook
// must not be destroyed by a thread that holds a lock its hook takes (destruction waits for a running hook).
// Thread-safe.
class ScrapeHook {
 public:
  ScrapeHook() = default;
  explicit ScrapeHook(std::function<void()> refresh);
  ~ScrapeHook();
  ScrapeHook(ScrapeHook&& other) noexcept;
  ScrapeHook& operator=(ScrapeHook&& other) noexcept;
  ScrapeHook(const ScrapeHook&) = delete;
  ScrapeHook& operator=(const ScrapeHook&) = delete;

  // Unregisters the hook now (no-op when empty).
  void Reset();

 private:
  uint64_t id_ = 0;  // 0: none
};

// Runs every scrape hook, then returns MetricsRegistry() in the text exposition format: what /metrics serves.
std::string MetricsText();

// Counts and times the calls of one RPC service:
//   <prefix>_requests_total{method="Pull",code="OK"}      counter: finished calls by status code
//   <prefix>_request_duration_seconds{method="Pull"}      histogram (RpcLatencyBuckets): arrival to reply
// where code is the canonical status code name ("OK", "INVALID_ARGUMENT", ... as absl::StatusCodeToString).
// Thread-safe. Per call: a clock read, a few atomic operations and the histogram's own mutex; no lookups.
//
//   RpcMetrics rpc("kestrel_server", "parameter server");
//   RpcMetrics::Method& pull = rpc.method("Pull");        // once, e.g. in a constructor
//   RpcMetrics::Call call = pull.Begin();                 // per call
//   ... call.End(status);
class RpcMetrics {
 public:
  class Method;

  // One call being timed. Copyable; End() it once.
  class Call {
   public:
    void End(const absl::Status& status) const;

   private:
    friend class Method;
    Call(Method* method, std::chrono::steady_clock::time_point start) : method_(method), start_(start) {}
    Method* method_;
    std::chrono::steady_clock::time_point start_;
  };

  class Method {
   public:
    Call Begin() { return Call(this, std::chrono::steady_clock::now()); }
    // Records one finished call directly.
    void Record(absl::StatusCode code, double seconds);

   private:
    friend class RpcMetrics;
    Method(prometheus::Family<prometheus::Counter>* requests, prometheus::Histogram* latency, std::string name);

    prometheus::Family<prometheus::Counter>* const requests_;
    prometheus::Histogram* const latency_;
    const std::string name_;
    // By absl::StatusCode value (0..16): the series, created on first use.
    std::array<std::atomic<prometheus::Counter*>, 17> by_code_{};
  };

  // `prefix`: e.g. "kestrel_server"; `service`: what the help text calls the service ("parameter server").
  RpcMetrics(const std::string& prefix, const std::string& service);

  // The metrics of `method`, created on the first call (its code="OK" series starts at 0). The reference stays
  // valid for the life of this RpcMetrics; look it up once, not per call.
  Method& method(const std::string& name);

 private:
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& latency_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Method>> methods_ ABSL_GUARDED_BY(mu_);
};

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

#endif  // KESTREL_COMMON_METRICS_H_
