// ScoreExport: the examples of labeled files scored with a loaded export (export/load_export.h) — what
// kestrel_predict computes, and what the online service (serving/) must answer bit for bit.
#ifndef KESTREL_EXPORT_SCORE_EXPORT_H_
#define KESTREL_EXPORT_SCORE_EXPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "export/load_export.h"
#include "worker/compute/backend.h"

namespace kestrel {

// One probability per example of `files` (at most `limit`; 0: all), in file order, and the labels: a Trainer of
// the export's job scoring on the export's shard, computing on `backend`.
[[nodiscard]] absl::Status ScoreExport(const LoadedExport& loaded, Backend* backend,
                                       const std::vector<std::string>& files, int64_t limit,
                                       std::vector<float>* probs, std::vector<float>* labels);

}  // namespace kestrel

#endif  // KESTREL_EXPORT_SCORE_EXPORT_H_
