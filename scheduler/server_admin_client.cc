#include "scheduler/server_admin_client.h"

#include <map>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "common/network_policy.h"
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
    Fill(request.mutable_header());
    request.set_name(name);
    request.set_clock(clock);
    request.set_copy_on_write(copy_on_write);
    CheckpointShardResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + deadline_));
    absl::Status status = FromGrpcStatus(StubFor(address)->Checkpoint(&context, request, &response));
    if (!status.ok()) return Annotate(status, "checkpoint", server, address);
    return response.shard();
  }

  absl::StatusOr<ShardCheckpoint> AwaitCheckpoint(int server, const std::string& address,
                                                  const std::string& name) override {
    AwaitCheckpointRequest request;
    Fill(request.mutable_header());
    request.set_name(name);
    CheckpointShardResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + deadline_));
    {
      absl::MutexLock lock(&mu_);
      if (awaits_cancelled_) return absl::CancelledError("the scheduler is shutting down");
      awaits_.insert(&context);
    }
    absl::Status status = FromGrpcStatus(StubFor(address)->AwaitCheckpoint(&context, request, &response));
    {
      absl::MutexLock lock(&mu_);
      awaits_.erase(&context);
    }
    if (!status.ok()) return Annotate(status, "checkpoint write", server, address);
    return response.shard();
  }

  void CancelAwaits() override {
    absl::MutexLock lock(&mu_);
    awaits_cancelled_ = true;
    for (grpc::ClientContext* context : awaits_) context->TryCancel();
  }

  absl::Status Restore(int server, const std::string& address, RestoreShardRequest request) override {
    Fill(request.mutable_header());
    RestoreShardResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + deadline_));
    absl::Status status = FromGrpcStatus(StubFor(address)->Restore(&context, request, &response));
    return status.ok() ? status : Annotate(status, "restore", server, address);
  }

  absl::StatusOr<uint64_t> CopyGroup(int source, const std::string& address, int owner, int target,
                                     const std::string& target_address) override {
    CopyGroupRequest request;
    Fill(request.mutable_header());
    request.set_owner(owner);
    request.set_target(target);
    request.set_target_address(target_address);
    CopyGroupResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + deadline_));
    absl::Status status = FromGrpcStatus(StubFor(address)->CopyGroup(&context, request, &response));
    if (!status.ok()) return Annotate(status, absl::StrFormat("copying ranges of %d to server %d", owner, target).c_str(),
                                      source, address);
    return response.rows();
  }

  absl::StatusOr<uint64_t> Fingerprint(int server, const std::string& address) override {
    StatsRequest request;
    Fill(request.mutable_header());
    request.set_fingerprints(true);
    StatsResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + deadline_));
    absl::Status status = FromGrpcStatus(StubFor(address)->Stats(&context, request, &response));
    if (!status.ok()) return Annotate(status, "fingerprint", server, address);
    uint64_t sum = 0;
    for (const TableDescription& table : response.tables()) sum += table.fingerprint();
    return sum;
  }

  absl::StatusOr<RescaleShardResponse> Rescale(int server, const std::string& address,
                                               RescaleShardRequest request) override {
    Fill(request.mutable_header());
    RescaleShardResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + deadline_));
    absl::Status status = FromGrpcStatus(StubFor(address)->RescaleShard(&context, request, &response));
    if (!status.ok()) {
      return Annotate(status,
                      absl::StrFormat("rescale %d, phase %s", request.layout_generation(),
                                      RescaleShardRequest::Phase_Name(request.phase()))
                          .c_str(),
                      server, address);
    }
    return response;
  }

 private:
  void Fill(RequestHeader* header) const {
    header->set_job_id(job_id_);
    header->set_worker_rank(-1);
  }

  static absl::Status Annotate(const absl::Status& status, const char* what, int server, const std::string& address) {
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
