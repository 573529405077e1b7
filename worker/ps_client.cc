// The PsClient and PsTransport defaults every implementation shares (the raw-keys forms, the unfused Step, a
// transport's copying PullInto / PushFrom / Step), and NewPsClient: the routed client (worker/routed_ps_client.h).
#include "worker/ps_client.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "common/gradients.h"
#include "common/half.h"
#include "common/status.h"
#include "worker/ps_call_buffers.h"
#include "worker/routed_ps_client.h"

namespace kestrel {
namespace {

// The raw-keys forms' common part: checks the call, builds `keys` into leased buffers (room for the unique rows
// unless the batch is the keys themselves) and runs `call` with them.
template <typename Call>
[[nodiscard]] absl::Status WithRawKeys(absl::Span<const uint64_t> keys, int dim, const Partition& partition, Call call) {
  KESTREL_RETURN_IF_ERROR(CheckShape(keys.size(), dim));
  BufferPool<RawKeysBuffers>::Lease lease(&RawKeysPool());
  RawKeysBuffers& b = *lease;
  b.batch.Build(keys, partition);
  if (!b.batch.identity()) b.rows.resize(b.batch.num_unique() * dim);
  return call(b);
}

}  // namespace

absl::Status PsClient::Pull(absl::string_view table, absl::Span<const uint64_t> keys, int dim, float* out,
                            const CallClock& clock) {
  return WithRawKeys(keys, dim, partition(), [&](RawKeysBuffers& b) -> absl::Status {
    if (b.batch.identity()) return Pull(table, b.batch, dim, out, clock);
    KESTREL_RETURN_IF_ERROR(Pull(table, b.batch, dim, b.rows.data(), clock));
    b.batch.Scatter(b.rows.data(), dim, out);
    return absl::OkStatus();
  });
}

absl::Status PsClient::Push(absl::string_view table, absl::Span<const uint64_t> keys, int dim, const float* grads,
                            const CallClock& clock) {
  return WithRawKeys(keys, dim, partition(), [&](RawKeysBuffers& b) -> absl::Status {
    if (b.batch.identity()) return Push(table, b.batch, dim, grads, clock);
    b.batch.Reduce(grads, dim, b.rows.data());
    return Push(table, b.batch, dim, b.rows.data(), clock);
  });
}

void PsTransport::PullInto(int server, const PullRequest& request, float* out, size_t floats,
                           absl::Duration deadline, std::function<void(absl::Status)> done) {
  auto response = std::make_shared<PullResponse>();
  Call(server, PsMethod::kPull, request, response.get(), deadline,
       [response, out, floats, wire = request.value_type(), done = std::move(done)](absl::Status status) {
         const ValueType type = response->value_type();
         if (status.ok() && (type != wire || response->values().size() != floats * BytesPerValue(wire))) {
           status = absl::DataLossError(absl::StrFormat("PullResponse carries %d bytes of %s values, expected %d of %s",
                                                        response->values().size(), ValueType_Name(type), floats,
                                                        ValueType_Name(wire)));
         }
         if (status.ok()) status = DecodeValues(wire, response->values().data(), floats, 0, out);
         done(std::move(status));
       });
}

void PsTransport::PushFrom(int server, PsMethod method, const PushRequest& request, const void* values,
                           size_t bytes, absl::Duration deadline, std::function<void(absl::Status)> done) {
  struct State {
    PushRequest request;
    PushResponse response;
  };
  auto state = std::make_shared<State>();
  state->request = request;
  if (bytes > 0) state->request.mutable_values()->assign(static_cast<const char*>(values), bytes);
  Call(server, method, state->request, &state->response, deadline,
       [state, done = std::move(done)](absl::Status status) { done(std::move(status)); });
}

void PsTransport::Step(int server, std::shared_ptr<const std::string> request, absl::Span<const StepRead> reads,
                       absl::Duration deadline, std::function<void(absl::Status)> done) {
  struct State {
    StepRequest request;
    StepResponse response;
  };
  auto state = std::make_shared<State>();
  if (!state->request.ParseFromString(*request)) return done(absl::InvalidArgumentError("malformed StepRequest"));
  Call(server, PsMethod::kStep, state->request, &state->response, deadline,
       [state, reads, done = std::move(done)](absl::Status status) {
         if (status.ok()) {  // one decoding path: the answer's bytes, read as the gRPC transport reads them
           grpc::Slice bytes(state->response.SerializeAsString());
           status = ReadStepPulls(grpc::ByteBuffer(&bytes, 1), reads);
         }
         done(std::move(status));
       });
}

absl::Status PsClient::Step(absl::Span<const StepPart> parts, const CallClock& push, const CallClock& pull) {
  // Every part's gradients are checked before the first push: a bad one leaves every table as it was.
  for (const StepPart& p : parts) {
    if (!p.push) continue;
    const size_t floats = p.dense ? p.push_floats : p.push_keys->num_unique() * static_cast<size_t>(p.dim);
    if (const int64_t bad = FirstBadGradient(absl::MakeConstSpan(p.grads, floats)); bad >= 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "bad gradient %g at element %d of table '%s''s push: gradients must be finite with |g| <= %g; nothing of "
          "the step was sent", p.grads[bad], bad, p.table, kMaxGradientMagnitude));
    }
  }
  for (const StepPart& p : parts) {
    if (!p.push) continue;
    KESTREL_RETURN_IF_ERROR(p.dense ? PushDense(p.table, absl::MakeConstSpan(p.grads, p.push_floats), push)
                                    : Push(p.table, *p.push_keys, p.dim, p.grads, push));
  }
  for (const StepPart& p : parts) {
    if (!p.pull) continue;
    KESTREL_RETURN_IF_ERROR(p.dense ? PullDense(p.table, absl::MakeSpan(p.rows, p.pull_floats), pull)
                                    : Pull(p.table, *p.pull_keys, p.dim, p.rows, pull));
  }
  return absl::OkStatus();
}

std::unique_ptr<PsClient> NewPsClient(const PsClientOptions& options, Partition partition,
                                      std::unique_ptr<PsTransport> transport) {
  return std::make_unique<RoutedPsClient>(options, std::move(partition), std::move(transport));
}

}  // namespace kestrel
