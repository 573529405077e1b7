// RoutedPsClient's table calls (CreateTable, Pull, Push, PullDense, PushDense, Stats), their checks, and the
// table configs they learn from the servers. See worker/routed_ps_client.h.
#include "worker/routed_ps_client.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/gradients.h"
#include "common/half.h"
#include "common/limits.h"
#include "worker/dense_blocks.h"

namespace kestrel {

absl::Status CheckShape(size_t keys, int dim) {
  if (dim < 1) return absl::InvalidArgumentError(absl::StrCat("dim must be >= 1, got ", dim));
  if (keys >= UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(keys, " keys in one call: split it below 2^32"));
  }
  return absl::OkStatus();
}

RoutedPsClient::RoutedPsClient(const PsClientOptions& options, Partition partition,
                               std::unique_ptr<PsTransport> transport)
    : options_(options),
      partition_(std::move(partition)),
      replicated_(partition_.replicas() > 1 && options.routing != nullptr),
      transport_(std::move(transport)) {}

absl::Status RoutedPsClient::CreateTable(const TableConfig& config) {
  CreateTableRequest request;
  FillHeader(request.mutable_header(), /*clock=*/0);
  *request.mutable_config() = config;
  std::vector<CreateTableResponse> responses;
  KESTREL_RETURN_IF_ERROR(Broadcast(PsMethod::kCreateTable, request, &responses));
  absl::MutexLock lock(&configs_mu_);
  configs_[config.name()] = config;
  return absl::OkStatus();
}

absl::Status RoutedPsClient::Pull(absl::string_view table, const KeyBatch& keys, int dim, float* rows,
                                  const CallClock& clock) {
  KESTREL_RETURN_IF_ERROR(CheckBatch(keys, dim));
  CallLease lease(&pool_);
  CallBuffers& b = *lease;
  return Execute(PsMethod::kPull, table, PullType(table), dim, keys.unique_keys(), BatchOffsets(keys, &b.offsets),
                 nullptr, rows, clock, &b);
}

absl::Status RoutedPsClient::Push(absl::string_view table, const KeyBatch& keys, int dim, const float* grads,
                                  const CallClock& clock) {
  KESTREL_RETURN_IF_ERROR(CheckBatch(keys, dim));
  // Refuse bad gradients before anything is sent, so no server applies part of a batch it should not.
  KESTREL_RETURN_IF_ERROR(CheckGradients(table, absl::MakeConstSpan(grads, keys.num_unique() * dim), dim,
                                         [&](size_t row) { return keys.unique_keys()[row]; }));
  CallLease lease(&pool_);
  CallBuffers& b = *lease;
  return Execute(PsMethod::kPush, table, WireType(table), dim, keys.unique_keys(), BatchOffsets(keys, &b.offsets),
                 grads, nullptr, clock, &b);
}

absl::Status RoutedPsClient::PullDense(absl::string_view table, absl::Span<float> out, const CallClock& clock) {
  KESTREL_ASSIGN_OR_RETURN(TableConfig config, DenseConfig(table, out.size(), clock.clock));
  const int dim = config.dim();
  CallLease lease(&pool_);
  CallBuffers& b = *lease;
  GroupDenseBlocks(partition_, config, &b);
  b.rows.resize(b.ids.size() * dim);
  KESTREL_RETURN_IF_ERROR(Execute(PsMethod::kPullDense, table, config.wire_type(), dim, b.ids, b.offsets, nullptr,
                                  b.rows.data(), clock, &b));
  ScatterDenseBlocks(b, dim, out.data(), out.size());
  return absl::OkStatus();
}

absl::Status RoutedPsClient::PushDense(absl::string_view table, absl::Span<const float> grads,
                                       const CallClock& clock) {
  if (grads.empty()) {  // nothing to push: BSP servers get an empty part each, others nothing
    CallLease lease(&pool_);
    CallBuffers& b = *lease;
    NoDenseBlocks(partition_, &b);
    return Execute(PsMethod::kPushDense, table, WireType(table), /*dim=*/0, b.ids, b.offsets, nullptr, nullptr,
                   clock, &b);
  }
  KESTREL_ASSIGN_OR_RETURN(TableConfig config, DenseConfig(table, grads.size(), clock.clock));
  KESTREL_RETURN_IF_ERROR(CheckGradients(table, grads, config.dim(), [](size_t block) { return block; }));
  const int dim = config.dim();
  CallLease lease(&pool_);
  CallBuffers& b = *lease;
  GroupDenseBlocks(partition_, config, &b);
  GatherDenseBlocks(grads.data(), grads.size(), dim, &b);
  return Execute(PsMethod::kPushDense, table, config.wire_type(), dim, b.ids, b.offsets, b.rows.data(), nullptr,
                 clock, &b);
}

absl::StatusOr<std::vector<StatsResponse>> RoutedPsClient::Stats() {
  StatsRequest request;
  FillHeader(request.mutable_header(), /*clock=*/0);
  std::vector<StatsResponse> responses;
  KESTREL_RETURN_IF_ERROR(Broadcast(PsMethod::kStats, request, &responses));
  return responses;
}

absl::Status RoutedPsClient::CheckGradients(absl::string_view table, absl::Span<const float> grads, int dim,
                                            const std::function<uint64_t(size_t)>& id_of) {
  const int64_t bad = FirstBadGradient(grads);
  if (bad < 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "bad gradient %g for key/block 0x%016x element %d of table '%s': gradients must be finite with |g| <= %g; "
      "nothing was sent",
      grads[bad], id_of(bad / dim), bad % dim, table, kMaxGradientMagnitude));
}

absl::Status RoutedPsClient::CheckBatch(const KeyBatch& keys, int dim) const {
  KESTREL_RETURN_IF_ERROR(CheckShape(keys.num_keys(), dim));
  if (keys.num_servers() != partition_.num_servers()) {
    return absl::InvalidArgumentError(absl::StrFormat("a key batch split over %d servers, the client has %d",
                                                      keys.num_servers(), partition_.num_servers()));
  }
  return absl::OkStatus();
}

const std::vector<size_t>& RoutedPsClient::BatchOffsets(const KeyBatch& keys, std::vector<size_t>* offsets) const {
  offsets->resize(partition_.num_servers() + 1);
  for (int s = 0; s <= partition_.num_servers(); ++s) {
    (*offsets)[s] = s < partition_.num_servers() ? keys.offset_of(s) : keys.num_unique();
  }
  return *offsets;
}

ValueType RoutedPsClient::WireType(absl::string_view table) {
  absl::MutexLock lock(&configs_mu_);
  auto it = configs_.find(table);
  return it == configs_.end() ? VALUE_TYPE_FLOAT32 : it->second.wire_type();
}

ValueType RoutedPsClient::PullType(absl::string_view table) {
  absl::MutexLock lock(&configs_mu_);
  auto it = configs_.find(table);
  return it == configs_.end() ? VALUE_TYPE_FLOAT32 : PullWireType(it->second);
}

absl::StatusOr<TableConfig> RoutedPsClient::DenseConfig(absl::string_view table, size_t size, int64_t clock) {
  {
    absl::MutexLock lock(&configs_mu_);
    auto it = configs_.find(table);
    if (it == configs_.end()) {
      // Learn the table from server 0 below.
    } else if (it->second.kind() != TableConfig::DENSE) {
      return absl::InvalidArgumentError(absl::StrCat("table '", table, "' is not dense"));
    } else if (it->second.dense_size() != size) {
      return absl::InvalidArgumentError(absl::StrFormat("dense table '%s' has %d floats, the buffer %d",
                                                        table, it->second.dense_size(), size));
    } else {
      return it->second;
    }
  }
  KESTREL_RETURN_IF_ERROR(RefreshConfigs(clock));
  absl::MutexLock lock(&configs_mu_);
  auto it = configs_.find(table);
  if (it == configs_.end()) return absl::NotFoundError(absl::StrCat("table '", table, "' does not exist"));
  if (it->second.kind() != TableConfig::DENSE || it->second.dense_size() != size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "table '%s' is not a dense table of %d floats", table, size));
  }
  return it->second;
}

absl::Status RoutedPsClient::RefreshConfigs(int64_t clock) {
  DescribeTablesRequest request;
  FillHeader(request.mutable_header(), clock);
  SetOwner(request.mutable_header(), 0);
  DescribeTablesResponse response;
  KESTREL_RETURN_IF_ERROR(CallWithRetries(0, PsMethod::kDescribeTables, request, &response));
  absl::MutexLock lock(&configs_mu_);
  for (const TableDescription& t : response.tables()) configs_[t.config().name()] = t.config();
  return absl::OkStatus();
}

}  // namespace kestrel
