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
        return done(HandlePull(shard, MessageAs<PullRequest>(request), MessageAs<PullResponse>(response)));
      case PsMethod::kPush:
        return done(HandlePush(shard, MessageAs<PushRequest>(request), MessageAs<PushResponse>(response)));
      case PsMethod::kPullDense:
        return done(HandlePullDense(shard, MessageAs<PullRequest>(request), MessageAs<PullResponse>(response)));
      case PsMethod::kPushDense:
        return done(HandlePushDense(shard, MessageAs<PushRequest>(request), MessageAs<PushResponse>(response)));
      case PsMethod::kCreateTable:
        return done(HandleCreateTable(shard, MessageAs<CreateTableRequest>(request), MessageAs<CreateTableResponse>(response)));
      case PsMethod::kDescribeTables:
        return done(HandleDescribeTables(shard, MessageAs<DescribeTablesRequest>(request),
                                         MessageAs<DescribeTablesResponse>(response)));
      case PsMethod::kStats:
        return done(HandleStats(shard, MessageAs<StatsRequest>(request), MessageAs<StatsResponse>(response)));
    }
  }

 private:

  const std::vector<Shard*> shards_;
};

}  // namespace

std::unique_ptr<PsClient> NewLocalPsClient(const PsClientOptions& options, std::vector<Shard*> shards) {
  Partition partition = shards.front()->partition();
  return NewPsClient(options, std::move(partition), std::make_unique<LocalTransport>(std::move(shards)));
}

}  // namespace kestrel
