// Prometheus metrics of Kestrel's processes (Debian's prometheus-cpp core): one process-wide registry, helpers
// to declare metrics in it, and scrape hooks that refresh gauges from a component's state just before each scrape.
// Per-RPC request metrics: common/rpc_metrics.h; the HTTP server that serves them (GET /metrics, text exposition
// format 0.0.4): common/metrics_server.h.
//
// Names follow Prometheus conventions: kestrel_<process>_<what>[_<unit>][_total], snake_case, base units
// (`_seconds`, `_bytes`), `_total` on counters only. The metrics each process exports are declared in one place
// per process: server/server_metrics.h, scheduler/scheduler_metrics.h, cmd/worker_main.cc.

//
// Core classes (Shard, Table, ClockTable, Membership, Trainer) do not depend on this file: the gRPC services, the
// job controller and the binaries' mains read their state and record events.
//
//   prometheus::Counter& done = NewCounter("kestrel_worker_examples_total", "Training examples processed.");
//   done.Increment(batch_size);
//   ScrapeHook hook([&] { NewGauge("kestrel_server_tables", "Tables held.").Set(shard.Stats().tables.size()); });
#ifndef KESTREL_COMMON_METRICS_H_
#define KESTREL_COMMON_METRICS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

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

}  // namespace kestrel

#endif  // KESTREL_COMMON_METRICS_H_
