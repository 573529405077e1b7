// An in-process PsClient over Shards (tests, kestrel_worker --local, the benchmarks' baseline): the same
// routing, splitting and scattering as the gRPC client, and the server's own request handlers
// (server/ps_handlers.h), without a network. Pulled rows go straight from the table into the caller's buffer.
// With more than one shard, each has a thread, so one call's shards work concurrently. Deadlines are ignored.
#ifndef KESTREL_INPROCESS_LOCAL_PS_CLIENT_H_
#define KESTREL_INPROCESS_LOCAL_PS_CLIENT_H_

#include <memory>
#include <vector>

#include "server/shard.h"
#include "worker/ps_client.h"

namespace kestrel {

// shards[i] must be server i of shards[0]->partition(); the Shards must outlive the client.
std::unique_ptr<PsClient> NewLocalPsClient(const PsClientOptions& options, std::vector<Shard*> shards);

}  // namespace kestrel

#endif  // KESTREL_INPROCESS_LOCAL_PS_CLIENT_H_
