#include "server/replication.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_status.h"
#include "common/network_policy.h"

namespace kestrel {

PeerServers::PeerServers(std::shared_ptr<grpc::ChannelCredentials> credentials, int num_servers)
    : credentials_(credentials != nullptr ? std::move(credentials) : grpc::InsecureChannelCredentials()),
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

std::shared_ptr<grpc::ChannelCredentials> PeerCredentials(const PeerServers* peers) {
  return peers != nullptr ? peers->credentials() : grpc::InsecureChannelCredentials();
}

void PushForwarder::Forward(const HostedShards& hosted, const char* method, int owner,
                            const grpc::ByteBuffer& request, Done done) const {
  const std::vector<int> backups = hosted.BackupsOf(owner);
  if (backups.empty()) return done(absl::OkStatus());
  struct Forwarding {
    explicit Forwarding(size_t n) : calls(n), pending(static_cast<int>(n)) {}
    struct Call {
      std::shared_ptr<grpc::GenericStub> stub;  // its channel lives until the call is done
      grpc::ClientContext context;
      grpc::ByteBuffer response;
    };
    grpc::ByteBuffer request;  // shares the received slices
    std::vector<Call> calls;
    Done done;
    absl::Mutex mu;
    int pending ABSL_GUARDED_BY(mu);
    absl::Status first_error ABSL_GUARDED_BY(mu);
  };
  auto state = std::make_shared<Forwarding>(backups.size());
  state->request = request;
  state->done = std::move(done);
  auto finished = [state, owner](int backup, absl::Status status) {
    bool last;
    absl::Status result;
    {
      absl::MutexLock lock(&state->mu);
      if (!status.ok() && state->first_error.ok()) {
        state->first_error = absl::UnavailableError(absl::StrFormat(
            "backup server %d of the ranges of server %d does not have the update (%s: %s); the push is not "
            "acknowledged: retry",
            backup, owner, absl::StatusCodeToString(status.code()), status.message()));
      }
      last = --state->pending == 0;
      result = state->first_error;
    }
    if (last) state->done(std::move(result));
  };
  const std::string path = absl::StrCat("/kestrel.ParameterServer/", method);
  for (size_t i = 0; i < backups.size(); ++i) {
    std::shared_ptr<grpc::GenericStub> stub = peers_ != nullptr ? peers_->Stub(backups[i]) : nullptr;
    if (stub == nullptr) {
      finished(backups[i], absl::UnavailableError("its address is not known yet"));
      continue;
    }
    Forwarding::Call& call = state->calls[i];
    call.stub = stub;
    call.context.set_deadline(absl::ToChronoTime(absl::Now() + deadline_));
    stub->UnaryCall(&call.context, path, grpc::StubOptions(), &state->request, &call.response,
                    [finished, backup = backups[i]](grpc::Status status) { finished(backup, FromGrpcStatus(status)); });
  }
}

absl::Status CheckReplicated(const HostedShards& hosted) {
  if (hosted.replicated()) return absl::OkStatus();
  return hosted.own().Count(absl::FailedPreconditionError(
      "this job keeps one copy of each key range (--replicas=1): there is nothing to replicate to this server"));
}

}  // namespace kestrel
