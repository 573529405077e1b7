// Certificate revocation for mutual TLS: which peer certificates the operator's revocation list (--tls_crl)
// revokes, re-read whenever that file or the CA bundle that signs it changes.
//
// Why this is Kestrel's own code and not gRPC's: gRPC 1.51's CRL support (TlsCredentialsOptions::
// set_crl_directory) loads a hash-named directory into the OpenSSL store of its handshaker, which gRPC rebuilds
// only when the certificates change, so a replaced CRL would go unseen; and it accepts a peer whose CA has no CRL
// there ("failed to get CRL files. Ignoring error"), so a CRL that vanished or broke would revoke nothing. Here
// every check stats the two files (one stat(2) each), re-reads them when either changed, and refuses every peer
// while the CRL is unusable (fail closed). The cryptography stays OpenSSL's: a CRL's signature is checked with
// X509_CRL_verify against the CA of the bundle that issued it, and a certificate is looked up with
// X509_CRL_get0_by_cert. common/tls.cc runs Check on every handshake, on both sides.
//
// Only the peer's leaf certificate is checked (Kestrel's CAs sign leaves directly). A CRL's nextUpdate is not
// enforced: a stale list still revokes what it names, and rotating it is the operator's job.
#ifndef KESTREL_COMMON_REVOCATION_H_
#define KESTREL_COMMON_REVOCATION_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace kestrel {

// Largest CRL file read (about 400 000 revoked serials). 16 MiB.
inline constexpr size_t kMaxCrlFileBytes = 16 << 20;

// Thread-safe: Check may run on any number of handshake threads at once. Shared (std::shared_ptr) by the
// credentials that check with it.
class RevocationList {
 public:
  // Reads `crl_file` (PEM, one or more CRLs) and `ca_file` (the PEM bundle of CAs peers chain to) now.
  // InvalidArgument naming crl_file when it is missing, empty, larger than kMaxCrlFileBytes, holds no CRL, or
  // holds one that no CA of the bundle signed (a CA whose subject is the CRL's issuer and that may sign CRLs).
  [[nodiscard]] static absl::StatusOr<std::shared_ptr<RevocationList>> Open(const std::string& crl_file,
                                                                            const std::string& ca_file);

  // OK unless the leaf certificate `peer_cert_pem` (PEM) is revoked. Re-reads both files first when either
  // changed since the last read (its inode, size, modification or change time), logging once per change what
  // it found. PermissionDenied naming the serial when a CRL of the certificate's issuer lists it;
  // FailedPrecondition, for every peer, while the CRL as last read is unusable (the reasons Open refuses);
  // InvalidArgument when `peer_cert_pem` does not parse.
  [[nodiscard]] absl::Status Check(absl::string_view peer_cert_pem);

  const std::string& crl_file() const { return crl_file_; }

 private:
  struct Snapshot;  // what one read found: the CRLs, or why they are unusable

  // Which version of a file is on disk: enough to notice a file rewritten or renamed over.
  struct FileVersion {
    bool exists = false;
    uint64_t device = 0, inode = 0;
    int64_t size = 0, mtime_ns = 0, ctime_ns = 0;
    bool operator==(const FileVersion& o) const {
      return exists == o.exists && device == o.device && inode == o.inode && size == o.size &&
             mtime_ns == o.mtime_ns && ctime_ns == o.ctime_ns;
    }
  };
  static FileVersion VersionOf(const std::string& path);

  RevocationList(std::string crl_file, std::string ca_file)
      : crl_file_(std::move(crl_file)), ca_file_(std::move(ca_file)) {}

  // Reads both files into snapshot_ and records their versions.
  void ReloadLocked(const FileVersion& crl_version, const FileVersion& ca_version) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string crl_file_, ca_file_;
  absl::Mutex mu_;
  FileVersion crl_version_ ABSL_GUARDED_BY(mu_), ca_version_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const Snapshot> snapshot_ ABSL_GUARDED_BY(mu_);  // never null after Open
};

}  // namespace kestrel

#endif  // KESTREL_COMMON_REVOCATION_H_
