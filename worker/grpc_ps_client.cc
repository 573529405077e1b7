#include "worker/grpc_ps_client.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/str_format.h"
#include "common/grpc_status.h"
#include "common/pull_wire.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps.grpc.pb.h"

namespace kestrel {
namespace {

// Carries requests with the stubs' callback API: no thread blocks per in-flight request.
class GrpcTransport final : public PsTransport {
 public:
  GrpcTransport(const PsClientOptions& options, const std::vector<std::string>& addresses,
                const std::shared_ptr<grpc::ChannelCredentials>& credentials)
      : channels_per_server_(std::max(1, options.channels_per_server)) {
    static std::atomic<int> next_client_id{0};
    const int client_id = next_client_id.fetch_add(1, std::memory_order_relaxed);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(options.max_message_bytes);
    args.SetMaxSendMessageSize(options.max_message_bytes);
    for (size_t i = 0; i < addresses.size(); ++i) {
      for (int c = 0; c < channels_per_server_; ++c) {
        // Distinct channel arguments keep each channel of each client on its own connection (gRPC shares
        // subchannels between channels with identical arguments).
        args.SetInt("kestrel.channel", static_cast<int>(i) * channels_per_server_ + c);
        args.SetInt("kestrel.client", client_id);
        auto channel = grpc::CreateCustomChannel(addresses[i], credentials, args);
        stubs_.push_back(ParameterServer::NewStub(channel));
        generic_stubs_.push_back(std::make_unique<grpc::GenericStub>(channel));
      }
    }
  }

  int num_servers() const override { return static_cast<int>(stubs_.size()) / channels_per_server_; }

  void PullInto(int server, const PullRequest& request, float* out, size_t floats, absl::Duration deadline,
                std::function<void(absl::Status)> done) override {
    struct RawCall {
      grpc::ClientContext context;
      grpc::ByteBuffer request;
      grpc::ByteBuffer response;
    };
    auto* call = new RawCall();
    call->context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    bool own_buffer;
    grpc::Status serialized = grpc::SerializationTraits<PullRequest>::Serialize(request, &call->request, &own_buffer);
    if (!serialized.ok()) {
      delete call;
      return done(FromGrpcStatus(serialized));
    }
    generic_stubs_[PickChannel(server)]->UnaryCall(
        &call->context, "/kestrel.ParameterServer/Pull", grpc::StubOptions(), &call->request, &call->response,
        [call, out, floats, type = request.value_type(), done = std::move(done)](grpc::Status status) {
          absl::Status result = FromGrpcStatus(status);
          if (result.ok()) result = ReadPullValues(call->response, out, floats, type);
          delete call;
          done(std::move(result));
        });
  }

  void PushFrom(int server, PsMethod method, const PushRequest& request, const void* values, size_t bytes,
                absl::Duration deadline, std::function<void(absl::Status)> done) override {
    // The request is its serialized fields followed by the values field, whose bytes are a slice over
    // `values` itself (protobuf fields may come in any order). `done` runs once the call has completed AND
    // gRPC has released that slice, so the caller may reuse `values` from then on.
    auto* call = new RawPush();
    call->done = std::move(done);
    call->context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    std::string head;
    request.SerializeToString(&head);
    head.push_back(static_cast<char>((4 << 3) | 2));  // field 4 (values), length-delimited
    for (uint64_t v = bytes;; v >>= 7) {
      if (v < 0x80) {
        head.push_back(static_cast<char>(v));
        break;
      }
      head.push_back(static_cast<char>((v & 0x7f) | 0x80));
    }
    if (bytes == 0) {
      call->pending.store(1);  // no values slice to wait for
      grpc::Slice slice(head);
      call->request = grpc::ByteBuffer(&slice, 1);
    } else {
      grpc::Slice slices[2] = {grpc::Slice(head),
                               grpc::Slice(const_cast<void*>(values), bytes, &RawPush::SliceReleased, call)};
      call->request = grpc::ByteBuffer(slices, 2);
    }
    generic_stubs_[PickChannel(server)]->UnaryCall(
        &call->context,
        method == PsMethod::kPushDense ? "/kestrel.ParameterServer/PushDense" : "/kestrel.ParameterServer/Push",
        grpc::StubOptions(), &call->request, &call->response, [call](grpc::Status status) {
          call->status = FromGrpcStatus(status);
          call->request.Clear();  // drops our reference to the values slice
          RawPush::Release(call);
        });
  }

  void Call(int server, PsMethod method, const google::protobuf::Message& request,
            google::protobuf::Message* response, absl::Duration deadline,
            std::function<void(absl::Status)> done) override {
    auto* context = new grpc::ClientContext();
    context->set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    auto finish = [context, done = std::move(done)](grpc::Status status) {
      delete context;
      done(FromGrpcStatus(status));
    };
    auto* stub = stubs_[PickChannel(server)]->async();
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
  // A push whose values are sent from the caller's buffer: finished when both the call has completed and
  // gRPC has released the values slice.
  struct RawPush {
    grpc::ClientContext context;
    grpc::ByteBuffer request;
    grpc::ByteBuffer response;
    absl::Status status;
    std::function<void(absl::Status)> done;
    std::atomic<int> pending{2};

    static void SliceReleased(void* p) { Release(static_cast<RawPush*>(p)); }
    static void Release(RawPush* call) {
      if (call->pending.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
      auto done = std::move(call->done);
      absl::Status status = std::move(call->status);
      delete call;
      done(std::move(status));
    }
  };

  // Spreads requests to `server` over its channels round-robin.
  int PickChannel(int server) {
    const uint64_t turn = next_channel_.fetch_add(1, std::memory_order_relaxed);
    return server * channels_per_server_ + static_cast<int>(turn % static_cast<uint64_t>(channels_per_server_));
  }

  const int channels_per_server_;
  std::vector<std::unique_ptr<grpc::GenericStub>> generic_stubs_;  // same layout as stubs_
  std::vector<std::unique_ptr<ParameterServer::Stub>> stubs_;  // channels_per_server_ per server, in order
  std::atomic<uint64_t> next_channel_{0};
};

}  // namespace

absl::StatusOr<std::unique_ptr<PsClient>> NewGrpcPsClient(const PsClientOptions& options, Partition partition,
                                                          const std::vector<std::string>& server_addresses,
                                                          std::shared_ptr<grpc::ChannelCredentials> credentials) {
  if (static_cast<int>(server_addresses.size()) != partition.num_servers()) {
    return absl::InvalidArgumentError(absl::StrFormat("%d server addresses for a %d-server partition",
                                                      server_addresses.size(), partition.num_servers()));
  }
  return NewPsClient(options, std::move(partition), std::make_unique<GrpcTransport>(
      options, server_addresses, credentials != nullptr ? credentials : grpc::InsecureChannelCredentials()));
}

}  // namespace kestrel
