// RoutedPsClient: the PsClient that NewPsClient (worker/ps_client.h) returns, routing every call over a
// PsTransport. Internal to //worker:ps_client (its header is a private source there): everyone else uses
// NewPsClient. Its methods live in one file per concept:
//   routed_ps_client.cc    the table calls (CreateTable, Pull, Push, PullDense, PushDense, Stats): their checks,
//                          and the table configs they learn from the servers;
//   routed_ps_requests.cc  a call's requests: split below max_request_bytes, sent to each range group's primary in
//                          waves, retried on UNAVAILABLE (re-routed at every attempt); broadcasts;
//   routed_ps_step.cc      the fused Step: one request per server carrying every table's push and read.
// The buffers a call reuses are in worker/ps_call_buffers.h, the dense tensors' blocks in worker/dense_blocks.h.
//
// Thread-safe: any number of threads may call one RoutedPsClient concurrently (each call leases its own buffers;
// the table configs are guarded by configs_mu_; the generation and the request ids are atomics).
#ifndef KESTREL_WORKER_ROUTED_PS_CLIENT_H_
#define KESTREL_WORKER_ROUTED_PS_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/key_batch.h"
#include "common/partition.h"
#include "common/retry.h"
#include "common/status.h"
#include "common/step_wire.h"
#include "proto/ps.pb.h"
#include "worker/completion.h"
#include "worker/ps_call_buffers.h"
#include "worker/ps_client.h"

namespace kestrel {

// InvalidArgument unless one call can carry `keys` keys of `dim` floats.
[[nodiscard]] absl::Status CheckShape(size_t keys, int dim);

// `status` naming `server` (OK stays OK).
[[nodiscard]] absl::Status OnServer(int server, const absl::Status& status);

class RoutedPsClient final : public PsClient {
 public:
  // Routes by `partition` (which must have transport->num_servers() servers) and, for a replicated partition,
  // options.routing.
  RoutedPsClient(const PsClientOptions& options, Partition partition, std::unique_ptr<PsTransport> transport);

  const Partition& partition() const override { return partition_; }
  [[nodiscard]] absl::Status CreateTable(const TableConfig& config) override;
  [[nodiscard]] absl::Status Pull(absl::string_view table, const KeyBatch& keys, int dim, float* rows,
                    const CallClock& clock) override;
  [[nodiscard]] absl::Status Push(absl::string_view table, const KeyBatch& keys, int dim, const float* grads,
                    const CallClock& clock) override;
  [[nodiscard]] absl::Status PullDense(absl::string_view table, absl::Span<float> out, const CallClock& clock) override;
  [[nodiscard]] absl::Status PushDense(absl::string_view table, absl::Span<const float> grads, const CallClock& clock) override;
  [[nodiscard]] absl::Status Step(absl::Span<const StepPart> parts, const CallClock& push, const CallClock& pull) override;
  [[nodiscard]] absl::StatusOr<std::vector<StatsResponse>> Stats() override;
  void SetGeneration(uint64_t generation) override { generation_.store(generation, std::memory_order_relaxed); }

 private:
  using CallLease = BufferPool<CallBuffers>::Lease;
  struct StepPlan;      // one part of a fused Step, planned (routed_ps_step.cc)
  struct StepRequests;  // a fused Step's requests, one per server (routed_ps_step.cc)

  // The checks of a call, before anything is sent (routed_ps_client.cc).

  // InvalidArgument naming the first NaN/Inf/too-large gradient (common/gradients.h); `id_of(row)` names
  // the row's key (or dense block).
  [[nodiscard]] static absl::Status CheckGradients(absl::string_view table, absl::Span<const float> grads, int dim,
                                     const std::function<uint64_t(size_t)>& id_of);
  // CheckShape, and a batch built for this client's servers.
  [[nodiscard]] absl::Status CheckBatch(const KeyBatch& keys, int dim) const;
  // Where each server's keys start in keys.unique_keys(), and their end, into *offsets.
  const std::vector<size_t>& BatchOffsets(const KeyBatch& keys, std::vector<size_t>* offsets) const;

  // The table configs this client knows (routed_ps_client.cc).

  // How `table`'s values travel: its config's wire_type (fp32 for a table this client has not seen); pulls of
  // a table stored in two bytes in that type (PullWireType).
  ValueType WireType(absl::string_view table);
  ValueType PullType(absl::string_view table);
  // The config of dense table `table` of `size` floats, learnt from server 0 (at `clock`) when unknown.
  [[nodiscard]] absl::StatusOr<TableConfig> DenseConfig(absl::string_view table, size_t size, int64_t clock);
  // Learns every table's config from server 0.
  [[nodiscard]] absl::Status RefreshConfigs(int64_t clock);

  // Requests: headers, routing, retries (routed_ps_requests.cc).

  void FillHeader(RequestHeader* header, int64_t clock);
  // The server that serves `owner`'s ranges now (-1: every copy is out of service; the job rolls back).
  int ServerFor(int owner) const { return replicated_ ? options_.routing->Current()->PrimaryOfOwner(owner) : owner; }
  // Names the range group in a replicated job's requests.
  void SetOwner(RequestHeader* header, int owner) const {
    if (replicated_) header->set_owner(owner);
  }
  // Whether a request that failed with `status` on attempt `attempt` (0-based) of a call begun at `start` is
  // tried again: a transient failure (common/retry.h), within max_retries or, in a replicated job, within
  // failover_timeout.
  // A read waiting for its clocks (`waiting`) is asked again within read_wait_timeout.
  bool ShouldRetry(const absl::Status& status, int attempt, absl::Time start, bool waiting = false) const;
  absl::Duration Backoff(int attempt) const;
  // Starts one attempt of `method` on `owner`'s primary.
  void CallOwner(int owner, PsMethod method, const google::protobuf::Message& request,
                 google::protobuf::Message* response, std::function<void(absl::Status)> done);
  // Starts one attempt of a Step (a serialized StepRequest) on `owner`'s primary.
  void StepOwner(int owner, std::shared_ptr<const std::string> request, absl::Span<const StepRead> reads,
                 std::function<void(absl::Status)> done);
  // One call to `owner`'s primary, retried on UNAVAILABLE (re-routed at every attempt).
  [[nodiscard]] absl::Status CallWithRetries(int owner, PsMethod method, const google::protobuf::Message& request,
                               google::protobuf::Message* response, bool waiting = false);
  // Attempts of `start` (one call to `owner`, answering its argument) until one is not to be retried.
  [[nodiscard]] absl::Status WithRetries(int owner, bool waiting,
                           absl::FunctionRef<void(std::function<void(absl::Status)> done)> start);
  // The same request to every range group's primary in parallel (naming the group in a replicated job),
  // retried on UNAVAILABLE.
  template <typename Request, typename Response>
  [[nodiscard]] absl::Status Broadcast(PsMethod method, const Request& request, std::vector<Response>* responses);
  // Sends ids [offsets[s], offsets[s+1]) to server s, split into requests of at most max_request_bytes, all in
  // parallel, each carrying `call`'s clocks. Pushes send in_rows (one row of `dim` per id); pulls write out_rows.
  [[nodiscard]] absl::Status Execute(PsMethod method, absl::string_view table, ValueType wire, int dim,
                       absl::Span<const uint64_t> ids, const std::vector<size_t>& offsets, const float* in_rows,
                       float* out_rows, const CallClock& call, CallBuffers* b);
  // Sends `pending` in waves of at most max_inflight_per_server requests per server, and retries reads that
  // failed with UNAVAILABLE.
  [[nodiscard]] absl::Status Send(PsMethod method, std::vector<Rpc*> pending, bool waiting);

  // The fused Step's named steps, in order (routed_ps_step.cc).

  // Plans a dense or a sparse part: its value types, dim, checks, offsets and (dense) padded blocks.
  [[nodiscard]] absl::Status PlanDensePart(const StepPart& p, int64_t clock, StepPlan* plan);
  [[nodiscard]] absl::Status PlanSparsePart(const StepPart& p, StepPlan* plan);
  // One request per server, every part in it, and where its answer's rows land.
  // `plans` (one per part) hold the dense reads' blocks, where their answers land.
  [[nodiscard]] absl::Status WriteStepRequests(absl::Span<const StepPart> parts, const CallClock& push, const CallClock& pull,
                                 std::vector<StepPlan>* plans, StepRequests* requests);
  // Part `p`'s share of server `s`'s request into `t`, its read (if any) appended to `reads` (a dense one lands in
  // plan->pull_blocks); returns the bytes of that read's answer.
  static size_t WriteStepTable(const StepPart& p, int s, StepPlan* plan, StepTableWrite* t,
                               std::vector<StepRead>* reads);
  // Sends every server its request, all in parallel, then retries those that failed with UNAVAILABLE.
  [[nodiscard]] absl::Status SendStepRequests(const StepRequests& requests, bool waiting);

  const PsClientOptions options_;
  const Partition partition_;
  const bool replicated_;  // requests name their group and go to its primary (options_.routing)
  const std::unique_ptr<PsTransport> transport_;
  std::atomic<uint64_t> generation_{0};
  // Random high bits: a restarted worker's request ids never collide with its predecessor's (servers
  // deduplicate pushes by (worker, request id)).
  std::atomic<uint64_t> next_request_id_{absl::Uniform<uint64_t>(absl::BitGen(), 1, uint64_t{1} << 62)};

  BufferPool<CallBuffers> pool_;

  absl::Mutex configs_mu_;
  absl::flat_hash_map<std::string, TableConfig> configs_ ABSL_GUARDED_BY(configs_mu_);
};

template <typename Request, typename Response>
[[nodiscard]] absl::Status RoutedPsClient::Broadcast(PsMethod method, const Request& request, std::vector<Response>* responses) {
  const int n = partition_.num_servers();
  responses->assign(n, Response());
  std::vector<Request> requests(n, request);
  std::vector<absl::Status> statuses(n);
  // Each group's call runs its own retry loop; they proceed in parallel through the transport.
  Completion all(n);
  for (int s = 0; s < n; ++s) {
    SetOwner(requests[s].mutable_header(), s);
    CallOwner(s, method, requests[s], &(*responses)[s], [&, s](absl::Status status) {
      statuses[s] = std::move(status);
      all.Done();
    });
  }
  all.Wait();
  for (int s = 0; s < n; ++s) {
    if (IsTransient(statuses[s])) statuses[s] = CallWithRetries(s, method, requests[s], &(*responses)[s]);
    KESTREL_RETURN_IF_ERROR(OnServer(s, statuses[s]));
  }
  return absl::OkStatus();
}

}  // namespace kestrel

#endif  // KESTREL_WORKER_ROUTED_PS_CLIENT_H_
