#include "common/metrics.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/text_serializer.h"

namespace kestrel {
namespace {

// The registered scrape hooks, by id (ids increase, so the map runs them in registration order).
struct Hooks {
  absl::Mutex mu;
  uint64_t next_id ABSL_GUARDED_BY(mu) = 1;
  std::map<uint64_t, std::function<void()>> hooks ABSL_GUARDED_BY(mu);
};

Hooks& GlobalHooks() {
  static Hooks* hooks = new Hooks();  // never destroyed: hooks may be reset during static destruction
  return *hooks;
}

void RunScrapeHooks() {
  Hooks& h = GlobalHooks();
  absl::MutexLock lock(&h.mu);
  for (auto& [id, hook] : h.hooks) hook();
}

}  // namespace

prometheus::Registry& MetricsRegistry() {
  static prometheus::Registry* registry = new prometheus::Registry(prometheus::Registry::InsertBehavior::Merge);
  return *registry;
}

prometheus::Family<prometheus::Counter>& CounterFamily(const std::string& name, const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(MetricsRegistry());
}

prometheus::Family<prometheus::Gauge>& GaugeFamily(const std::string& name, const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(MetricsRegistry());
}

prometheus::Family<prometheus::Histogram>& HistogramFamily(const std::string& name, const std::string& help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(MetricsRegistry());
}

prometheus::Counter& NewCounter(const std::string& name, const std::string& help, const prometheus::Labels& labels) {
  return CounterFamily(name, help).Add(labels);
}

prometheus::Gauge& NewGauge(const std::string& name, const std::string& help, const prometheus::Labels& labels) {
  return GaugeFamily(name, help).Add(labels);
}

prometheus::Counter& RpcsSentCounter(const std::string& peer, const std::string& method) {
  return NewCounter("kestrel_rpcs_sent_total", "RPCs this process started, by the kind of peer and the method.",
                    {{"peer", peer}, {"method", method}});
}

prometheus::Histogram& NewHistogram(const std::string& name, const std::string& help,
                                    const prometheus::Histogram::BucketBoundaries& buckets,
                                    const prometheus::Labels& labels) {
  return HistogramFamily(name, help).Add(labels, buckets);
}

const prometheus::Histogram::BucketBoundaries& RpcLatencyBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  return *buckets;
}

const prometheus::Histogram::BucketBoundaries& LongOperationBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800};
  return *buckets;
}

void AdvanceCounterTo(prometheus::Counter& counter, double total) {
  const double current = counter.Value();
  if (total > current) counter.Increment(total - current);
}

ScrapeHook::ScrapeHook(std::function<void()> refresh) {
  Hooks& h = GlobalHooks();
  absl::MutexLock lock(&h.mu);
  id_ = h.next_id++;
  h.hooks.emplace(id_, std::move(refresh));
}

ScrapeHook::~ScrapeHook() { Reset(); }

ScrapeHook::ScrapeHook(ScrapeHook&& other) noexcept : id_(std::exchange(other.id_, 0)) {}

ScrapeHook& ScrapeHook::operator=(ScrapeHook&& other) noexcept {
  if (this != &other) {
    Reset();
    id_ = std::exchange(other.id_, 0);
  }
  return *this;
}

void ScrapeHook::Reset() {
  if (id_ == 0) return;
  Hooks& h = GlobalHooks();
  absl::MutexLock lock(&h.mu);
  h.hooks.erase(id_);
  id_ = 0;
}

std::string MetricsText() {
  RunScrapeHooks();
  return prometheus::TextSerializer().Serialize(MetricsRegistry().Collect());
}

}  // namespace kestrel
