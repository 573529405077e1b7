// The ParameterServer API's request handlers over a Shard, in terms of protobuf messages only.
//
// They decode the packed wire arrays, call the Shard and encode its answer. Both the gRPC service
// (server/ps_service.h) and the in-process client transport (worker/local_ps_client.h) use them, so a test
// against the in-process path exercises exactly the server's decoding and validation.
//
// Thread-safe (the Shard is).
#ifndef KESTREL_SERVER_PS_HANDLERS_H_
#define KESTREL_SERVER_PS_HANDLERS_H_

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "proto/ps.pb.h"
#include "server/shard.h"

namespace kestrel {

// The Shard's view of a request header (the job id refers into `header`).
RequestContext ContextOf(const RequestHeader& header);

// Most requests one push may be split into (PushRequest.parts): 1024 requests of up to 64 MiB each.
inline constexpr int kMaxPushParts = 1024;

absl::Status HandlePull(Shard& shard, const PullRequest& request, PullResponse* response);
// HandlePull writing the rows where `alloc(floats, dim)` says, once the request is validated (the gRPC edge
// writes them straight into the response buffer, see common/pull_wire.h).
absl::Status HandlePullInto(Shard& shard, const PullRequest& request,
                            absl::FunctionRef<float*(size_t floats, int dim)> alloc);
absl::Status HandlePush(Shard& shard, const PushRequest& request, PushResponse* response);
absl::Status HandlePullDense(Shard& shard, const PullRequest& request, PullResponse* response);
absl::Status HandlePushDense(Shard& shard, const PushRequest& request, PushResponse* response);
absl::Status HandleCreateTable(Shard& shard, const CreateTableRequest& request, CreateTableResponse* response);
absl::Status HandleDescribeTables(Shard& shard, const DescribeTablesRequest& request,
                                  DescribeTablesResponse* response);
absl::Status HandleStats(Shard& shard, const StatsRequest& request, StatsResponse* response);

}  // namespace kestrel

#endif  // KESTREL_SERVER_PS_HANDLERS_H_
