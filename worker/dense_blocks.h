// How a dense tensor travels to and from the servers: as blocks of its table's dim floats (the last one padded),
// each stored on the server that owns its key (Partition::DenseBlockKey), grouped by server for the requests.
#ifndef KESTREL_WORKER_DENSE_BLOCKS_H_
#define KESTREL_WORKER_DENSE_BLOCKS_H_

#include <cstddef>

#include "common/partition.h"
#include "proto/table.pb.h"
#include "worker/ps_call_buffers.h"

namespace kestrel {

// The block ids of dense table `config` into b->ids, grouped by owning server of `partition`, increasing within
// each server; server s's are [b->offsets[s], b->offsets[s + 1]).
void GroupDenseBlocks(const Partition& partition, const TableConfig& config, CallBuffers* b);

// No blocks (an empty push): b->ids empty, every server's share [b->offsets[s], b->offsets[s + 1]) empty.
void NoDenseBlocks(const Partition& partition, CallBuffers* b);

// The `floats` floats of `values` (the whole tensor) into b->rows block by block in b->ids order, `dim` floats a
// block; the last block's padding is zero.
void GatherDenseBlocks(const float* values, size_t floats, int dim, CallBuffers* b);

// The inverse of GatherDenseBlocks: the blocks of b.rows (in b.ids order, `dim` floats each) into `out` (the whole
// tensor, `floats` floats), without their padding.
void ScatterDenseBlocks(const CallBuffers& b, int dim, float* out, size_t floats);

}  // namespace kestrel

#endif  // KESTREL_WORKER_DENSE_BLOCKS_H_
