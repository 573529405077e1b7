// The ServerAdmin (scheduler/server_admin.h) over gRPC: the ParameterServer admin calls, each with a deadline.
#ifndef KESTREL_SCHEDULER_SERVER_ADMIN_CLIENT_H_
#define KESTREL_SCHEDULER_SERVER_ADMIN_CLIENT_H_

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "grpcpp/security/credentials.h"
#include "scheduler/server_admin.h"

namespace kestrel {

// Over gRPC (ParameterServer.Checkpoint / Restore); each call has `deadline`. Channels are cached by address
// and use `credentials` (null: plaintext).
std::unique_ptr<ServerAdmin> NewGrpcServerAdmin(const std::string& job_id, absl::Duration deadline,
                                                std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

}  // namespace kestrel

#endif  // KESTREL_SCHEDULER_SERVER_ADMIN_CLIENT_H_
