#include "server/fuzz_shard.h"

#include <algorithm>
#include <vector>

#include "common/fuzz_input.h"
#include "proto/ps.pb.h"
#include "server/ps_handlers.h"

namespace kestrel {
namespace {

TableConfig Config(const char* name, TableConfig::Kind kind, int dim, uint64_t dense_size,
                   OptimizerConfig::Type optimizer) {
  TableConfig config;
  config.set_name(name);
  config.set_kind(kind);
  config.set_dim(dim);
  config.set_dense_size(dense_size);
  config.set_seed(7);
  config.mutable_initializer()->set_type(InitializerConfig::UNIFORM);
  config.mutable_optimizer()->set_type(optimizer);
  return config;
}

}  // namespace

std::unique_ptr<Shard> MakeFuzzShard(uint8_t config) {
  ShardOptions options;
  options.job_id = kFuzzJob;
  options.owner = (config >> 1) & 1;
  options.bsp_workers = (config & 1) != 0 ? 2 : 0;
  options.max_keys_per_request = 64;
  options.max_response_bytes = 1024;
  auto shard = Shard::Create(options, *Partition::Uniform(2));
  FUZZ_CHECK(shard.ok());
  for (const TableConfig& table : {Config("emb", TableConfig::SPARSE, 4, 0, OptimizerConfig::ADAGRAD),
                                   Config("w", TableConfig::DENSE, 3, 10, OptimizerConfig::SGD),
                                   Config("one", TableConfig::SPARSE, 1, 0, OptimizerConfig::FTRL)}) {
    CreateTableRequest request;
    request.mutable_header()->set_job_id(kFuzzJob);
    *request.mutable_config() = table;
    CreateTableResponse response;
    FUZZ_CHECK(HandleCreateTable(**shard, request, &response).ok());
  }
  return std::move(shard).value();
}

grpc::ByteBuffer Sliced(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t i = 0; i < bytes.size(); i += piece)
    slices.emplace_back(bytes.data() + i, std::min(piece, bytes.size() - i));
  return slices.empty() ? grpc::ByteBuffer() : grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace kestrel
