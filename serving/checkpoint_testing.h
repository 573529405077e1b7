// For the serving tests and the serving benchmark: checkpoints of in-process servers committed as a training job's
// scheduler commits them (every shard's part, the manifest, LATEST), and tool pushes that change a model between
// them. Test-only.
#ifndef KESTREL_SERVING_CHECKPOINT_TESTING_H_
#define KESTREL_SERVING_CHECKPOINT_TESTING_H_

#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "common/checkpoint_layout.h"
#include "server/shard.h"

namespace kestrel {

// Writes checkpoint `sequence` of `servers` (one partition, rank s at index s) cut at `clock` under `layout`;
// with `commit`, LATEST names it.
[[nodiscard]] absl::Status WriteTestCheckpoint(const std::vector<Shard*>& servers, const CheckpointLayout& layout,
                                               uint64_t sequence, int64_t clock, bool commit);

// One tool push at `clock` into servers[0]: `rows` random new keys into every sparse table, and a step on every
// dense block.
[[nodiscard]] absl::Status PushTestRows(const std::vector<Shard*>& servers, int64_t clock, int rows,
                                        std::mt19937_64* rng);

}  // namespace kestrel

#endif  // KESTREL_SERVING_CHECKPOINT_TESTING_H_
