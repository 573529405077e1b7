#include "serving/checkpoint_testing.h"

#include <algorithm>
#include <memory>
#include <string>

#include "common/partition.h"
#include "common/status.h"
#include "server/shard_store.h"

namespace kestrel {

absl::Status WriteTestCheckpoint(const std::vector<Shard*>& servers, const CheckpointLayout& layout,
                                 uint64_t sequence, int64_t clock, bool commit) {
  const std::string name = CheckpointLayout::CheckpointName(sequence);
  std::vector<ShardCheckpoint> answers;
  for (size_t s = 0; s < servers.size(); ++s) {
    KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<ShardStore> store, ShardStore::Open(layout, static_cast<int>(s)));
    KESTREL_ASSIGN_OR_RETURN(ShardCheckpoint answer, store->Checkpoint(*servers[s], name));
    answers.push_back(std::move(answer));
  }
  CheckpointManifest manifest;
  manifest.set_format_version(1);
  manifest.set_sequence(sequence);
  manifest.set_clock(clock);
  manifest.set_job_id(servers[0]->job_id());
  manifest.set_partition(servers[0]->partition().ToString());
  manifest.set_num_servers(static_cast<int>(servers.size()));
  KESTREL_RETURN_IF_ERROR(AddShardsToManifest(answers, static_cast<int>(servers.size()), &manifest));
  KESTREL_RETURN_IF_ERROR(layout.WriteManifest(manifest));
  if (commit) KESTREL_RETURN_IF_ERROR(layout.MoveLatest(name));
  return absl::OkStatus();
}

absl::Status PushTestRows(const std::vector<Shard*>& servers, int64_t clock, int rows, std::mt19937_64* rng) {
  Shard& shard = *servers[0];
  RequestContext ctx;
  ctx.job_id = shard.job_id();
  ctx.clock = clock;
  std::uniform_real_distribution<float> grad(-0.5f, 0.5f);
  for (const TableConfig& t : shard.DescribeTables()) {
    std::vector<uint64_t> keys;
    if (t.kind() == TableConfig::DENSE) {
      for (uint64_t b = 0; b < Partition::DenseBlockCount(t.dense_size(), t.dim()); ++b) keys.push_back(b);
    } else {
      for (int i = 0; i < rows; ++i) keys.push_back((*rng)());
      std::sort(keys.begin(), keys.end());
      keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    }
    std::vector<float> grads(keys.size() * t.dim());
    for (float& g : grads) g = grad(*rng);
    KESTREL_RETURN_IF_ERROR(t.kind() == TableConfig::DENSE ? shard.PushDense(ctx, t.name(), keys, grads, t.dim())
                                                          : shard.Push(ctx, t.name(), keys, grads, t.dim()));
  }
  return absl::OkStatus();
}

}  // namespace kestrel
