// Test certificates: a throwaway CA and leaf certificates signed by it, made with Debian's `openssl` command
// (EC P-256, valid one day), with the production SAN policy (common/peer_identity.h IsListener): every leaf
// carries the SPIFFE-style URI naming its job, role and rank; the scheduler's and servers' leaves also carry
// 127.0.0.1 and localhost, the names clients dial them by on loopback. For rotation and revocation tests a CA
// can re-issue a leaf over existing files, write CA bundles, and revoke leaves in a CRL it signs (`openssl ca`).
// Every file a test's peers may be reading is written beside its path and renamed over it, as an operator
// would. A TestingCa is a value naming files on disk; not thread-safe.
#ifndef KESTREL_COMMON_TESTING_CERTS_H_
#define KESTREL_COMMON_TESTING_CERTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tls.h"

namespace kestrel {

// Writes `text` beside `path` and renames it over `path`, as an operator replaces a file a process may be reading.
[[nodiscard]] absl::Status WriteFileOver(const std::string& path, const std::string& text);
// The whole file ("" when it cannot be read).
std::string ReadTestFile(const std::string& path);

class TestingCa {
 public:
  // A new CA in `dir` (created), named `name` (also the files' prefix).
  [[nodiscard]] static absl::StatusOr<TestingCa> Create(const std::string& dir, const std::string& name);

  // A leaf signed by this CA with SAN URI spiffe://kestrel/<job>/<role>/<rank> (plus the loopback names for
  // a listener): the TlsConfig that presents it and trusts this CA. InvalidArgument for an unknown role.
  [[nodiscard]] absl::StatusOr<TlsConfig> Issue(const std::string& job, const std::string& role, int rank) const;

  // A new leaf as Issue makes it, written over `into`'s cert_file and key_file (each renamed over the old one,
  // the key first); `into`'s CA file is left alone. For rotation: peers reading those paths pick it up.
  [[nodiscard]] absl::Status Reissue(const std::string& job, const std::string& role, int rank,
                                     const TlsConfig& into) const;

  // Adds the leaf certificate in `cert_file` to this CA's revoked certificates (kept in `dir`), then writes the
  // CRL of all of them, signed by this CA, to `crl_file`. A CRL with none revoked: WriteCrl.
  [[nodiscard]] absl::Status Revoke(const std::string& cert_file, const std::string& crl_file) const;
  [[nodiscard]] absl::Status WriteCrl(const std::string& crl_file) const;

  // Writes the CA certificates of `cas` into one PEM bundle at `path` (renamed over what was there).
  [[nodiscard]] static absl::Status WriteBundle(const std::vector<const TestingCa*>& cas, const std::string& path);

  const std::string& ca_file() const { return ca_file_; }

  // The command-line flags (common/tls_flags.h) that make a Kestrel binary use `tls` (--tls_crl when it has one).
  static std::vector<std::string> Flags(const TlsConfig& tls);

 private:
  // Writes a new key and leaf to `base`.key and `base`.pem.
  [[nodiscard]] absl::Status IssueTo(const std::string& job, const std::string& role, int rank,
                                     const std::string& base) const;

  std::string dir_, name_, ca_file_, ca_key_, ca_config_;
};

}  // namespace kestrel

#endif  // KESTREL_COMMON_TESTING_CERTS_H_
