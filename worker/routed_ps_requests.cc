// RoutedPsClient's requests: headers, routing to each range group's primary, a call split into requests below
// max_request_bytes and sent in waves, and the retries of requests that failed with UNAVAILABLE. See
// worker/routed_ps_client.h.
#include "worker/routed_ps_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/half.h"
#include "common/logging.h"
#include "common/retry.h"

namespace kestrel {
namespace {

bool IsPush(PsMethod m) { return m == PsMethod::kPush || m == PsMethod::kPushDense; }

// A call retried this long is logged (once).
constexpr absl::Duration kLongRetry = absl::Seconds(10);

}  // namespace

absl::Status OnServer(int server, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("server ", server, ": ", status.message()));
}

void RoutedPsClient::FillHeader(RequestHeader* header, int64_t clock) {
  header->set_job_id(options_.job_id);
  header->set_worker_rank(options_.worker_rank);
  header->set_clock(clock);
  header->set_generation(generation_.load(std::memory_order_relaxed));
  header->set_request_id(next_request_id_.fetch_add(1, std::memory_order_relaxed));
}

bool RoutedPsClient::ShouldRetry(const absl::Status& status, int attempt, absl::Time start, bool waiting) const {
  if (!IsTransient(status)) return false;  // common/retry.h: every request is idempotent
  if (attempt < options_.max_retries) return true;
  if (waiting && absl::Now() - start < options_.read_wait_timeout &&
      !(options_.give_up != nullptr && options_.give_up())) {
    return true;
  }
  return replicated_ && absl::Now() - start < options_.failover_timeout &&
         !(options_.give_up != nullptr && options_.give_up());
}

absl::Duration RoutedPsClient::Backoff(int attempt) const {
  return std::min(options_.retry_backoff * (1 << std::min(attempt, 10)),
                  std::max(options_.retry_backoff, absl::Milliseconds(500)));
}

void RoutedPsClient::CallOwner(int owner, PsMethod method, const google::protobuf::Message& request,
                               google::protobuf::Message* response, std::function<void(absl::Status)> done) {
  const int server = ServerFor(owner);
  if (server < 0) {
    return done(absl::UnavailableError(
        absl::StrFormat("every copy of the ranges of server %d is out of service: the job rolls back", owner)));
  }
  transport_->Call(server, method, request, response, options_.rpc_deadline, std::move(done));
}

void RoutedPsClient::StepOwner(int owner, std::shared_ptr<const std::string> request,
                               absl::Span<const StepRead> reads, std::function<void(absl::Status)> done) {
  const int server = ServerFor(owner);
  if (server < 0) {
    return done(absl::UnavailableError(
        absl::StrFormat("every copy of the ranges of server %d is out of service: the job rolls back", owner)));
  }
  transport_->Step(server, std::move(request), reads, options_.rpc_deadline, std::move(done));
}

absl::Status RoutedPsClient::CallWithRetries(int owner, PsMethod method, const google::protobuf::Message& request,
                                             google::protobuf::Message* response, bool waiting) {
  return WithRetries(owner, waiting, [&](std::function<void(absl::Status)> done) {
    CallOwner(owner, method, request, response, std::move(done));
  });
}

absl::Status RoutedPsClient::WithRetries(int owner, bool waiting,
                                         absl::FunctionRef<void(std::function<void(absl::Status)> done)> start) {
  absl::Status status;
  const absl::Time start_time = absl::Now();
  bool said = false;  // a call retried for long is logged once, with its last answer
  for (int attempt = 0;; ++attempt) {
    Completion done(1);
    start([&](absl::Status s) {
      status = std::move(s);
      done.Done();
    });
    done.Wait();
    if (!ShouldRetry(status, attempt, start_time, waiting)) return OnServer(owner, status);
    if (!said && absl::Now() - start_time > kLongRetry) {
      said = true;
      KLOG(Warning) << "a call to the primary of the ranges of server " << owner << " is still retried after "
                    << absl::FormatDuration(absl::Now() - start_time) << ": " << status;
    }
    absl::SleepFor(Backoff(attempt));
  }
}

absl::Status RoutedPsClient::Execute(PsMethod method, absl::string_view table, ValueType wire, int dim,
                                     absl::Span<const uint64_t> ids, const std::vector<size_t>& offsets,
                                     const float* in_rows, float* out_rows, const CallClock& call, CallBuffers* b) {
  const bool push = IsPush(method);
  const int64_t clock = call.clock;
  const bool waiting = !push && call.wait_clock.has_value();
  const size_t value_bytes = BytesPerValue(wire);
  if (value_bytes == 0) return absl::InvalidArgumentError(absl::StrCat("table '", table, "': unknown wire type"));
  const size_t row_bytes = sizeof(uint64_t) + value_bytes * static_cast<size_t>(dim);
  const size_t max_rows = std::max<size_t>(1, options_.max_request_bytes / row_bytes);
  size_t count = 0;
  for (int s = 0; s < partition_.num_servers(); ++s) {
    const size_t rows_here = offsets[s + 1] - offsets[s];
    // BSP servers need a part from every worker for every push, so an empty one goes where no key does; so
    // does a read waiting for its clocks (CallClock::wait_clock).
    const int parts = rows_here == 0 ? ((push && options_.bsp_pushes) || waiting ? 1 : 0)
                                     : static_cast<int>((rows_here + max_rows - 1) / max_rows);
    for (int seq = 0; seq < parts; ++seq) {
      const size_t first = offsets[s] + static_cast<size_t>(seq) * max_rows;
      if (count == b->rpcs.size()) b->rpcs.push_back(std::make_unique<Rpc>());
      Rpc& rpc = *b->rpcs[count++];
      rpc.owner = s;
      rpc.server = s;
      rpc.seq = seq;
      rpc.pull_into = nullptr;  // slots are reused across calls: reset every per-call field
      rpc.push_from = nullptr;
      rpc.first_row = first;
      rpc.rows = std::min(max_rows, offsets[s + 1] - first);
      auto id_bytes = absl::string_view(reinterpret_cast<const char*>(ids.data() + first),
                                        rpc.rows * sizeof(uint64_t));
      if (push) {
        FillHeader(rpc.push_request.mutable_header(), clock);
        SetOwner(rpc.push_request.mutable_header(), s);
        rpc.push_request.set_table(std::string(table));
        rpc.push_request.set_dim(dim);
        rpc.push_request.mutable_keys()->assign(id_bytes.data(), id_bytes.size());
        rpc.push_request.set_part(seq);
        rpc.push_request.set_parts(parts);
        rpc.push_request.set_value_type(wire);
        rpc.push_request.set_scale_exponent(0);
        const float* grads = in_rows + first * dim;
        const size_t n = rpc.rows * dim;
        rpc.push_bytes = n * value_bytes;
        if (rpc.rows == 0) {
          rpc.push_from = nullptr;
        } else if (wire == VALUE_TYPE_FLOAT32) {
          rpc.push_from = grads;  // sent from there, not copied
        } else {
          // Each request's own scale: its largest gradient decides, so one large row elsewhere in the call
          // does not flush this request's small gradients to zero.
          const int scale = wire == VALUE_TYPE_FLOAT16 ? Float16ScaleExponent(grads, n) : 0;
          rpc.push_request.set_scale_exponent(scale);
          rpc.wire.resize(n);
          KESTREL_RETURN_IF_ERROR(EncodeValues(wire, grads, n, scale, rpc.wire.data()));
          rpc.push_from = rpc.wire.data();
        }
      } else {
        FillHeader(rpc.pull_request.mutable_header(), clock);
        if (waiting) rpc.pull_request.mutable_header()->set_wait_clock(*call.wait_clock);
        SetOwner(rpc.pull_request.mutable_header(), s);
        rpc.pull_request.set_table(std::string(table));
        rpc.pull_request.set_dim(dim);
        rpc.pull_request.set_value_type(wire);
        rpc.pull_into = method == PsMethod::kPull ? out_rows + first * dim : nullptr;
        rpc.pull_request.mutable_keys()->assign(id_bytes.data(), id_bytes.size());
      }
    }
  }

  std::vector<Rpc*> rpcs;
  for (size_t i = 0; i < count; ++i) rpcs.push_back(b->rpcs[i].get());
  KESTREL_RETURN_IF_ERROR(Send(method, std::move(rpcs), waiting));

  if (push || method == PsMethod::kPull) return absl::OkStatus();  // kPull rows already landed (PullInto)
  for (size_t i = 0; i < count; ++i) {
    const Rpc& rpc = *b->rpcs[i];
    const std::string& values = rpc.pull_response.values();
    if (values.size() != rpc.rows * dim * value_bytes || rpc.pull_response.value_type() != wire) {
      return absl::DataLossError(absl::StrFormat(
          "server %d returned %d bytes of %s for %d rows of dim %d of table '%s' (expected %s)", rpc.server,
          values.size(), ValueType_Name(rpc.pull_response.value_type()), rpc.rows, dim, table,
          ValueType_Name(wire)));
    }
    KESTREL_RETURN_IF_ERROR(
        OnServer(rpc.server, DecodeValues(wire, values.data(), rpc.rows * dim, 0, out_rows + rpc.first_row * dim)));
  }
  return absl::OkStatus();
}

absl::Status RoutedPsClient::Send(PsMethod method, std::vector<Rpc*> pending, bool waiting) {
  const bool push = IsPush(method);
  const int window = std::max(1, options_.max_inflight_per_server);
  const absl::Time start = absl::Now();
  for (int attempt = 0; !pending.empty(); ++attempt) {
    int waves = 0;
    for (Rpc* rpc : pending) waves = std::max(waves, rpc->seq / window + 1);
    for (int wave = 0; wave < waves; ++wave) {
      std::vector<Rpc*> batch;
      for (Rpc* rpc : pending) {
        if (rpc->seq / window == wave) batch.push_back(rpc);
      }
      Completion all(static_cast<int>(batch.size()));
      for (Rpc* rpc : batch) {
        auto on_done = [rpc, &all](absl::Status s) {
          rpc->status = std::move(s);
          all.Done();
        };
        rpc->server = ServerFor(rpc->owner);  // re-routed at every attempt
        if (rpc->server < 0) {
          on_done(absl::UnavailableError(absl::StrFormat(
              "every copy of the ranges of server %d is out of service: the job rolls back", rpc->owner)));
          rpc->server = rpc->owner;  // names the group in errors
          continue;
        }
        if (push) {
          transport_->PushFrom(rpc->server, method, rpc->push_request, rpc->push_from, rpc->push_bytes,
                               options_.rpc_deadline, std::move(on_done));
          continue;
        }
        if (rpc->pull_into != nullptr) {
          transport_->PullInto(rpc->server, rpc->pull_request, rpc->pull_into,
                               rpc->rows * rpc->pull_request.dim(), options_.rpc_deadline, std::move(on_done));
          continue;
        }
        google::protobuf::Message* response =
            push ? static_cast<google::protobuf::Message*>(&rpc->push_response) : &rpc->pull_response;
        const google::protobuf::Message& request =
            push ? static_cast<const google::protobuf::Message&>(rpc->push_request) : rpc->pull_request;
        transport_->Call(rpc->server, method, request, response, options_.rpc_deadline, std::move(on_done));
      }
      all.Wait();
      // Stop at the first failure that will not be retried: later waves must not be applied after it.
      for (Rpc* rpc : batch) {
        const bool will_retry = ShouldRetry(rpc->status, attempt, start, waiting);
        if (!rpc->status.ok() && !will_retry) return OnServer(rpc->server, rpc->status);
      }
    }
    std::vector<Rpc*> retry;
    for (Rpc* rpc : pending) {
      if (rpc->status.ok()) continue;
      if (ShouldRetry(rpc->status, attempt, start, waiting)) {
        retry.push_back(rpc);
      } else {
        return OnServer(rpc->server, rpc->status);
      }
    }
    pending.swap(retry);
    if (!pending.empty()) absl::SleepFor(Backoff(attempt));
  }
  return absl::OkStatus();
}

}  // namespace kestrel
