// PeerServers: the job's other servers as one server reaches them over gRPC — the PeerLinks of the server's core
// (server/peer_links.h: group copies, a rescale's row moves) and the forwarding of a push, as received, to a
// backup (the service's, server/ps_service.h).
#ifndef KESTREL_SERVER_PEER_CLIENT_H_
#define KESTREL_SERVER_PEER_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/server_addresses.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "server/peer_links.h"

namespace kestrel {

// One channel per server, replaced when its address changes; channels to an address the scheduler names for a
// copy or a rescale are opened per use. Thread-safe.
class PeerServers final : public PeerLinks {
 public:
  using Done = std::function<void(absl::Status)>;

  // `credentials`: the channels' (common/tls.h); null: plaintext. `num_servers`: the job's. `deadline`: of each
  // call to another server (a forwarded push, a piece of rows).
  PeerServers(std::shared_ptr<grpc::ChannelCredentials> credentials, int num_servers, absl::Duration deadline);

  void Resize(int num_servers) override;
  // A server not alive now ("") gets no stub, a changed address a new channel.
  void SetAddresses(const std::vector<std::string>& addresses) override;
  PieceStream::Deliver PiecesTo(const std::string& address, std::string what) override;

  // Sends `request` (a received request's bytes, shared, not copied) as ParameterServer method `method` to
  // `server`, and runs `done` with its answer (on a gRPC thread; at once, Unavailable, while the server's address
  // is not known).
  void Forward(int server, const char* method, const grpc::ByteBuffer& request, Done done) const;

 private:
  // The stub of `server`, or null while its address is unknown.
  std::shared_ptr<grpc::GenericStub> Stub(int server) const;

  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  const absl::Duration deadline_;
  mutable absl::Mutex mu_;
  ServerAddresses addresses_ ABSL_GUARDED_BY(mu_);
  struct Peer {
    std::string address;  // the stub's ("" and no stub while the server is not alive)
    std::shared_ptr<grpc::GenericStub> stub;
  };
  std::vector<Peer> peers_ ABSL_GUARDED_BY(mu_);  // by server index
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_PEER_CLIENT_H_
