#include "server/peer_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_status.h"
#include "common/network_policy.h"
#include "proto/ps.grpc.pb.h"

namespace kestrel {

PeerServers::PeerServers(std::shared_ptr<grpc::ChannelCredentials> credentials, int num_servers,
                         absl::Duration deadline)
    : credentials_(credentials != nullptr ? std::move(credentials) : grpc::InsecureChannelCredentials()),
      deadline_(deadline),
      addresses_(num_servers),
      peers_(static_cast<size_t>(std::max(num_servers, 0))) {}

void PeerServers::Resize(int num_servers) {
  absl::MutexLock lock(&mu_);
  addresses_.Resize(num_servers);
  peers_.resize(static_cast<size_t>(std::max(num_servers, 0)));
}

void PeerServers::SetAddresses(const std::vector<std::string>& addresses) {
  absl::MutexLock lock(&mu_);
  addresses_.Update(addresses);
  for (size_t i = 0; i < peers_.size(); ++i) {
    std::string address = addresses_.IfAlive(static_cast<int>(i));
    if (address == peers_[i].address) continue;
    peers_[i].stub = address.empty()
                         ? nullptr
                         : std::make_shared<grpc::GenericStub>(NewChannel(address, credentials_));
    peers_[i].address = std::move(address);
  }
}

std::shared_ptr<grpc::GenericStub> PeerServers::Stub(int server) const {
  absl::MutexLock lock(&mu_);
  if (server < 0 || server >= static_cast<int>(peers_.size())) return nullptr;
  return peers_[server].stub;
}

PieceStream::Deliver PeerServers::PiecesTo(const std::string& address, std::string what) {
  std::shared_ptr<ParameterServer::Stub> stub = ParameterServer::NewStub(NewChannel(address, credentials_));
  return [stub, deadline = deadline_, what = std::move(what)](const GroupChunk& piece) -> absl::Status {
    GroupChunkResponse answer;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    absl::Status status = FromGrpcStatus(stub->ReceiveGroup(&context, piece, &answer));
    if (status.ok()) return status;
    return absl::Status(status.code(),
                        absl::StrFormat("sending piece %d to %s: %s", piece.sequence(), what, status.message()));
  };
}

void PeerServers::Forward(int server, const char* method, const grpc::ByteBuffer& request, Done done) const {
  std::shared_ptr<grpc::GenericStub> stub = Stub(server);
  if (stub == nullptr) return done(absl::UnavailableError("its address is not known yet"));
  struct Call {
    std::shared_ptr<grpc::GenericStub> stub;  // its channel lives until the call is done
    grpc::ClientContext context;
    grpc::ByteBuffer request;  // shares the received slices
    grpc::ByteBuffer response;
    Done done;
  };
  auto call = std::make_shared<Call>();
  call->stub = std::move(stub);
  call->request = request;
  call->done = std::move(done);
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + deadline_));
  call->stub->UnaryCall(&call->context, absl::StrCat("/kestrel.ParameterServer/", method), grpc::StubOptions(),
                        &call->request, &call->response,
                        [call](grpc::Status status) { call->done(FromGrpcStatus(status)); });
}

}  // namespace kestrel
