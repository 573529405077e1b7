#include "worker/dense_blocks.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace kestrel {

void GroupDenseBlocks(const Partition& partition, const TableConfig& config, CallBuffers* b) {
  const uint64_t num_blocks = Partition::DenseBlockCount(config.dense_size(), config.dim());
  const int servers = partition.num_servers();
  b->offsets.assign(servers + 1, 0);
  b->ids.resize(num_blocks);
  std::vector<int> owner(num_blocks);
  for (uint64_t k = 0; k < num_blocks; ++k) {
    owner[k] = partition.OwnerOf(Partition::DenseBlockKey(config.name(), k));
    ++b->offsets[owner[k] + 1];
  }
  for (int s = 0; s < servers; ++s) b->offsets[s + 1] += b->offsets[s];
  std::vector<size_t> next(b->offsets.begin(), b->offsets.end() - 1);
  for (uint64_t k = 0; k < num_blocks; ++k) b->ids[next[owner[k]]++] = k;
}

void NoDenseBlocks(const Partition& partition, CallBuffers* b) {
  b->ids.clear();
  b->offsets.assign(partition.num_servers() + 1, 0);
}

void GatherDenseBlocks(const float* values, size_t floats, int dim, CallBuffers* b) {
  b->rows.assign(b->ids.size() * dim, 0.0f);  // the last block's padding gets zeros
  for (size_t i = 0; i < b->ids.size(); ++i) {
    const size_t begin = b->ids[i] * dim;
    const size_t n = std::min<size_t>(dim, floats - begin);
    std::memcpy(b->rows.data() + i * dim, values + begin, n * sizeof(float));
  }
}

void ScatterDenseBlocks(const CallBuffers& b, int dim, float* out, size_t floats) {
  for (size_t i = 0; i < b.ids.size(); ++i) {
    const size_t begin = b.ids[i] * dim;
    const size_t n = std::min<size_t>(dim, floats - begin);
    std::memcpy(out + begin, b.rows.data() + i * dim, n * sizeof(float));
  }
}

}  // namespace kestrel
