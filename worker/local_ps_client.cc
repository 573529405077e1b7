#include "worker/local_ps_client.h"

#include "server/ps_handlers.h"

namespace kestrel {
namespace {

class LocalTransport final : public PsTransport {
 public:
  explicit LocalTransport(std::vector<Shard*> shards) : shards_(std::move(shards)) {}

  int num_servers() const override { return static_cast<int>(shards_.size()); }

  void Call(int server, PsMethod method, const google::protobuf::Message& request,
            google::protobuf::Message* response, absl::Duration,
            std::function<void(absl::Status)> done) override {
    Shard& shard = *shards_[server];
    switch (method) {
      case PsMethod::kPull:
        return done(HandlePull(shard, Cast<PullRequest>(request), Cast<PullResponse>(response)));
      case PsMethod::kPush:
        return done(HandlePush(shard, Cast<PushRequest>(request), Cast<PushResponse>(response)));
      case PsMethod::kPullDense:
        return done(HandlePullDense(shard, Cast<PullRequest>(request), Cast<PullResponse>(response)));
      case PsMethod::kPushDense:
        return done(HandlePushDense(shard, Cast<PushRequest>(request), Cast<PushResponse>(response)));
      case PsMethod::kCreateTable:
        return done(HandleCreateTable(shard, Cast<CreateTableRequest>(request), Cast<CreateTableResponse>(response)));
      case PsMethod::kDescribeTables:
        return done(HandleDescribeTables(shard, Cast<DescribeTablesRequest>(request),
                                         Cast<DescribeTablesResponse>(response)));
      case PsMethod::kStats:
        return done(HandleStats(shard, Cast<StatsRequest>(request), Cast<StatsResponse>(response)));
    }
  }

 private:
  template <typename T>
  static const T& Cast(const google::protobuf::Message& m) {
    return static_cast<const T&>(m);
  }
  template <typename T>
  static T* Cast(google::protobuf::Message* m) {
    return static_cast<T*>(m);
  }

  const std::vector<Shard*> shards_;
};

}  // namespace

std::unique_ptr<PsClient> NewLocalPsClient(const PsClientOptions& options, std::vector<Shard*> shards) {
  Partition partition = shards.front()->partition();
  return NewPsClient(options, std::move(partition), std::make_unique<LocalTransport>(std::move(shards)));
}

}  // namespace kestrel
