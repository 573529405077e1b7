#include "client/grpc_scheduler_client.h"

#include <utility>

#include "common/grpc_status.h"
#include "common/metrics.h"
#include "common/network_policy.h"
#include "grpcpp/grpcpp.h"
#include "proto/scheduler.grpc.pb.h"

namespace kestrel {
namespace {

class GrpcSchedulerClient final : public SchedulerClient {
 public:
  GrpcSchedulerClient(const std::string& address, const SchedulerClientOptions& options,
                      std::shared_ptr<grpc::ChannelCredentials> credentials)
      : options_(options),
        stub_(Scheduler::NewStub(
            NewChannel(address, credentials != nullptr ? std::move(credentials) : grpc::InsecureChannelCredentials()))) {}

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
                                                        const SchedulerClientOptions& options,
                                                        std::shared_ptr<grpc::ChannelCredentials> credentials) {
  return std::make_unique<GrpcSchedulerClient>(address, options, std::move(credentials));
}

}  // namespace kestrel
