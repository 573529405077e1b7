#include "common/peer_identity.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "grpc/grpc_security_constants.h"

namespace kestrel {
namespace {

bool ValidJob(absl::string_view job) {
  if (job.empty() || job.size() > 128 || !absl::ascii_isalnum(static_cast<unsigned char>(job[0]))) return false;
  for (char c : job) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

}  // namespace

const char* PeerRoleName(PeerRole role) {
  switch (role) {
    case PeerRole::kWorker:
      return "worker";
    case PeerRole::kServer:
      return "server";
    case PeerRole::kScheduler:
      return "scheduler";
    case PeerRole::kAdmin:
      return "admin";
    case PeerRole::kServing:
      return "serving";
    case PeerRole::kClient:
      return "client";
  }
  return "?";
}

absl::StatusOr<PeerRole> ParsePeerRole(absl::string_view name) {
  for (PeerRole role : {PeerRole::kWorker, PeerRole::kServer, PeerRole::kScheduler, PeerRole::kAdmin,
                        PeerRole::kServing, PeerRole::kClient}) {
    if (name == PeerRoleName(role)) return role;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown role '", name, "' (worker, server, scheduler, admin, serving or client)"));
}

bool IsListener(PeerRole role) {
  return role == PeerRole::kScheduler || role == PeerRole::kServer || role == PeerRole::kServing;
}

absl::StatusOr<PeerIdentity> ParseSpiffeId(absl::string_view uri) {
  auto invalid = [] {
    return absl::InvalidArgumentError("not a Kestrel identity (spiffe://kestrel/<job>/<role>/<rank>)");
  };
  absl::string_view rest = uri;
  if (!absl::ConsumePrefix(&rest, "spiffe://kestrel/")) return invalid();
  const std::vector<absl::string_view> parts = absl::StrSplit(rest, '/');
  if (parts.size() != 3 || !ValidJob(parts[0])) return invalid();
  PeerIdentity id;
  id.job = std::string(parts[0]);
  absl::StatusOr<PeerRole> role = ParsePeerRole(parts[1]);
  if (!role.ok()) return invalid();
  id.role = *role;
  if (parts[2].empty() || parts[2].size() > 10 || !absl::SimpleAtoi(parts[2], &id.rank) || id.rank < 0 ||
      parts[2][0] == '+' || (parts[2].size() > 1 && parts[2][0] == '0')) {
    return invalid();
  }
  return id;
}

std::string SpiffeIdOf(const PeerIdentity& identity) {
  return absl::StrCat("spiffe://kestrel/", identity.job, "/", PeerRoleName(identity.role), "/", identity.rank);
}

absl::StatusOr<std::optional<PeerIdentity>> AuthorizePeer(const grpc::AuthContext* auth, absl::string_view job,
                                                          PeerRoles allowed, absl::string_view method) {
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return std::optional<PeerIdentity>();  // plaintext
  const std::vector<grpc::string_ref> ids = auth->FindPropertyValues(GRPC_PEER_SPIFFE_ID_PROPERTY_NAME);
  if (ids.size() != 1) {
    return absl::PermissionDeniedError(
        "the client certificate names no Kestrel identity (one SAN URI spiffe://kestrel/<job>/<role>/<rank>)");
  }
  absl::StatusOr<PeerIdentity> id = ParseSpiffeId(absl::string_view(ids[0].data(), ids[0].size()));
  if (!id.ok()) return absl::PermissionDeniedError(absl::StrCat("the client certificate's identity is ", id.status().message()));
  if (id->job != job) return absl::PermissionDeniedError("the client certificate belongs to another job");
  if ((allowed & RoleBit(id->role)) == 0) {
    return absl::PermissionDeniedError(absl::StrCat("a ", PeerRoleName(id->role), " may not call ", method));
  }
  return std::optional<PeerIdentity>(*std::move(id));
}

absl::Status CheckClaimedRank(const std::optional<PeerIdentity>& caller, int claimed_rank, absl::string_view what) {
  if (!caller.has_value() || (caller->role != PeerRole::kWorker && caller->role != PeerRole::kServer)) {
    return absl::OkStatus();
  }
  if (claimed_rank != caller->rank) {
    return absl::PermissionDeniedError(absl::StrCat(what, " claims rank ", claimed_rank, "; the certificate is ",
                                                    PeerRoleName(caller->role), " ", caller->rank, "'s"));
  }
  return absl::OkStatus();
}

}  // namespace kestrel
