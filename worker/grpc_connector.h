// The WorkerConnector (worker/connector.h) over gRPC: every channel with the same credentials.
#ifndef KESTREL_WORKER_GRPC_CONNECTOR_H_
#define KESTREL_WORKER_GRPC_CONNECTOR_H_

#include <memory>

#include "grpcpp/security/credentials.h"
#include "worker/connector.h"

namespace kestrel {

// `credentials`: every channel's (common/tls.h MakeChannelCredentials); null: plaintext.
std::shared_ptr<WorkerConnector> NewGrpcConnector(std::shared_ptr<grpc::ChannelCredentials> credentials);

}  // namespace kestrel

#endif  // KESTREL_WORKER_GRPC_CONNECTOR_H_
