#include "worker/grpc_ps_client.h"

#include <algorithm>
#include <array>
#include <atomic>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "common/metrics.h"
#include "common/network_policy.h"
#include "common/pull_wire.h"
#include "common/step_wire.h"
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
      : channels_per_server_(std::max(1, options.channels_per_server)),
        routing_(options.routing),
        credentials_(credentials),
        sent_{&RpcsSentCounter("server", "Pull"),       &RpcsSentCounter("server", "Push"),
              &RpcsSentCounter("server", "PullDense"),  &RpcsSentCounter("server", "PushDense"),
              &RpcsSentCounter("server", "CreateTable"), &RpcsSentCounter("server", "DescribeTables"),
              &RpcsSentCounter("server", "Stats"),       &RpcsSentCounter("server", "Step")} {
    static std::atomic<int> next_client_id{0};
    client_id_ = next_client_id.fetch_add(1, std::memory_order_relaxed);
    ApplyClientNetworkPolicy(args_);
    args_.SetMaxReceiveMessageSize(options.max_message_bytes);
    args_.SetMaxSendMessageSize(options.max_message_bytes);
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < addresses.size(); ++i) servers_.push_back(Connect(static_cast<int>(i), addresses[i]));
    if (routing_ != nullptr) seen_version_ = routing_->addresses().version();
  }

  int num_servers() const override {
    absl::ReaderMutexLock lock(&mu_);
    return static_cast<int>(servers_.size());
  }

  void PullInto(int server, const PullRequest& request, float* out, size_t floats, absl::Duration deadline,
                std::function<void(absl::Status)> done) override {
    struct RawCall {
      grpc::ClientContext context;
      grpc::ByteBuffer request;
      grpc::ByteBuffer response;
    };
    auto* call = new RawCall();
    call->context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    Sent(PsMethod::kPull);
    bool own_buffer;
    grpc::Status serialized = grpc::SerializationTraits<PullRequest>::Serialize(request, &call->request, &own_buffer);
    if (!serialized.ok()) {
      delete call;
      return done(FromGrpcStatus(serialized));
    }
    Pick(server).generic->UnaryCall(
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
    Sent(method);
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
    Pick(server).generic->UnaryCall(
        &call->context,
        method == PsMethod::kPushDense ? "/kestrel.ParameterServer/PushDense" : "/kestrel.ParameterServer/Push",
        grpc::StubOptions(), &call->request, &call->response, [call](grpc::Status status) {
          call->status = FromGrpcStatus(status);
          call->request.Clear();  // drops our reference to the values slice
          RawPush::Release(call);
        });
  }

  void Step(int server, std::shared_ptr<const std::string> request, absl::Span<const StepRead> reads,
            absl::Duration deadline, std::function<void(absl::Status)> done) override {
    struct RawStep {
      grpc::ClientContext context;
      grpc::ByteBuffer request;
      grpc::ByteBuffer response;
    };
    Sent(PsMethod::kStep);
    auto* call = new RawStep();
    call->context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    // A slice over the shared bytes (no copy), holding its own reference to them until gRPC releases it.
    auto* held = new std::shared_ptr<const std::string>(request);
    grpc::Slice slice(const_cast<char*>(request->data()), request->size(),
                      [](void* p) { delete static_cast<std::shared_ptr<const std::string>*>(p); }, held);
    call->request = grpc::ByteBuffer(&slice, 1);
    Pick(server).generic->UnaryCall(&call->context, "/kestrel.ParameterServer/Step", grpc::StubOptions(),
                                    &call->request, &call->response,
                                    [call, reads, done = std::move(done)](grpc::Status status) {
                                      absl::Status result = FromGrpcStatus(status);
                                      if (result.ok()) result = ReadStepPulls(call->response, reads);
                                      delete call;
                                      done(std::move(result));
                                    });
  }

  void Call(int server, PsMethod method, const google::protobuf::Message& request,
            google::protobuf::Message* response, absl::Duration deadline,
            std::function<void(absl::Status)> done) override {
    Sent(method);
    auto* context = new grpc::ClientContext();
    context->set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    auto finish = [context, done = std::move(done)](grpc::Status status) {
      delete context;
      done(FromGrpcStatus(status));
    };
    auto* stub = Pick(server).stub->async();
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
      case PsMethod::kStep:
        return stub->Step(context, &MessageAs<StepRequest>(request), MessageAs<StepResponse>(response), std::move(finish));
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

  void Sent(PsMethod method) { sent_[static_cast<size_t>(method)]->Increment(); }

  // The channels to one server: channels_per_server_ of them, each with its two stubs.
  struct Channels {
    std::string address;  // what they connect to
    std::vector<std::unique_ptr<ParameterServer::Stub>> stubs;
    std::vector<std::unique_ptr<grpc::GenericStub>> generic;
  };
  struct Picked {
    ParameterServer::Stub* stub;
    grpc::GenericStub* generic;
  };

  std::unique_ptr<Channels> Connect(int server, const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto out = std::make_unique<Channels>();
    out->address = address;
    for (int c = 0; c < channels_per_server_; ++c) {
      // Distinct channel arguments keep each channel of each client on its own connection (gRPC shares
      // subchannels between channels with identical arguments).
      grpc::ChannelArguments args = args_;
      args.SetInt("kestrel.channel", server * channels_per_server_ + c);
      args.SetInt("kestrel.client", client_id_);
      auto channel = grpc::CreateCustomChannel(address, credentials_, args);
      out->stubs.push_back(ParameterServer::NewStub(channel));
      out->generic.push_back(std::make_unique<grpc::GenericStub>(channel));
    }
    return out;
  }

  // One of `server`'s channels, round-robin; first reconnects to servers the routing says moved (a replacement
  // on another address). Stubs are never destroyed while the transport lives: calls in flight keep using them.
  Picked Pick(int server) {
    if (routing_ != nullptr && routing_->addresses().version() != seen_version_.load(std::memory_order_acquire)) {
      absl::MutexLock lock(&mu_);
      const uint64_t version = routing_->addresses().version();
      const std::vector<std::string> now = routing_->addresses().Last();
      for (size_t i = 0; i < now.size() && i < servers_.size(); ++i) {
        if (now[i].empty() || now[i] == servers_[i]->address) continue;
        retired_.push_back(std::move(servers_[i]));
        servers_[i] = Connect(static_cast<int>(i), now[i]);
      }
      seen_version_.store(version, std::memory_order_release);
    }
    const uint64_t turn = next_channel_.fetch_add(1, std::memory_order_relaxed);
    const size_t c = static_cast<size_t>(turn % static_cast<uint64_t>(channels_per_server_));
    absl::ReaderMutexLock lock(&mu_);  // shared: every call takes it
    const Channels& channels = *servers_[server];
    return {channels.stubs[c].get(), channels.generic[c].get()};
  }

  const int channels_per_server_;
  const std::shared_ptr<RoutingTable> routing_;  // null: the addresses never change
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  // kestrel_rpcs_sent_total{peer="server"} by PsMethod, in the enum's order.
  const std::array<prometheus::Counter*, 8> sent_;
  grpc::ChannelArguments args_;
  int client_id_ = 0;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Channels>> servers_ ABSL_GUARDED_BY(mu_);   // by server index
  std::vector<std::unique_ptr<Channels>> retired_ ABSL_GUARDED_BY(mu_);  // replaced: kept for calls in flight
  std::atomic<uint64_t> seen_version_{0};
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
