#include "scheduler/scheduler_client.h"

#include <algorithm>

#include "absl/strings/str_join.h"

#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/network_policy.h"
#include "grpcpp/grpcpp.h"
#include "proto/scheduler.grpc.pb.h"

namespace kestrel {
namespace {

class GrpcSchedulerClient final : public SchedulerClient {
 public:
  GrpcSchedulerClient(const std::string& address, const SchedulerClientOptions& options)
      : options_(options),
        stub_(Scheduler::NewStub(NewChannel(
            address, options.credentials != nullptr ? options.credentials : grpc::InsecureChannelCredentials()))) {}

  absl::StatusOr<RegisterResponse> Register(MemberRole role, const std::string& address, int id) override {
    RegisterRequest request;
    request.set_job_id(options_.job_id);
    request.set_role(role);
    request.set_address(address);
    request.set_requested_rank(id);
    RegisterResponse response;
    return Call("Register", &Scheduler::Stub::Register, request, &response, options_.rpc_deadline);
  }

  absl::StatusOr<HeartbeatResponse> Heartbeat(MemberRole role, int id, const std::string& incarnation,
                                               uint64_t routing_generation, int64_t progress) override {
    HeartbeatRequest request;
    request.set_routing_generation(routing_generation);
    request.set_progress(progress);
    request.set_job_id(options_.job_id);
    request.set_role(role);
    request.set_id(id);
    request.set_incarnation(incarnation);
    HeartbeatResponse response;
    return Call("Heartbeat", &Scheduler::Stub::Heartbeat, request, &response, options_.rpc_deadline);
  }

  absl::StatusOr<int64_t> WaitToStart(int rank, int64_t clock, uint64_t generation, const std::string& incarnation,
                                      uint64_t layout_generation, int64_t* permitted_through) override {
    WaitToStartRequest request;
    request.set_layout_generation(layout_generation);
    request.set_job_id(options_.job_id);
    request.set_rank(rank);
    request.set_clock(clock);
    request.set_generation(generation);
    request.set_incarnation(incarnation);
    WaitToStartResponse response;
    auto result = Call("WaitToStart", &Scheduler::Stub::WaitToStart, request, &response, options_.wait_deadline);
    if (!result.ok()) return result.status();
    if (permitted_through != nullptr) *permitted_through = std::max(clock, result->permitted_through());
    return result->min_clock();
  }

  absl::StatusOr<int64_t> Advance(int rank, int64_t finished, uint64_t generation, const std::string& incarnation,
                                  bool done, const WorkerState* state, uint64_t layout_generation,
                                  int64_t* permitted_through) override {
    AdvanceRequest request;
    request.set_renew(permitted_through != nullptr);
    if (state != nullptr) *request.mutable_state() = *state;
    request.set_layout_generation(layout_generation);
    request.set_job_id(options_.job_id);
    request.set_rank(rank);
    request.set_finished(finished);
    request.set_generation(generation);
    request.set_incarnation(incarnation);
    request.set_done(done);
    AdvanceResponse response;
    auto result = Call("Advance", &Scheduler::Stub::Advance, request, &response, options_.rpc_deadline);
    if (!result.ok()) return result.status();
    if (permitted_through != nullptr) {
      *permitted_through = result->has_permitted_through() ? result->permitted_through() : -1;
    }
    return result->min_clock();
  }

  absl::Status Leave(int rank, int64_t finished, uint64_t generation, const std::string& incarnation,
                     uint64_t layout_generation) override {
    AdvanceRequest request;
    request.set_layout_generation(layout_generation);
    request.set_job_id(options_.job_id);
    request.set_rank(rank);
    request.set_finished(finished);
    request.set_generation(generation);
    request.set_incarnation(incarnation);
    request.set_done(true);
    request.set_leaving(true);
    AdvanceResponse response;
    return Call("Advance", &Scheduler::Stub::Advance, request, &response, options_.rpc_deadline).status();
  }

  absl::StatusOr<DescribeResponse> Describe() override {
    DescribeRequest request;
    request.set_job_id(options_.job_id);
    DescribeResponse response;
    return Call("Describe", &Scheduler::Stub::Describe, request, &response, options_.rpc_deadline);
  }

  absl::StatusOr<RegisterResponse> Rejoin(int id, const std::string& incarnation) override {
    RejoinRequest request;
    request.set_job_id(options_.job_id);
    request.set_id(id);
    request.set_incarnation(incarnation);
    RegisterResponse response;
    return Call("Rejoin", &Scheduler::Stub::Rejoin, request, &response, options_.rpc_deadline);
  }

  absl::StatusOr<RequestRollbackResponse> RequestRollback(int id, const std::string& incarnation, uint64_t generation,
                                                          const std::string& reason) override {
    RequestRollbackRequest request;
    request.set_job_id(options_.job_id);
    request.set_id(id);
    request.set_incarnation(incarnation);
    request.set_generation(generation);
    request.set_reason(reason);
    RequestRollbackResponse response;
    return Call("RequestRollback", &Scheduler::Stub::RequestRollback, request, &response, options_.rpc_deadline);
  }

  absl::StatusOr<int64_t> RequestCheckpoint() override {
    RequestCheckpointRequest request;
    request.set_job_id(options_.job_id);
    RequestCheckpointResponse response;
    auto result =
        Call("RequestCheckpoint", &Scheduler::Stub::RequestCheckpoint, request, &response, options_.rpc_deadline);
    if (!result.ok()) return result.status();
    return result->clock();
  }

  absl::StatusOr<ScaleResponse> Scale(ScaleRequest request, absl::Duration deadline) override {
    request.set_job_id(options_.job_id);
    ScaleResponse response;
    return Call("Scale", &Scheduler::Stub::Scale, request, &response, deadline);
  }

 private:
  template <typename Request, typename Response>
  absl::StatusOr<Response> Call(const char* name,
                                grpc::Status (Scheduler::Stub::*method)(grpc::ClientContext*, const Request&,
                                                                        Response*),
                                const Request& request, Response* response, absl::Duration deadline) {
    RpcsSentCounter("scheduler", name).Increment();
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    absl::Status status = FromGrpcStatus((stub_.get()->*method)(&context, request, response));
    if (!status.ok()) return status;
    return std::move(*response);
  }

  const SchedulerClientOptions options_;
  const std::unique_ptr<Scheduler::Stub> stub_;
};

}  // namespace

std::unique_ptr<SchedulerClient> NewGrpcSchedulerClient(const std::string& address,
                                                        const SchedulerClientOptions& options) {
  return std::make_unique<GrpcSchedulerClient>(address, options);
}

bool ApplyRouting(RoutingTable& table, uint64_t generation,
                  const google::protobuf::RepeatedField<int32_t>& out_of_service) {
  const uint64_t before = table.generation();
  absl::Status status = table.Update(generation, {out_of_service.data(), static_cast<size_t>(out_of_service.size())});
  if (!status.ok()) {
    KLOG(Warning) << "ignoring the scheduler's routing: " << status;
    return false;
  }
  if (table.generation() == before) return false;
  KLOG(Info) << "routing generation " << generation << ": servers out of service ["
             << absl::StrJoin(out_of_service, ",") << "]";
  return true;
}

Heartbeater::Heartbeater(SchedulerClient* client, MemberRole role, int id, std::string incarnation,
                         absl::Duration interval, std::function<void(absl::Status)> on_refused,
                         std::function<void(const HeartbeatResponse&)> on_answer)
    : thread_([this, client, role, id, incarnation = std::move(incarnation), interval,
               on_refused = std::move(on_refused), on_answer = std::move(on_answer)] {
        while (true) {
          {
            absl::MutexLock lock(&mu_);
            mu_.AwaitWithTimeout(absl::Condition(
                                     +[](Heartbeater* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
                                       return self->stop_ || self->soon_;
                                     },
                                     this),
                                 interval);
            if (stop_) return;
            soon_ = false;
          }
          const auto sent = std::chrono::steady_clock::now();
          auto response = client->Heartbeat(role, id, incarnation, routing_generation_.load(), progress_.load());
          if (absl::IsFailedPrecondition(response.status())) {
            on_refused(response.status());
            return;
          }
          if (!response.ok()) {
            KLOG(Warning) << "heartbeat of id " << id << " failed: " << response.status();
          } else {
            answered_sent_.store(
                std::chrono::duration_cast<std::chrono::nanoseconds>(sent.time_since_epoch()).count());
            if (on_answer) on_answer(*response);
          }
        }
      }) {}

void Heartbeater::BeatSoon() {
  absl::MutexLock lock(&mu_);
  soon_ = true;
}

Heartbeater::~Heartbeater() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

}  // namespace kestrel
