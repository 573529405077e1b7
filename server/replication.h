// Push replication: a primary forwards each update it applied to the backups of its range group
// (docs/replication.md), over channels to the job's other servers.
#ifndef KESTREL_SERVER_REPLICATION_H_
#define KESTREL_SERVER_REPLICATION_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "common/server_addresses.h"
#include "server/hosted_shards.h"

namespace kestrel {

// The other servers of a replicated job, as a primary reaches them to forward updates: one channel per server,
// replaced when its address changes. Thread-safe.
class PeerServers {
 public:
  // `credentials`: the channels' (common/tls.h); null: plaintext. `num_servers`: the job's.
  PeerServers(std::shared_ptr<grpc::ChannelCredentials> credentials, int num_servers);
  // A rescale changed the job's server count: addresses beyond it are dropped, new ranks start unknown.
  void Resize(int num_servers);
  // An announcement of where the servers serve (common/server_addresses.h): a server not alive now ("") gets no
  // stub, a changed address a new channel.
  void SetAddresses(const std::vector<std::string>& addresses);
  // The stub of `server`, or null while its address is unknown.
  std::shared_ptr<grpc::GenericStub> Stub(int server) const;
  // What the channels authenticate with (for a channel to a server the scheduler names).
  const std::shared_ptr<grpc::ChannelCredentials>& credentials() const { return credentials_; }

 private:
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  ServerAddresses addresses_;
  mutable absl::Mutex mu_;
  struct Peer {
    std::string address;  // the stub's ("" and no stub while the server is not alive)
    std::shared_ptr<grpc::GenericStub> stub;
  };
  std::vector<Peer> peers_ ABSL_GUARDED_BY(mu_);  // by server index
};

// What a channel to another server of the job authenticates with: `peers`' credentials, plaintext without
// them (a service started without PeerServers).
std::shared_ptr<grpc::ChannelCredentials> PeerCredentials(const PeerServers* peers);

// Sends a push a primary applied to its group's backups and reports, once, whether every backup has it.
// Thread-safe; owns neither the peers nor the groups. No thread waits for a backup: the last forwarding call's
// callback (a gRPC thread) finishes the worker's call.
class PushForwarder {
 public:
  using Done = std::function<void(absl::Status)>;

  // `peers` (may be null without replication) reaches the backups; `deadline`: of each forwarding call.
  PushForwarder(PeerServers* peers, absl::Duration deadline) : peers_(peers), deadline_(deadline) {}

  // Sends `request` (a PushRequest's bytes, shared, not copied) as `method` to the backups of `owner`'s group,
  // then runs `done`: OK when each acknowledged it, else the first failure as Unavailable (the worker retries;
  // a retried push is applied once everywhere). At once, on this thread, when there are none.
  void Forward(const HostedShards& hosted, const char* method, int owner, const grpc::ByteBuffer& request,
               Done done) const;

 private:
  PeerServers* const peers_;
  const absl::Duration deadline_;
};

// FailedPrecondition (counted) unless the job is replicated: a forwarded push or a group copy has no business
// on this server otherwise.
absl::Status CheckReplicated(const HostedShards& hosted);

}  // namespace kestrel

#endif  // KESTREL_SERVER_REPLICATION_H_
