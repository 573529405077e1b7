#include "common/tls_flags.h"

#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle that peers' certificates must chain to (mutual TLS; with --tls_cert and --tls_key). "
          "Default: none (plaintext, loopback only).");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain this process presents. Default: none.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert. Default: none.");
ABSL_FLAG(std::string, tls_crl, "",
          "PEM certificate revocation list signed by a CA of --tls_ca: peers whose certificates it lists are "
          "refused. Read again whenever it changes; unreadable or not signed by the CA: every peer refused. "
          "Default: none (no revocation check).");
ABSL_FLAG(bool, insecure, false,
          "Allow plaintext, unauthenticated gRPC on a non-loopback address. Default: false (refused).");

namespace kestrel {

TlsConfig TlsConfigFromFlags() {
  TlsConfig config;
  config.ca_file = absl::GetFlag(FLAGS_tls_ca);
  config.cert_file = absl::GetFlag(FLAGS_tls_cert);
  config.key_file = absl::GetFlag(FLAGS_tls_key);
  config.crl_file = absl::GetFlag(FLAGS_tls_crl);
  config.insecure = absl::GetFlag(FLAGS_insecure);
  return config;
}

}  // namespace kestrel
