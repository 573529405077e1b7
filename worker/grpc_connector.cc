#include "worker/grpc_connector.h"

#include <utility>

#include "client/grpc_scheduler_client.h"
#include "worker/grpc_ps_client.h"

namespace kestrel {
namespace {

class GrpcConnector final : public WorkerConnector {
 public:
  explicit GrpcConnector(std::shared_ptr<grpc::ChannelCredentials> credentials)
      : credentials_(std::move(credentials)) {}

  std::unique_ptr<SchedulerClient> Scheduler(const std::string& address,
                                             const SchedulerClientOptions& options) override {
    return NewGrpcSchedulerClient(address, options, credentials_);
  }
  absl::StatusOr<std::unique_ptr<PsClient>> Servers(const PsClientOptions& options, Partition partition,
                                                    const std::vector<std::string>& addresses) override {
    return NewGrpcPsClient(options, std::move(partition), addresses, credentials_);
  }

 private:
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
};

}  // namespace

std::shared_ptr<WorkerConnector> NewGrpcConnector(std::shared_ptr<grpc::ChannelCredentials> credentials) {
  return std::make_shared<GrpcConnector>(std::move(credentials));
}

}  // namespace kestrel
