#include "common/rpc_metrics.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/metrics.h"

namespace kestrel {
namespace {

constexpr int kNumStatusCodes = 17;  // absl::StatusCode::kOk (0) .. kUnauthenticated (16)

}  // namespace

void RpcMetrics::Call::End(const absl::Status& status) const {
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start_;
  method_->Record(status.code(), elapsed.count());
}

RpcMetrics::Method::Method(prometheus::Family<prometheus::Counter>* requests, prometheus::Histogram* latency,
                           std::string name)
    : requests_(requests), latency_(latency), name_(std::move(name)) {
  by_code_[0].store(&requests_->Add({{"method", name_}, {"code", absl::StatusCodeToString(absl::StatusCode::kOk)}}));
}

void RpcMetrics::Method::Record(absl::StatusCode code, double seconds) {
  int index = static_cast<int>(code);
  if (index < 0 || index >= kNumStatusCodes) index = static_cast<int>(absl::StatusCode::kUnknown);
  prometheus::Counter* counter = by_code_[index].load(std::memory_order_acquire);
  if (counter == nullptr) {
    // Family::Add is thread-safe and returns the existing series for equal labels, so a race only repeats it.
    counter = &requests_->Add(
        {{"method", name_}, {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(index))}});
    by_code_[index].store(counter, std::memory_order_release);
  }
  counter->Increment();
  latency_->Observe(seconds);
}

RpcMetrics::RpcMetrics(const std::string& prefix, const std::string& service)
    : requests_(CounterFamily(absl::StrCat(prefix, "_requests_total"),
                              absl::StrCat("Calls of the ", service, "'s RPC methods, by method and status code."))),
      latency_(HistogramFamily(absl::StrCat(prefix, "_request_duration_seconds"),
                               absl::StrCat("Time from a call's arrival at the ", service,
                                            " to its answer, by RPC method."))) {}

RpcMetrics::Method& RpcMetrics::method(const std::string& name) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Method>& m = methods_[name];
  if (m == nullptr) m.reset(new Method(&requests_, &latency_.Add({{"method", name}}, RpcLatencyBuckets()), name));
  return *m;
}

}  // namespace kestrel
