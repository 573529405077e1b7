// The prediction service's limits and defaults: the one home of each (kestrel_serve's flags, the service and its
// clients read them here).
#ifndef KESTREL_SERVING_PREDICT_LIMITS_H_
#define KESTREL_SERVING_PREDICT_LIMITS_H_

#include <cstddef>
#include <cstdint>

namespace kestrel {

// Longest example line a Predict request may carry: 64 KiB.
inline constexpr size_t kMaxPredictLineBytes = size_t{64} << 10;
// --max_batch default: the most examples one Predict request may carry.
inline constexpr int kDefaultMaxPredictBatch = 4096;
// The most --max_batch may be set to.
inline constexpr int kMaxPredictBatchLimit = 65536;
// --max_queued default: Predict requests waiting for a scoring thread; beyond it requests are answered
// RESOURCE_EXHAUSTED at once.
inline constexpr int kDefaultMaxQueuedPredictions = 1024;
// The most examples one scoring pass joins from queued requests (requests are never split): small requests
// arriving together are scored as one batch.
inline constexpr int kMaxJoinedExamples = 4096;
// Largest gRPC message the service accepts: a full batch of the longest lines, bounded.
inline constexpr int kMaxPredictMessageBytes = 64 << 20;
// The manifest of a serving directory, and the largest one read.
inline constexpr char kServingManifestFile[] = "MANIFEST";
inline constexpr uint64_t kMaxManifestBytes = uint64_t{4} << 20;
// How often kestrel_serve looks for a new manifest (--poll_ms default).
inline constexpr int kDefaultServingPollMs = 1000;
// Client calls without a deadline of their own get this one (Python client, kestrel_serve's tools).
inline constexpr int kDefaultPredictTimeoutMs = 10000;

}  // namespace kestrel

#endif  // KESTREL_SERVING_PREDICT_LIMITS_H_
