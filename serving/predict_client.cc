#include "serving/predict_client.h"

#include <utility>

#include "common/grpc_status.h"
#include "common/status.h"
#include "grpcpp/grpcpp.h"
#include "proto/serving.grpc.pb.h"

namespace kestrel {
namespace {

class GrpcPredictClient final : public PredictClient {
 public:
  GrpcPredictClient(std::shared_ptr<grpc::Channel> channel, absl::Duration timeout)
      : stub_(Predictor::NewStub(std::move(channel))), timeout_(timeout) {}

  absl::StatusOr<PredictResponse> Predict(absl::Span<const std::string> lines) override {
    PredictRequest request;
    request.mutable_lines()->Reserve(static_cast<int>(lines.size()));
    for (const std::string& line : lines) request.add_lines(line);
    PredictResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
    KESTREL_RETURN_IF_ERROR(FromGrpcStatus(stub_->Predict(&context, request, &response)));
    return response;
  }

  absl::StatusOr<ModelStatusResponse> ModelStatus() override {
    ModelStatusResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
    KESTREL_RETURN_IF_ERROR(FromGrpcStatus(stub_->ModelStatus(&context, ModelStatusRequest(), &response)));
    return response;
  }

 private:
  const std::unique_ptr<Predictor::Stub> stub_;
  const absl::Duration timeout_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PredictClient>> NewPredictClient(const PredictClientOptions& options) {
  if (options.address.empty()) return absl::InvalidArgumentError("give the prediction service's address");
  if (options.timeout <= absl::ZeroDuration()) return absl::InvalidArgumentError("the call timeout must be positive");
  KESTREL_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials, MakeChannelCredentials(options.tls));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxPredictMessageBytes);
  args.SetMaxSendMessageSize(kMaxPredictMessageBytes);
  return std::make_unique<GrpcPredictClient>(grpc::CreateCustomChannel(options.address, credentials, args),
                                             options.timeout);
}

}  // namespace kestrel
