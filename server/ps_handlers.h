// The ParameterServer API's request handlers over a Shard, in terms of protobuf messages only.
//
// They decode the packed wire arrays, call the Shard and encode its answer. Both the gRPC service
// (server/ps_service.h) and the in-process client transport (inprocess/local_ps_client.h) use them, so a test
// against the in-process path exercises exactly the server's decoding and validation.
//
// Thread-safe (the Shard is).
#ifndef KESTREL_SERVER_PS_HANDLERS_H_
#define KESTREL_SERVER_PS_HANDLERS_H_

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "common/limits.h"
#include "common/pull_wire.h"
#include "common/step_wire.h"
#include "proto/ps.pb.h"
#include "absl/functional/function_ref.h"
#include "common/thread_pool.h"
#include "server/shard.h"

namespace kestrel {

// The Shard's view of a request header (the job id refers into `header`).
RequestContext ContextOf(const RequestHeader& header);

// Most requests one push may be split into (PushRequest.parts): 1024 requests of up to 64 MiB each.
inline constexpr int kMaxPushParts = 1024;


// Pulls answer rows in the request's value_type (common/half.h): the Shard's fp32 rows, encoded.
[[nodiscard]] absl::Status HandlePull(Shard& shard, const PullRequest& request, PullResponse* response);
// HandlePull writing the rows where `alloc(values, dim, type)` says (values * BytesPerValue(type) bytes), once
// the request is validated (the gRPC edge writes them straight into the response buffer, see
// common/pull_wire.h; fp32 rows go there straight from the table).
[[nodiscard]] absl::Status HandlePullInto(Shard& shard, const PullRequest& request,
                            absl::FunctionRef<void*(size_t values, int dim, ValueType type)> alloc);
// Pushed gradients of any value_type are decoded to fp32 (scaled back for fp16) before the Shard applies them.
[[nodiscard]] absl::Status HandlePush(Shard& shard, const PushRequest& request, PushResponse* response);
// A push given by its fields (common/pull_wire.h): the raw Push handler passes a PushRequestView.
[[nodiscard]] absl::Status HandlePushFields(Shard& shard, bool dense, const PushFields& push, PushResponse* response);
// The same, with `checked` run once the push passed every check (Shard::CheckPush), before it is applied: a
// replicated primary forwards it to its backups there, so their applies run beside its own and a refused push
// reaches no copy.
[[nodiscard]] absl::Status HandlePushFields(Shard& shard, bool dense, const PushFields& push, PushResponse* response,
                                            absl::FunctionRef<void()> checked);
[[nodiscard]] absl::Status HandlePullDense(Shard& shard, const PullRequest& request, PullResponse* response);
[[nodiscard]] absl::Status HandlePushDense(Shard& shard, const PushRequest& request, PushResponse* response);
[[nodiscard]] absl::Status HandleCreateTable(Shard& shard, const CreateTableRequest& request, CreateTableResponse* response);
[[nodiscard]] absl::Status HandleDescribeTables(Shard& shard, const DescribeTablesRequest& request,
                                  DescribeTablesResponse* response);
[[nodiscard]] absl::Status HandleStats(Shard& shard, const StatsRequest& request, StatsResponse* response);

// A Step's pushes (StepRequest): checks the table list (at most kMaxStepTables, each once), decodes and checks
// every push (Shard::CheckPush), then applies each as a one-part Push / PushDense of header.clock: a Step
// refused by those checks changes nothing. Table i's push carries request id header.request_id + i.
// The fields are a parsed StepRequest's (StepFieldsOf) or the received buffers' (ReadStepRequest).
// `spread` (may be null): the tables' applies run there in parallel, one on the calling thread, which waits for
// the others (as separate Push calls spread over handler threads would); its tasks must never wait on the
// pool the caller runs on. Tables are independent (each has its own rows, optimizer and BSP aggregator), so the
// result is the same bits either way.
// `checked` (may be null) runs once every push passed its checks, before any is applied (a replicated primary
// forwards the Step to its backups there, so their applies run beside its own).
[[nodiscard]] absl::Status HandleStepPushes(Shard& shard, const StepFields& request, ThreadPool* spread = nullptr,
                                            absl::FunctionRef<void()> checked = [] {});
// A Step's reads, once their clocks are complete: every table with `pull`, at pull_clock, one pulls entry each.
[[nodiscard]] absl::Status HandleStepPulls(Shard& shard, const StepFields& request, StepResponseWriter* response);

}  // namespace kestrel

#endif  // KESTREL_SERVER_PS_HANDLERS_H_
