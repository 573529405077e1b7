// PeerLinks: how one server reaches the job's other servers, as an interface the server's core calls (group
// copies, a rescale's row moves, and the addresses replication forwards to). server/peer_client.h implements it
// over gRPC; tests may connect servers in process.
#ifndef KESTREL_SERVER_PEER_LINKS_H_
#define KESTREL_SERVER_PEER_LINKS_H_

#include <string>
#include <vector>

#include "server/piece_stream.h"

namespace kestrel {

// Thread-safe.
class PeerLinks {
 public:
  virtual ~PeerLinks() = default;
  // A rescale changed the job's server count: addresses beyond it are dropped, new ranks start unknown.
  virtual void Resize(int num_servers) = 0;
  // Where the job's servers serve, by rank ("" for a server not alive): the scheduler's announcement
  // (common/server_addresses.h).
  virtual void SetAddresses(const std::vector<std::string>& addresses) = 0;
  // Delivers pieces of rows (PieceStream) to the server at `address`, into its ReceiveGroup, each within the
  // links' deadline; a failure names the piece and `what` (the server). The function holds its own connection.
  virtual PieceStream::Deliver PiecesTo(const std::string& address, std::string what) = 0;
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_PEER_LINKS_H_
