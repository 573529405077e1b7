// Transport security for every Kestrel gRPC listener and channel: mutual TLS through gRPC's own TLS
// credentials (no hand-written crypto). Each side presents a certificate chained to the job's CA and requires
// one from its peer (GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY); clients also check the
// server's certificate against the address they dialled (its SAN DNS names / IPs).
//
// Processes run for weeks, so their credentials can change under them. gRPC's file watcher re-reads the CA,
// certificate and key files every TlsConfig::reload_seconds: files replaced in place are used from the next
// handshake after that, by listeners and channels made before (connections already open stay as they are).
// With a CRL (TlsConfig::crl_file), every handshake, on both sides, also refuses a peer whose certificate the
// CRL revokes (common/revocation.h, re-read whenever the file changes; unusable: every peer refused).
//
// Without certificates a listener accepts plaintext only on a loopback address (127.0.0.0/8, ::1,
// localhost); anything else needs TLS or an explicit `insecure`, so a cluster port is never open by accident.
#ifndef KESTREL_COMMON_TLS_H_
#define KESTREL_COMMON_TLS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace kestrel {

// How often the CA, certificate and key files are read again (gRPC's FileWatcherCertificateProvider): a file
// replaced in place is used from the next handshake at most this long after. 5 s: a rotation takes effect
// within seconds, and reading three small files that often costs nothing.
inline constexpr int kTlsReloadSeconds = 5;

// Where a process finds its TLS material; the CA, certificate and key files all three or none. Plain value,
// thread-compatible.
struct TlsConfig {
  std::string ca_file;    // PEM bundle of the CA(s) peers' certificates must chain to. Default: none.
  std::string cert_file;  // PEM certificate chain this process presents. Default: none.
  std::string key_file;   // PEM private key of that certificate. Default: none.
  // PEM certificate revocation list(s), each signed by a CA of ca_file: a peer whose certificate it lists is
  // refused. Read again whenever it changes; while unreadable, unparsable or not signed by the CA, every
  // handshake is refused. Needs the other three files. Default: none (no revocation check).
  std::string crl_file;
  // Seconds between reads of ca_file, cert_file and key_file; at least 1 (gRPC counts whole seconds). Tests
  // shorten it. Default: kTlsReloadSeconds.
  int reload_seconds = kTlsReloadSeconds;
  // Plaintext even on a non-loopback address (no TLS, no authentication): an explicit opt-out. Default: false.
  bool insecure = false;

  bool enabled() const { return !ca_file.empty() || !cert_file.empty() || !key_file.empty() || !crl_file.empty(); }
};

// Largest certificate, key or CA file read (a PEM bundle of a few certificates is a few KB). 1 MiB.
inline constexpr size_t kMaxTlsFileBytes = 1 << 20;

// True for 127.0.0.0/8, ::1 and "localhost" (host part of "host:port" or "[host]:port").
bool IsLoopbackAddress(absl::string_view address);

// Credentials for a listener on `address`, which re-read their files as the header says. InvalidArgument names
// a missing, unreadable, oversized or non-PEM file, an incomplete set, a CRL it cannot use (common/revocation.h
// RevocationList::Open) or a reload_seconds below 1; FailedPrecondition refuses plaintext on a non-loopback
// address without `insecure`.
[[nodiscard]] absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsConfig& config,
                                                                               absl::string_view address);

// Credentials for channels (the same checks), which re-read their files likewise; plaintext when no files are
// configured. Each call starts one file watcher: make them once per process and role, not per channel.
[[nodiscard]] absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsConfig& config);

// One line for logs: "mutual TLS (CA <file>)", "mutual TLS (CA <file>, CRL <file>)" or "plaintext".
std::string DescribeTransport(const TlsConfig& config);

}  // namespace kestrel

#endif  // KESTREL_COMMON_TLS_H_
