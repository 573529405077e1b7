// Test certificates: a throwaway CA and leaf certificates signed by it, made with Debian's `openssl` command
// (EC P-256, valid one day), with the production SAN policy (common/peer_identity.h IsListener): every leaf
// carries the SPIFFE-style URI naming its job, role and rank; the scheduler's and servers' leaves also carry
// 127.0.0.1 and localhost, the names clients dial them by on loopback.
#ifndef KESTREL_COMMON_TESTING_CERTS_H_
#define KESTREL_COMMON_TESTING_CERTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tls.h"

namespace kestrel {

class TestingCa {
 public:
  // A new CA in `dir` (created), named `name` (also the files' prefix).
  [[nodiscard]] static absl::StatusOr<TestingCa> Create(const std::string& dir, const std::string& name);

  // A leaf signed by this CA with SAN URI spiffe://kestrel/<job>/<role>/<rank> (plus the loopback names for
  // a listener): the TlsConfig that presents it and trusts this CA. InvalidArgument for an unknown role.
  [[nodiscard]] absl::StatusOr<TlsConfig> Issue(const std::string& job, const std::string& role, int rank) const;

  const std::string& ca_file() const { return ca_file_; }

  // The command-line flags (common/tls_flags.h) that make a Kestrel binary use `tls`.
  static std::vector<std::string> Flags(const TlsConfig& tls);

 private:
  std::string dir_, name_, ca_file_, ca_key_;
};

}  // namespace kestrel

#endif  // KESTREL_COMMON_TESTING_CERTS_H_
