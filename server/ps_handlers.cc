#include "server/ps_handlers.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/packed.h"
#include "common/status.h"

namespace kestrel {

RequestContext ContextOf(const RequestHeader& header) {
  RequestContext ctx;
  ctx.job_id = header.job_id();
  ctx.worker_rank = header.worker_rank();
  ctx.clock = header.clock();
  ctx.request_id = header.request_id();
  ctx.generation = header.generation();
  return ctx;
}

namespace {

absl::Status CheckValueType(ValueType type) {
  if (type == VALUE_TYPE_FLOAT32) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("value_type %s is not supported yet: send VALUE_TYPE_FLOAT32", ValueType_Name(type)));
}

absl::Status Read(Shard& shard, bool dense, const PullRequest& request, PullResponse* response) {
  thread_local std::vector<uint64_t> scratch;
  KESTREL_ASSIGN_OR_RETURN(absl::Span<const uint64_t> ids,
                           shard.Count(UnpackView<uint64_t>(request.keys(), "keys", &scratch)));
  const RequestContext ctx = ContextOf(request.header());
  std::string* values = response->mutable_values();
  KESTREL_RETURN_IF_ERROR(dense ? shard.PullDense(ctx, request.table(), ids, request.dim(), values)
                                : shard.Pull(ctx, request.table(), ids, request.dim(), values));
  response->set_value_type(VALUE_TYPE_FLOAT32);
  response->set_dim(ids.empty() ? 0 : static_cast<int>(values->size() / sizeof(float) / ids.size()));
  return absl::OkStatus();
}

absl::Status Write(Shard& shard, bool dense, const PushRequest& request, PushResponse* response) {
  thread_local std::vector<uint64_t> key_scratch;
  thread_local std::vector<float> value_scratch;
  KESTREL_RETURN_IF_ERROR(shard.Count(CheckValueType(request.value_type())));
  KESTREL_ASSIGN_OR_RETURN(absl::Span<const uint64_t> ids,
                           shard.Count(UnpackView<uint64_t>(request.keys(), "keys", &key_scratch)));
  KESTREL_ASSIGN_OR_RETURN(absl::Span<const float> grads,
                           shard.Count(UnpackView<float>(request.values(), "values", &value_scratch)));
  // part/parts: which of the sender's requests for (table, clock) this is. Checked on every server, BSP or not,
  // so a malformed pair never reaches a buffer; the count is bounded so a sender cannot make a BSP server
  // buffer an unbounded number of parts.
  const int parts = std::max(1, request.parts());
  if (request.part() < 0 || request.parts() < 0 || request.part() >= parts || parts > kMaxPushParts) {
    return shard.Count(absl::InvalidArgumentError(absl::StrFormat(
        "push part %d of %d: a part is in [0, parts) and parts in [1, %d]", request.part(), request.parts(),
        kMaxPushParts)));
  }
  RequestContext ctx = ContextOf(request.header());
  ctx.part = request.part();
  ctx.parts = parts;
  KESTREL_RETURN_IF_ERROR(dense ? shard.PushDense(ctx, request.table(), ids, grads, request.dim())
                                : shard.Push(ctx, request.table(), ids, grads, request.dim()));
  response->set_rows_updated(ids.size());
  return absl::OkStatus();
}

void Describe(const TableStats& stats, TableDescription* out) {
  *out->mutable_config() = stats.config;
  out->set_rows(stats.rows);
  out->set_memory_bytes(stats.memory_bytes);
}

}  // namespace

absl::Status HandlePull(Shard& shard, const PullRequest& request, PullResponse* response) {
  return Read(shard, /*dense=*/false, request, response);
}

absl::Status HandlePullInto(Shard& shard, const PullRequest& request,
                            absl::FunctionRef<float*(size_t floats, int dim)> alloc) {
  thread_local std::vector<uint64_t> scratch;
  KESTREL_ASSIGN_OR_RETURN(absl::Span<const uint64_t> keys,
                           shard.Count(UnpackView<uint64_t>(request.keys(), "keys", &scratch)));
  return shard.Pull(ContextOf(request.header()), request.table(), keys, request.dim(), [&](size_t floats) {
    return alloc(floats, keys.empty() ? 0 : static_cast<int>(floats / keys.size()));
  });
}

absl::Status HandlePullDense(Shard& shard, const PullRequest& request, PullResponse* response) {
  return Read(shard, /*dense=*/true, request, response);
}

absl::Status HandlePush(Shard& shard, const PushRequest& request, PushResponse* response) {
  return Write(shard, /*dense=*/false, request, response);
}

absl::Status HandlePushDense(Shard& shard, const PushRequest& request, PushResponse* response) {
  return Write(shard, /*dense=*/true, request, response);
}

absl::Status HandleCreateTable(Shard& shard, const CreateTableRequest& request, CreateTableResponse* response) {
  KESTREL_ASSIGN_OR_RETURN(bool created, shard.CreateTable(ContextOf(request.header()), request.config()));
  response->set_created(created);
  return absl::OkStatus();
}

absl::Status HandleDescribeTables(Shard& shard, const DescribeTablesRequest& request,
                                  DescribeTablesResponse* response) {
  KESTREL_RETURN_IF_ERROR(shard.CheckJob(ContextOf(request.header())));
  for (const TableStats& table : shard.Stats().tables) Describe(table, response->add_tables());
  response->set_shard_index(shard.shard_index());
  for (const KeyRange& range : shard.ranges()) {
    auto* r = response->add_ranges();
    r->set_begin(range.first);
    r->set_end(range.last + 1);  // 2^64 wraps to 0, as the proto documents
  }
  return absl::OkStatus();
}

absl::Status HandleStats(Shard& shard, const StatsRequest& request, StatsResponse* response) {
  KESTREL_RETURN_IF_ERROR(shard.CheckJob(ContextOf(request.header())));
  const ShardStats stats = shard.Stats();
  response->set_pull_requests(stats.pull_requests);
  response->set_push_requests(stats.push_requests);
  response->set_keys_pulled(stats.keys_pulled);
  response->set_keys_pushed(stats.keys_pushed);
  response->set_rejected_requests(stats.rejected_requests);
  uint64_t rows = 0, bytes = 0;
  for (const TableStats& table : stats.tables) {
    rows += table.rows;
    bytes += table.memory_bytes;
    TableDescription* description = response->add_tables();
    Describe(table, description);
    if (request.fingerprints()) {
      if (const Table* t = shard.FindTable(table.config.name())) description->set_fingerprint(t->RowsFingerprint());
    }
  }
  response->set_rows(rows);
  response->set_memory_bytes(bytes);
  return absl::OkStatus();
}

}  // namespace kestrel
