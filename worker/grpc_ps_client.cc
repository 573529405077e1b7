#include "worker/grpc_ps_client.h"

#include "absl/strings/str_format.h"
#include "common/grpc_status.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps.grpc.pb.h"

namespace kestrel {
namespace {

// Carries requests with the stubs' callback API: no thread blocks per in-flight request.
class GrpcTransport final : public PsTransport {
 public:
  GrpcTransport(const PsClientOptions& options, const std::vector<std::string>& addresses) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(options.max_message_bytes);
    args.SetMaxSendMessageSize(options.max_message_bytes);
    for (size_t i = 0; i < addresses.size(); ++i) {
      // A distinct channel argument per server keeps each on its own connection.
      args.SetInt("kestrel.server_index", static_cast<int>(i));
      stubs_.push_back(
          ParameterServer::NewStub(grpc::CreateCustomChannel(addresses[i], grpc::InsecureChannelCredentials(), args)));
    }
  }

  int num_servers() const override { return static_cast<int>(stubs_.size()); }

  void Call(int server, PsMethod method, const google::protobuf::Message& request,
            google::protobuf::Message* response, absl::Duration deadline,
            std::function<void(absl::Status)> done) override {
    auto* context = new grpc::ClientContext();
    context->set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    auto finish = [context, done = std::move(done)](grpc::Status status) {
      delete context;
      done(FromGrpcStatus(status));
    };
    auto* stub = stubs_[server]->async();
    switch (method) {
      case PsMethod::kPull:
        return stub->Pull(context, &MessageAs<PullRequest>(request), MessageAs<PullResponse>(response), std::move(finish));
      case PsMethod::kPush:
        return stub->Push(context, &MessageAs<PushRequest>(request), MessageAs<PushResponse>(response), std::move(finish));
      case PsMethod::kPullDense:
        return stub->PullDense(context, &MessageAs<PullRequest>(request), MessageAs<PullResponse>(response),
                               std::move(finish));
      case PsMethod::kPushDense:
        return stub->PushDense(context, &MessageAs<PushRequest>(request), MessageAs<PushResponse>(response),
                               std::move(finish));
      case PsMethod::kCreateTable:
        return stub->CreateTable(context, &MessageAs<CreateTableRequest>(request), MessageAs<CreateTableResponse>(response),
                                 std::move(finish));
      case PsMethod::kDescribeTables:
        return stub->DescribeTables(context, &MessageAs<DescribeTablesRequest>(request),
                                    MessageAs<DescribeTablesResponse>(response), std::move(finish));
      case PsMethod::kStats:
        return stub->Stats(context, &MessageAs<StatsRequest>(request), MessageAs<StatsResponse>(response), std::move(finish));
    }
  }

 private:

  std::vector<std::unique_ptr<ParameterServer::Stub>> stubs_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PsClient>> NewGrpcPsClient(const PsClientOptions& options, Partition partition,
                                                          const std::vector<std::string>& server_addresses) {
  if (static_cast<int>(server_addresses.size()) != partition.num_servers()) {
    return absl::InvalidArgumentError(absl::StrFormat("%d server addresses for a %d-server partition",
                                                      server_addresses.size(), partition.num_servers()));
  }
  return NewPsClient(options, std::move(partition), std::make_unique<GrpcTransport>(options, server_addresses));
}

}  // namespace kestrel
