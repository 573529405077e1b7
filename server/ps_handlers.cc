#include "server/ps_handlers.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/blocking_counter.h"
#include "common/half.h"
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

// `bytes` as `n` values of `type` (scaled by 2^scale_exponent for fp16), decoded into fp32: a view of `bytes`
// itself for aligned fp32, else `scratch`.
[[nodiscard]] absl::StatusOr<absl::Span<const float>> DecodeView(absl::string_view bytes, ValueType type, int scale_exponent,
                                                   std::vector<float>* scratch) {
  KESTREL_RETURN_IF_ERROR(CheckValueType(type, "values"));
  if (type == VALUE_TYPE_FLOAT32) {
    if (scale_exponent != 0) return absl::InvalidArgumentError("scale_exponent is for fp16 values only");
    return UnpackView<float>(bytes, "values", scratch);
  }
  const size_t width = BytesPerValue(type);
  if (bytes.size() % width != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("values: %d bytes is no whole number of %d-byte %s values", bytes.size(), width,
                        ValueType_Name(type)));
  }
  thread_local std::string aligned;
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(uint16_t) != 0) {  // halves are read 2-byte aligned
    aligned.assign(bytes.data(), bytes.size());
    bytes = aligned;
  }
  scratch->resize(bytes.size() / width);
  KESTREL_RETURN_IF_ERROR(DecodeValues(type, bytes.data(), scratch->size(), scale_exponent, scratch->data()));
  return absl::Span<const float>(*scratch);
}

absl::Status Read(Shard& shard, bool dense, const PullRequest& request, PullResponse* response) {
  thread_local std::vector<uint64_t> scratch;
  KESTREL_RETURN_IF_ERROR(shard.Count(CheckValueType(request.value_type(), "the pull's value_type")));
  KESTREL_ASSIGN_OR_RETURN(absl::Span<const uint64_t> ids,
                           shard.Count(UnpackView<uint64_t>(request.keys(), "keys", &scratch)));
  const RequestContext ctx = ContextOf(request.header());
  std::string* values = response->mutable_values();
  KESTREL_RETURN_IF_ERROR(dense ? shard.PullDense(ctx, request.table(), ids, request.dim(), values)
                                : shard.Pull(ctx, request.table(), ids, request.dim(), values));
  const size_t n = values->size() / sizeof(float);
  if (request.value_type() != VALUE_TYPE_FLOAT32) {
    std::string encoded(n * BytesPerValue(request.value_type()), '\0');
    KESTREL_RETURN_IF_ERROR(shard.Count(
        EncodeValues(request.value_type(), reinterpret_cast<const float*>(values->data()), n, 0, encoded.data())));
    values->swap(encoded);
  }
  response->set_value_type(request.value_type());
  response->set_dim(ids.empty() ? 0 : static_cast<int>(n / ids.size()));
  return absl::OkStatus();
}

absl::Status Write(Shard& shard, bool dense, const PushRequest& request, PushResponse* response) {
  PushFields push;
  push.header = &request.header();
  push.table = request.table();
  push.keys = request.keys();
  push.values = request.values();
  push.value_type = request.value_type();
  push.dim = request.dim();
  push.part = request.part();
  push.parts = request.parts();
  push.scale_exponent = request.scale_exponent();
  return HandlePushFields(shard, dense, push, response);
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

namespace {

// HandlePushFields; `checked` (may be null) runs once the push passed Shard::CheckPush, before it is applied.
absl::Status PushFieldsChecked(Shard& shard, bool dense, const PushFields& push, PushResponse* response,
                               const absl::FunctionRef<void()>* checked) {
  thread_local std::vector<uint64_t> key_scratch;
  thread_local std::vector<float> value_scratch;
  KESTREL_ASSIGN_OR_RETURN(absl::Span<const uint64_t> ids,
                           shard.Count(UnpackView<uint64_t>(push.keys, "keys", &key_scratch)));
  KESTREL_ASSIGN_OR_RETURN(absl::Span<const float> grads,
                           shard.Count(DecodeView(push.values, push.value_type, push.scale_exponent, &value_scratch)));
  // part/parts: which of the sender's requests for (table, clock) this is. Checked on every server, BSP or not,
  // so a malformed pair never reaches a buffer; the count is bounded so a sender cannot make a BSP server
  // buffer an unbounded number of parts.
  const int parts = std::max(1, push.parts);
  if (push.part < 0 || push.parts < 0 || push.part >= parts || parts > kMaxPushParts) {
    return shard.Count(absl::InvalidArgumentError(absl::StrFormat(
        "push part %d of %d: a part is in [0, parts) and parts in [1, %d]", push.part, push.parts, kMaxPushParts)));
  }
  static const RequestHeader kNoHeader;
  RequestContext ctx = ContextOf(push.header != nullptr ? *push.header : kNoHeader);
  ctx.part = push.part;
  ctx.parts = parts;
  if (checked != nullptr) {
    KESTREL_RETURN_IF_ERROR(shard.CheckPush(ctx, push.table, dense ? TableConfig::DENSE : TableConfig::SPARSE, ids,
                                            grads, push.dim));
    (*checked)();
  }
  KESTREL_RETURN_IF_ERROR(dense ? shard.PushDense(ctx, push.table, ids, grads, push.dim)
                                : shard.Push(ctx, push.table, ids, grads, push.dim));
  response->set_rows_updated(ids.size());
  return absl::OkStatus();
}

}  // namespace

absl::Status HandlePushFields(Shard& shard, bool dense, const PushFields& push, PushResponse* response) {
  return PushFieldsChecked(shard, dense, push, response, nullptr);
}

absl::Status HandlePushFields(Shard& shard, bool dense, const PushFields& push, PushResponse* response,
                              absl::FunctionRef<void()> checked) {
  return PushFieldsChecked(shard, dense, push, response, &checked);
}

namespace {

// A sparse read's rows of `keys` (packed) at `header`, written where `alloc` says.
[[nodiscard]] absl::Status PullRowsInto(Shard& shard, const RequestHeader& header, absl::string_view table, absl::string_view keys,
                          int dim, ValueType type, absl::FunctionRef<void*(size_t values, int dim, ValueType type)> alloc) {
  thread_local std::vector<uint64_t> scratch;
  thread_local std::vector<float> rows;
  KESTREL_RETURN_IF_ERROR(shard.Count(CheckValueType(type, "the pull's value_type")));
  KESTREL_ASSIGN_OR_RETURN(absl::Span<const uint64_t> unpacked,
                           shard.Count(UnpackView<uint64_t>(keys, "keys", &scratch)));
  auto dim_of = [&unpacked](size_t n) { return unpacked.empty() ? 0 : static_cast<int>(n / unpacked.size()); };
  if (type == VALUE_TYPE_FLOAT32) {  // straight from the table into the caller's buffer
    return shard.Pull(ContextOf(header), table, unpacked, dim, [&](size_t floats) {
      return static_cast<float*>(alloc(floats, dim_of(floats), type));
    });
  }
  KESTREL_RETURN_IF_ERROR(shard.Pull(ContextOf(header), table, unpacked, dim, [&](size_t floats) {
    rows.resize(floats);
    return rows.data();
  }));
  void* out = alloc(rows.size(), dim_of(rows.size()), type);
  return shard.Count(EncodeValues(type, rows.data(), rows.size(), 0, out));
}

}  // namespace

absl::Status HandlePullInto(Shard& shard, const PullRequest& request,
                            absl::FunctionRef<void*(size_t values, int dim, ValueType type)> alloc) {
  return PullRowsInto(shard, request.header(), request.table(), request.keys(), request.dim(), request.value_type(),
                      alloc);
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
  response->set_owner(shard.owner());
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
  response->set_complete_clocks(shard.CompleteClocksOf(request.header().worker_rank()));
  return absl::OkStatus();
}

absl::Status HandleStepPushes(Shard& shard, const StepFields& request, ThreadPool* spread,
                              absl::FunctionRef<void()> checked) {
  if (request.tables.size() > static_cast<size_t>(kMaxStepTables)) {
    return shard.Count(absl::InvalidArgumentError(
        absl::StrFormat("a step names %d tables, at most %d", request.tables.size(), kMaxStepTables)));
  }
  for (size_t i = 0; i < request.tables.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (request.tables[i].table == request.tables[j].table) {
        return shard.Count(absl::InvalidArgumentError(
            absl::StrFormat("a step names table '%s' twice", request.tables[i].table.substr(0, 64))));
      }
    }
  }
  // Each table's push is its own request: id header.request_id + its index (the client reserves
  // kMaxStepTables ids per Step), so a retried Step repeats every id and each push is applied once. Every push
  // is decoded and checked before any is applied: a refused Step changes nothing.
  struct Decoded {
    std::vector<uint64_t> key_scratch;
    std::vector<float> value_scratch;
    absl::Span<const uint64_t> ids;
    absl::Span<const float> grads;
  };
  thread_local std::vector<Decoded> decoded;
  decoded.resize(std::max(decoded.size(), request.tables.size()));
  RequestHeader header = *request.header;
  auto context = [&](size_t i) {
    header.set_request_id(request.header->request_id() == 0 ? 0 : request.header->request_id() + i);
    RequestContext ctx = ContextOf(header);
    ctx.part = 0;
    ctx.parts = 1;
    return ctx;
  };
  for (size_t i = 0; i < request.tables.size(); ++i) {
    const StepTableFields& t = request.tables[i];
    if (!t.push) continue;
    Decoded& d = decoded[i];
    KESTREL_ASSIGN_OR_RETURN(d.ids, shard.Count(UnpackView<uint64_t>(t.push_keys, "keys", &d.key_scratch)));
    KESTREL_ASSIGN_OR_RETURN(
        d.grads, shard.Count(DecodeView(t.push_values, t.push_type, t.scale_exponent, &d.value_scratch)));
    KESTREL_RETURN_IF_ERROR(shard.CheckPush(context(i), t.table, t.dense ? TableConfig::DENSE : TableConfig::SPARSE,
                                            d.ids, d.grads, t.dim));
  }
  thread_local std::vector<size_t> pushes;
  pushes.clear();
  for (size_t i = 0; i < request.tables.size(); ++i) {
    if (request.tables[i].push) pushes.push_back(i);
  }
  checked();
  // Everything is checked: an apply fails only when the shard itself does (then it refuses all until a restore).
  std::vector<RequestContext> contexts(request.tables.size());
  for (size_t i : pushes) contexts[i] = context(i);
  // Thread-locals named in a lambda are the running thread's: the spread tasks read the caller's through these.
  const std::vector<Decoded>& rows = decoded;
  const std::vector<size_t>& order = pushes;
  auto apply = [&](size_t i) {
    const StepTableFields& t = request.tables[i];
    const Decoded& d = rows[i];
    return t.dense ? shard.PushDense(contexts[i], t.table, d.ids, d.grads, t.dim)
                   : shard.Push(contexts[i], t.table, d.ids, d.grads, t.dim);
  };
  if (spread == nullptr || pushes.size() < 2) {
    for (size_t i : pushes) KESTREL_RETURN_IF_ERROR(apply(i));
    return absl::OkStatus();
  }
  std::vector<absl::Status> applied(pushes.size());
  absl::BlockingCounter others(static_cast<int>(pushes.size()) - 1);
  for (size_t k = 1; k < pushes.size(); ++k) {
    spread->Schedule([&, k] {
      applied[k] = apply(order[k]);
      others.DecrementCount();
    });
  }
  applied[0] = apply(pushes[0]);
  others.Wait();
  for (const absl::Status& status : applied) KESTREL_RETURN_IF_ERROR(status);
  return absl::OkStatus();
}

absl::Status HandleStepPulls(Shard& shard, const StepFields& request, StepResponseWriter* response) {
  RequestHeader header = *request.header;
  header.set_clock(request.pull_clock);
  for (const StepTableFields& t : request.tables) {
    if (!t.pull) continue;
    if (!t.dense) {
      KESTREL_RETURN_IF_ERROR(PullRowsInto(shard, header, t.table, t.pull_keys, t.dim, t.pull_type,
                                           [response](size_t values, int dim, ValueType type) {
                                             return response->AddPull(values, dim, type);
                                           }));
      continue;
    }
    PullRequest pull;
    *pull.mutable_header() = header;
    pull.set_table(std::string(t.table));
    pull.set_keys(std::string(t.pull_keys));
    pull.set_dim(t.dim);
    pull.set_value_type(t.pull_type);
    PullResponse answer;
    KESTREL_RETURN_IF_ERROR(HandlePullDense(shard, pull, &answer));
    response->AddPull(answer);
  }
  return absl::OkStatus();
}

}  // namespace kestrel
