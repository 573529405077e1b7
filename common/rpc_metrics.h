// RpcMetrics: the calls of one RPC service, counted by method and status code and timed, in the process's
// metrics registry (common/metrics.h).
#ifndef KESTREL_COMMON_RPC_METRICS_H_
#define KESTREL_COMMON_RPC_METRICS_H_

#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"

namespace kestrel {

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

}  // namespace kestrel

#endif  // KESTREL_COMMON_RPC_METRICS_H_
