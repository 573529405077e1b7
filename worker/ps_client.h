// PsClient: how workers, tools and benchmarks talk to the parameter servers.
//
// The hot path takes a KeyBatch (common/key_batch.h): the batch's keys already sorted, deduplicated and grouped
// by server with the job's Partition, once per step by the trainer (worker/prepared_batch.h). The client
// splits each server's share into requests of at most PsClientOptions::max_request_bytes, sends all requests to
// all servers in parallel, and reads or writes one row per unique key. The raw-keys forms (any order,
// duplicates allowed; tools and benchmarks) build a KeyBatch and take that same path: pulled rows are scattered
// back into the caller's order, and the gradients of duplicate keys summed (in input order, so
// deterministically) before a push. Values travel as each table's TableConfig.wire_type (fp32, fp16 or bf16,
// common/half.h): the client encodes pushed gradients (fp16 with a per-request power-of-two scale) and decodes
// pulled rows; the servers store fp32.
//
// Every Pull and Push carries its CallClock: the client keeps no clock of its own.
//
// The routing logic is written once, over a PsTransport; NewGrpcPsClient (worker/grpc_ps_client.h) talks to
// real servers, NewLocalPsClient (inprocess/local_ps_client.h) calls in-process Shards for tests. A PsClient may
// wrap another (worker/row_cache.h).
//
// Thread-safe: any number of threads may call one PsClient concurrently.
#ifndef KESTREL_WORKER_PS_CLIENT_H_
#define KESTREL_WORKER_PS_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/key_batch.h"
#include "common/partition.h"
#include "common/step_wire.h"
#include "google/protobuf/message.h"
#include "proto/ps.pb.h"

namespace kestrel {

struct PsClientOptions {
  // Job id sent with every request. Default: "kestrel".
  std::string job_id = "kestrel";
  // Sender rank sent with every request. Default: -1 (a tool, not a worker).
  int32_t worker_rank = -1;
  // Deadline of each RPC. Default: 30 s.
  absl::Duration rpc_deadline = absl::Seconds(30);
  // Requests are split so that no request or response carries more than this many bytes of keys + values
  // (a single row larger than that travels alone).
  // Default: 2 MiB (gRPC on loopback is fastest with 0.5-2 MB messages; see bench/results).
  size_t max_request_bytes = size_t{2} << 20;
  // Requests in flight to one server at a time within one call; the rest wait for the next wave.
  // Default: 8.
  int max_inflight_per_server = 8;
  // TCP connections (gRPC channels) per server; a call's requests are spread over them round-robin, so large
  // transfers use several kernel streams at once. Default: 2.
  int channels_per_server = 2;
  // BSP: every push sends each server at least one (possibly empty) part, as servers running with
  // --bsp_workers need a part from every worker for every clock. Default: false.
  bool bsp_pushes = false;
  // Largest gRPC message the client accepts (must be >= what servers send). Default: 64 MiB.
  int max_message_bytes = 64 << 20;
  // Retries of a request that failed transiently (common/retry.h: UNAVAILABLE, DEADLINE_EXCEEDED), with exponential
  // backoff from retry_backoff. Every call is safe to retry: a retried push keeps its request id (and BSP part),
  // and servers apply a push once. Default: 3 retries, 50 ms.
  int max_retries = 3;
  absl::Duration retry_backoff = absl::Milliseconds(50);
  // Replicated jobs (docs/replication.md): who serves each range group now, kept current by the caller from the
  // scheduler's announcements. Requests go to their group's primary and name the group (RequestHeader.owner).
  // Default: null, every server serves its own ranges.
  std::shared_ptr<RoutingTable> routing;
  // Replicated jobs: a request failing transiently (its server died, or it is not the primary any more) is
  // retried, re-routed at every attempt, for this long beyond max_retries: the scheduler fails a dead server over
  // within a few heartbeats. Default: 60 s.
  absl::Duration failover_timeout = absl::Seconds(60);
  // Reads with CallClock::wait_clock: how long a read is asked again while the servers answer that the clocks
  // it waits for are not complete yet (another worker is slow, or being replaced). Default: 10 min.
  absl::Duration read_wait_timeout = absl::Minutes(10);
  // Replicated jobs: asked before every retry beyond max_retries; true ends them at once (the worker sets it
  // when the scheduler moved its generation: the job rolled back, and the servers it retries may be gone for
  // good). Default: null, never.
  std::function<bool()> give_up;
};

// The RPCs of the ParameterServer service.
enum class PsMethod { kPull, kPush, kPullDense, kPushDense, kCreateTable, kDescribeTables, kStats, kStep };

// Carries one request to one server. Implementations must be thread-safe.
class PsTransport {
 public:
  virtual ~PsTransport() = default;
  virtual int num_servers() const = 0;
  // Starts `method` on `server`. `done` runs exactly once, on any thread, possibly before Call returns; it
  // must not block. `request` and `response` must stay alive until then.
  virtual void Call(int server, PsMethod method, const google::protobuf::Message& request,
                    google::protobuf::Message* response, absl::Duration deadline,
                    std::function<void(absl::Status)> done) = 0;
  // A Pull whose `floats` values land directly in `out` (decoded from request.value_type()). The default goes
  // through Call() and copies; the gRPC transport reads them straight from the received buffers.
  virtual void PullInto(int server, const PullRequest& request, float* out, size_t floats, absl::Duration deadline,
                        std::function<void(absl::Status)> done);
  // A Push (kPush or kPushDense) of `request` (values unset) whose values field is `bytes` bytes read from
  // `values` (encoded as request.value_type(); null when bytes is 0), which must stay untouched until `done`
  // runs. The default copies them into a request; the gRPC transport sends them from `values` without copying.
  virtual void PushFrom(int server, PsMethod method, const PushRequest& request, const void* values, size_t bytes,
                        absl::Duration deadline, std::function<void(absl::Status)> done);
  // A Step of `request`, a serialized StepRequest (common/step_wire.h: WriteStepRequest; shared, so that a retry
  // sends the same bytes), whose answer's reads land in `reads` (which, like the buffers they name, must stay
  // valid until `done`). The default parses it and goes through Call(kStep); the gRPC and local transports
  // carry the bytes as they are and decode the rows straight from the answer.
  virtual void Step(int server, std::shared_ptr<const std::string> request, absl::Span<const StepRead> reads,
                    absl::Duration deadline, std::function<void(absl::Status)> done);
};

// The concrete request/response type behind a transport's Message, chosen by its PsMethod.
template <typename T>
const T& MessageAs(const google::protobuf::Message& m) {
  return static_cast<const T&>(m);
}
template <typename T>
T* MessageAs(google::protobuf::Message* m) {
  return static_cast<T*>(m);
}

// What a row cache (worker/row_cache.h) needs to know of a training read.
struct CacheRead {
  // The iteration that reads the rows. Default: 0.
  int64_t read_clock = 0;
  // Rows pulled by this read hold every update of iterations below this clock (SSP: the min clock the worker
  // knew before the pull; ASP: read_clock). Default: -1.
  int64_t fresh_clock = -1;
};

// The clock one Pull or Push travels with.
struct CallClock {
  // Sent with every request of the call (RequestHeader.clock): a push's iteration; for a read, the clock the
  // servers read at (BSP servers answer a read of a clock they have applied with the rows from before it;
  // bounded tables expire rows by it). Default: 0 (tools).
  int64_t clock = 0;
  // Set on a training read that a row cache may answer from rows fresh enough for it; unset, the read goes to
  // the servers (evaluations, tools). Clients without a cache ignore it. Default: unset.
  std::optional<CacheRead> cache;
  // Server-enforced clocks (server/read_gate.h), reads only: the servers answer once every worker's updates of
  // clocks < wait_clock are in (RequestHeader.wait_clock). Such a read goes to every server, empty where it has
  // no key, so each server knows this worker finished the clocks before it (see the pushes' empty parts), and
  // a server's "still waiting" answer is asked again for up to read_wait_timeout. Default: unset, no wait.
  std::optional<int64_t> wait_clock;
};

// One table's part of a Step: its push of the step's clock and its read of the next iteration.
struct StepPart {
  std::string table;
  bool dense = false;  // a dense tensor: `grads` / `rows` hold the whole tensor
  int dim = 0;         // sparse: floats per row
  // The push: sparse, one gradient row of dim per unique key of *push_keys (in unique_keys() order); dense,
  // push_floats floats (0: the worker's empty part). Default: no push.
  bool push = false;
  const KeyBatch* push_keys = nullptr;
  const float* grads = nullptr;
  size_t push_floats = 0;
  // The read: sparse, one row per unique key of *pull_keys into `rows`; dense, pull_floats floats into `rows`.
  // Default: no read.
  bool pull = false;
  const KeyBatch* pull_keys = nullptr;
  float* rows = nullptr;
  size_t pull_floats = 0;
};

class PsClient {
 public:
  virtual ~PsClient() = default;

  // The partition keys are routed by: every KeyBatch handed to this client must be built with it.
  virtual const Partition& partition() const = 0;

  // Creates the table on every server (idempotent for an identical config). Its requests carry clock 0.
  [[nodiscard]] virtual absl::Status CreateTable(const TableConfig& config) = 0;
  // Pulls one row of `dim` floats per unique key of `keys` into `rows` (keys.num_unique() * dim floats), in
  // keys.unique_keys() order.
  [[nodiscard]] virtual absl::Status Pull(absl::string_view table, const KeyBatch& keys, int dim, float* rows,
                            const CallClock& clock) = 0;
  // Pushes one gradient row of `dim` floats per unique key of `keys` (keys.num_unique() * dim floats, in
  // keys.unique_keys() order). Gradients are checked (finite, |g| <= kMaxGradientMagnitude) before anything is
  // sent. A push spanning several servers is not atomic: if one server fails (down, or refusing its share) the
  // others may have applied theirs; the error names the server. Pushes are idempotent on the servers (by
  // request id, and per (worker, clock, part) in BSP), so retrying is safe.
  [[nodiscard]] virtual absl::Status Push(absl::string_view table, const KeyBatch& keys, int dim, const float* grads,
                            const CallClock& clock) = 0;
  // Pulls the whole dense tensor (its dense_size floats) into `out`.
  [[nodiscard]] virtual absl::Status PullDense(absl::string_view table, absl::Span<float> out, const CallClock& clock) = 0;
  // Pushes a gradient for the whole dense tensor. An empty `grads` pushes nothing (a worker with an empty batch):
  // BSP servers still get this worker's part of the clock, empty.
  [[nodiscard]] virtual absl::Status PushDense(absl::string_view table, absl::Span<const float> grads,
                                 const CallClock& clock) = 0;
  // One training step: every part's push at `push` (a clock), then every part's read at `pull` (its clock,
  // wait_clock and cache). The default makes the Push / PushDense calls, then the Pull / PullDense calls; the
  // routed client sends one ParameterServer.Step per server instead (each server gets every table's part,
  // empty where it has no key; not in a replicated job), answered once the read's clocks are complete.
  [[nodiscard]] virtual absl::Status Step(absl::Span<const StepPart> parts, const CallClock& push, const CallClock& pull);
  // Every server's statistics, in server order. Its requests carry clock 0.
  [[nodiscard]] virtual absl::StatusOr<std::vector<StatsResponse>> Stats() = 0;
  // The job generation this worker registered at (its RegisterResponse view's generation), sent with later
  // requests: servers refuse it once the worker's rank has registered again (this process was superseded).
  virtual void SetGeneration(uint64_t generation) = 0;

  // The raw-keys forms: keys.size() keys in any order, duplicates allowed. Pull writes keys.size() rows into
  // `out` in the order of `keys`; Push sums the gradient rows of duplicate keys (in input order) and pushes
  // one row per unique key. Both build a KeyBatch with partition() and call the forms above.
  [[nodiscard]] absl::Status Pull(absl::string_view table, absl::Span<const uint64_t> keys, int dim, float* out,
                    const CallClock& clock = {});
  [[nodiscard]] absl::Status Push(absl::string_view table, absl::Span<const uint64_t> keys, int dim, const float* grads,
                    const CallClock& clock = {});
};

// A PsClient over `transport`, routing by `partition` (which must have transport->num_servers() servers) and,
// for a replicated partition, options.routing.
std::unique_ptr<PsClient> NewPsClient(const PsClientOptions& options, Partition partition,
                                      std::unique_ptr<PsTransport> transport);

}  // namespace kestrel

#endif  // KESTREL_WORKER_PS_CLIENT_H_
