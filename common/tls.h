// Transport security for every Kestrel gRPC listener and channel: mutual TLS through gRPC's own SSL
// credentials (no hand-written crypto). Each side presents a certificate chained to the job's CA and requires
// one from its peer (GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY); clients also check the
// server's certificate against the address they dialled (its SAN DNS names / IPs).
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

// Where a process finds its TLS material; all three files or none. Plain value, thread-compatible.
struct TlsConfig {
  std::string ca_file;    // PEM bundle of the CA(s) peers' certificates must chain to. Default: none.
  std::string cert_file;  // PEM certificate chain this process presents. Default: none.
  std::string key_file;   // PEM private key of that certificate. Default: none.
  // Plaintext even on a non-loopback address (no TLS, no authentication): an explicit opt-out. Default: false.
  bool insecure = false;

  bool enabled() const { return !ca_file.empty() || !cert_file.empty() || !key_file.empty(); }
};

// Largest certificate, key or CA file read (a PEM bundle of a few certificates is a few KB). 1 MiB.
inline constexpr size_t kMaxTlsFileBytes = 1 << 20;

// True for 127.0.0.0/8, ::1 and "localhost" (host part of "host:port" or "[host]:port").
bool IsLoopbackAddress(absl::string_view address);

// Credentials for a listener on `address`. InvalidArgument names a missing, unreadable or oversized file or an
// incomplete set; FailedPrecondition refuses plaintext on a non-loopback address without `insecure`.
[[nodiscard]] absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsConfig& config,
                                                                               absl::string_view address);

// Credentials for a channel (the same file checks); plaintext when no files are configured.
[[nodiscard]] absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsConfig& config);

// One line for logs: "mutual TLS (CA <file>)" or "plaintext".
std::string DescribeTransport(const TlsConfig& config);

}  // namespace kestrel

#endif  // KESTREL_COMMON_TLS_H_
