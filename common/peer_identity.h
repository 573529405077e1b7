// Who is calling: a Kestrel identity read from the peer's verified client certificate, and the per-RPC check
// of it. Certificates name their holder in a SAN URI, SPIFFE-style:
//
//   spiffe://kestrel/<job>/<role>/<rank>      role: worker | server | scheduler | admin | serving | client;
//                                             rank >= 0 (0 for the scheduler, admin and clients)
//
// On a listener with mutual TLS every call has such a certificate (gRPC verified its chain); AuthorizePeer
// then refuses, with PERMISSION_DENIED, a certificate without a Kestrel identity, one of another job (without
// naming either job), and a role the RPC does not allow. On a plaintext listener (loopback or --insecure)
// there is no identity to check and every call passes. Thread-safe (pure functions).
#ifndef KESTREL_COMMON_PEER_IDENTITY_H_
#define KESTREL_COMMON_PEER_IDENTITY_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/auth_context.h"

namespace kestrel {

// kServing: a prediction service (kestrel_serve); kClient: a caller of one, allowed nothing else.
enum class PeerRole { kWorker = 0, kServer = 1, kScheduler = 2, kAdmin = 3, kServing = 4, kClient = 5 };

struct PeerIdentity {
  std::string job;
  PeerRole role = PeerRole::kWorker;
  int rank = 0;
};

// A set of roles: RolesOf({PeerRole::kWorker, PeerRole::kAdmin}).
using PeerRoles = uint32_t;
constexpr PeerRoles RoleBit(PeerRole role) { return PeerRoles{1} << static_cast<int>(role); }
constexpr PeerRoles RolesOf(std::initializer_list<PeerRole> roles) {
  PeerRoles set = 0;
  for (PeerRole r : roles) set |= RoleBit(r);
  return set;
}

const char* PeerRoleName(PeerRole role);
// The role PeerRoleName names ("worker", "server", "scheduler", "admin", "serving", "client"); InvalidArgument
// for anything else.
[[nodiscard]] absl::StatusOr<PeerRole> ParsePeerRole(absl::string_view name);

// The certificate policy (what `kestrel certs` issues, and what tests issue): every certificate carries its SAN
// URI; only the roles that listen (the scheduler, servers and prediction services) also carry the host names they
// are dialled by.
bool IsListener(PeerRole role);

// "spiffe://kestrel/<job>/<role>/<rank>"; InvalidArgument for anything else (job: 1-128 characters of
// [A-Za-z0-9._-], the first a letter or digit; rank: 0 to 2^31 - 1 in plain decimal).
[[nodiscard]] absl::StatusOr<PeerIdentity> ParseSpiffeId(absl::string_view uri);
std::string SpiffeIdOf(const PeerIdentity& identity);

// The caller's identity from its certificate (nullopt on a plaintext listener), if `job` matches and its role
// is in `allowed`; else PERMISSION_DENIED saying what is wrong (`method` names the RPC).
[[nodiscard]] absl::StatusOr<std::optional<PeerIdentity>> AuthorizePeer(const grpc::AuthContext* auth, absl::string_view job,
                                                          PeerRoles allowed, absl::string_view method);

// PERMISSION_DENIED unless a worker's (or server's) rank claimed in a request is the one its certificate names.
// No identity (plaintext) or another role: OK.
[[nodiscard]] absl::Status CheckClaimedRank(const std::optional<PeerIdentity>& caller, int claimed_rank, absl::string_view what);

}  // namespace kestrel

#endif  // KESTREL_COMMON_PEER_IDENTITY_H_
