#include "scheduler/server_admin_client.h"

#include <map>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "common/network_policy.h"
#include "common/status.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps.grpc.pb.h"

namespace kestrel {
namespace {

class GrpcServerAdmin final : public ServerAdmin {
 public:
  GrpcServerAdmin(std::string job_id, absl::Duration deadline, std::shared_ptr<grpc::ChannelCredentials> credentials)
      : job_id_(std::move(job_id)), deadline_(deadline), credentials_(std::move(credentials)) {}

  absl::StatusOr<ShardCheckpoint> Checkpoint(int server, const std::string& address, const std::string& name,
                                             int64_t clock, bool copy_on_write) override {
    CheckpointShardRequest request;
    request.set_name(name);
    request.set_clock(clock);
    request.set_copy_on_write(copy_on_write);
    CheckpointShardResponse response;
    KESTREL_RETURN_IF_ERROR(
        Call(&ParameterServer::Stub::Checkpoint, server, address, "checkpoint", &request, &response));
    return response.shard();
  }

  absl::StatusOr<ShardCheckpoint> AwaitCheckpoint(int server, const std::string& address,
                                                  const std::string& name) override {
    AwaitCheckpointRequest request;
    request.set_name(name);
    CheckpointShardResponse response;
    grpc::ClientContext context;
    {
      absl::MutexLock lock(&mu_);
      if (awaits_cancelled_) return absl::CancelledError("the scheduler is shutting down");
      awaits_.insert(&context);
    }
    const absl::Status status = Call(&ParameterServer::Stub::AwaitCheckpoint, server, address, "checkpoint write",
                                     &request, &response, &context);
    {
      absl::MutexLock lock(&mu_);
      awaits_.erase(&context);
    }
    if (!status.ok()) return status;
    return response.shard();
  }

  void CancelAwaits() override {
    absl::MutexLock lock(&mu_);
    awaits_cancelled_ = true;
    for (grpc::ClientContext* context : awaits_) context->TryCancel();
  }

  absl::Status Restore(int server, const std::string& address, RestoreShardRequest request) override {
    RestoreShardResponse response;
    return Call(&ParameterServer::Stub::Restore, server, address, "restore", &request, &response);
  }

  absl::StatusOr<uint64_t> CopyGroup(int source, const std::string& address, int owner, int target,
                                     const std::string& target_address) override {
    CopyGroupRequest request;
    request.set_owner(owner);
    request.set_target(target);
    request.set_target_address(target_address);
    CopyGroupResponse response;
    KESTREL_RETURN_IF_ERROR(Call(&ParameterServer::Stub::CopyGroup, source, address,
                                 absl::StrFormat("copying ranges of %d to server %d", owner, target), &request,
                                 &response));
    return response.rows();
  }

  absl::StatusOr<uint64_t> Fingerprint(int server, const std::string& address) override {
    StatsRequest request;
    request.set_fingerprints(true);
    StatsResponse response;
    KESTREL_RETURN_IF_ERROR(Call(&ParameterServer::Stub::Stats, server, address, "fingerprint", &request, &response));
    uint64_t sum = 0;
    for (const TableDescription& table : response.tables()) sum += table.fingerprint();
    return sum;
  }

  absl::StatusOr<RescaleShardResponse> Rescale(int server, const std::string& address,
                                               RescaleShardRequest request) override {
    RescaleShardResponse response;
    KESTREL_RETURN_IF_ERROR(Call(&ParameterServer::Stub::RescaleShard, server, address,
                                 absl::StrFormat("rescale %d, phase %s", request.layout_generation(),
                                                 RescaleShardRequest::Phase_Name(request.phase())),
                                 &request, &response));
    return response;
  }

 private:
  void Fill(RequestHeader* header) const {
    header->set_job_id(job_id_);
    header->set_worker_rank(-1);
  }

  // Sends `request` (its header filled here) to server `server` at `address` as `method`, within the deadline,
  // on `context` (null: one of its own); a failure names `what`, the server and its address.
  template <typename Request, typename Response>
  absl::Status Call(grpc::Status (ParameterServer::Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                    int server, const std::string& address, const std::string& what, Request* request,
                    Response* response, grpc::ClientContext* context = nullptr) {
    Fill(request->mutable_header());
    grpc::ClientContext own;
    if (context == nullptr) context = &own;
    context->set_deadline(absl::ToChronoTime(absl::Now() + deadline_));
    const absl::Status status = FromGrpcStatus((StubFor(address)->*method)(context, *request, response));
    return status.ok() ? status : Annotate(status, what, server, address);
  }

  static absl::Status Annotate(const absl::Status& status, const std::string& what, int server,
                               const std::string& address) {
    return absl::Status(status.code(),
                        absl::StrFormat("%s on server %d at %s: %s", what, server, address, status.message()));
  }

  ParameterServer::Stub* StubFor(const std::string& address) {
    absl::MutexLock lock(&mu_);
    auto& stub = stubs_[address];
    if (stub == nullptr) {
      stub = ParameterServer::NewStub(NewChannel(address, credentials_));
    }
    return stub.get();
  }

  const std::string job_id_;
  const absl::Duration deadline_;
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<ParameterServer::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
  std::set<grpc::ClientContext*> awaits_ ABSL_GUARDED_BY(mu_);  // AwaitCheckpoint calls in flight
  bool awaits_cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

std::unique_ptr<ServerAdmin> NewGrpcServerAdmin(const std::string& job_id, absl::Duration deadline,
                                              std::shared_ptr<grpc::ChannelCredentials> credentials) {
  if (credentials == nullptr) credentials = grpc::InsecureChannelCredentials();
  return std::make_unique<GrpcServerAdmin>(job_id, deadline, std::move(credentials));
}

}  // namespace kestrel
