// The PsClient that talks to kestrel_server processes over gRPC.
#ifndef KESTREL_WORKER_GRPC_PS_CLIENT_H_
#define KESTREL_WORKER_GRPC_PS_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/partition.h"
#include "grpcpp/security/credentials.h"
#include "worker/ps_client.h"

namespace kestrel {

// server_addresses[i] ("host:port") serves partition server i; their count must equal
// partition.num_servers(). Channels connect lazily: a server that is down surfaces as UNAVAILABLE on use.
// `credentials`: the channels' (common/tls.h MakeChannelCredentials); null: plaintext.
[[nodiscard]] absl::StatusOr<std::unique_ptr<PsClient>> NewGrpcPsClient(
    const PsClientOptions& options, Partition partition, const std::vector<std::string>& server_addresses,
    std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

}  // namespace kestrel

#endif  // KESTREL_WORKER_GRPC_PS_CLIENT_H_
