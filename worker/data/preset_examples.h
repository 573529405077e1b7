// The Criteo and libsvm presets' examples (worker/data/criteo_reader.h, libsvm_reader.h) into a Batch: their
// fixed fields and the keys worker/data/feature_map.h makes for them.
#ifndef KESTREL_WORKER_DATA_PRESET_EXAMPLES_H_
#define KESTREL_WORKER_DATA_PRESET_EXAMPLES_H_

#include "absl/status/status.h"
#include "worker/data/batch.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/libsvm_reader.h"

namespace kestrel {

inline constexpr int kCriteoFields = kCriteoIntegerFields + kCriteoCategoricalFields;

// Appends a Criteo example: 39 slots, plus 13 dense inputs when batch->dense_dim is 13.
void AppendCriteo(const CriteoExample& example, Batch* batch);
// Appends a libsvm example into batch->fields slots (zero-valued padding after its features).
// InvalidArgument when it has more features than slots.
[[nodiscard]] absl::Status AppendLibsvm(const LibsvmExample& example, Batch* batch);

}  // namespace kestrel

#endif  // KESTREL_WORKER_DATA_PRESET_EXAMPLES_H_
