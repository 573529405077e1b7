// An in-process PsClient over Shards, for tests: the same routing, splitting and scattering as the gRPC client,
// and the server's own request handlers (server/ps_handlers.h), without a network. Deadlines are ignored.
#ifndef KESTREL_WORKER_LOCAL_PS_CLIENT_H_
#define KESTREL_WORKER_LOCAL_PS_CLIENT_H_

#include <memory>
#include <vector>

#include "server/shard.h"
#include "worker/ps_client.h"

namespace kestrel {

// shards[i] must be server i of shards[0]->partition(); the Shards must outlive the client.
std::unique_ptr<PsClient> NewLocalPsClient(const PsClientOptions& options, std::vector<Shard*> shards);

}  // namespace kestrel

#endif  // KESTREL_WORKER_LOCAL_PS_CLIENT_H_
