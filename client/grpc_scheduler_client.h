// The SchedulerClient (client/scheduler_client.h) over gRPC: one channel to kestrel_scheduler, each call with its
// deadline and counted in kestrel_rpcs_sent_total{peer="scheduler"}.
#ifndef KESTREL_CLIENT_GRPC_SCHEDULER_CLIENT_H_
#define KESTREL_CLIENT_GRPC_SCHEDULER_CLIENT_H_

#include <memory>
#include <string>

#include "client/scheduler_client.h"
#include "grpcpp/security/credentials.h"

namespace kestrel {

// `credentials`: the channel's (common/tls.h MakeChannelCredentials); null: plaintext.
std::unique_ptr<SchedulerClient> NewGrpcSchedulerClient(const std::string& address,
                                                        const SchedulerClientOptions& options,
                                                        std::shared_ptr<grpc::ChannelCredentials> credentials);

}  // namespace kestrel

#endif  // KESTREL_CLIENT_GRPC_SCHEDULER_CLIENT_H_
