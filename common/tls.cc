#include "common/tls.h"

#include <arpa/inet.h>

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/revocation.h"
#include "common/status.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_certificate_verifier.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace kestrel {
namespace {

// The whole file, refusing what is missing, empty or larger than kMaxTlsFileBytes before reading it.
[[nodiscard]] absl::StatusOr<std::string> ReadPem(const std::string& path, absl::string_view what) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read the TLS ", what, " file ", path));
  const std::streamoff size = in.tellg();
  if (size <= 0 || static_cast<size_t>(size) > kMaxTlsFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the TLS ", what, " file ", path, " is ", size,
                                                   " bytes; expected 1 to ", kMaxTlsFileBytes));
  }
  in.seekg(0);
  std::string text(static_cast<size_t>(size), '\0');
  if (!in.read(text.data(), size)) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read the TLS ", what, " file ", path));
  }
  if (!absl::StrContains(text, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat("the TLS ", what, " file ", path, " is not PEM"));
  }
  return text;
}

// Refuses, up front, what the file watcher would only log: an incomplete set, a file missing, oversized or not
// PEM, a CRL that cannot be used, a reload interval gRPC cannot keep. The CRL, if any, for the verifier.
[[nodiscard]] absl::StatusOr<std::shared_ptr<RevocationList>> CheckFiles(const TlsConfig& c) {
  if (c.ca_file.empty() || c.cert_file.empty() || c.key_file.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs all three of --tls_ca, --tls_cert and --tls_key (or none, for plaintext)");
  }
  KESTREL_RETURN_IF_ERROR(ReadPem(c.ca_file, "CA").status());
  KESTREL_RETURN_IF_ERROR(ReadPem(c.cert_file, "certificate").status());
  KESTREL_RETURN_IF_ERROR(ReadPem(c.key_file, "key").status());
  if (c.reload_seconds < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the TLS reload interval is ", c.reload_seconds, " s; it must be at least 1 s"));
  }
  if (c.crl_file.empty()) return std::shared_ptr<RevocationList>();
  return RevocationList::Open(c.crl_file, c.ca_file);
}

// Watches the three files: gRPC re-reads them every reload_seconds and rebuilds its handshaker when they change.
std::shared_ptr<grpc::experimental::FileWatcherCertificateProvider> WatchFiles(const TlsConfig& c) {
  return std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      c.key_file, c.cert_file, c.ca_file, static_cast<unsigned int>(c.reload_seconds));
}

// gRPC's check after each handshake, once OpenSSL verified the peer's chain: the CRL's, if any, then on a
// client the host name check (what gRPC runs when no verifier is given; a custom one replaces it, so this one
// delegates to it). Owned by the credentials' core verifier; thread-safe (RevocationList is).
class RevocationAndHostVerifier final : public grpc::experimental::ExternalCertificateVerifier {
 public:
  RevocationAndHostVerifier(std::shared_ptr<RevocationList> crl, bool check_host_name)
      : crl_(std::move(crl)),
        host_name_(check_host_name ? std::make_unique<grpc::experimental::HostNameCertificateVerifier>()
                                   : nullptr) {}

  bool Verify(grpc::experimental::TlsCustomVerificationCheckRequest* request,
              std::function<void(grpc::Status)> callback, grpc::Status* sync_status) override {
    if (crl_ != nullptr) {
      const grpc::string_ref pem = request->peer_cert();
      const absl::Status checked = crl_->Check(absl::string_view(pem.data(), pem.size()));
      if (!checked.ok()) {
        *sync_status = grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(checked.message()));
        return true;
      }
    }
    if (host_name_ == nullptr) {
      *sync_status = grpc::Status::OK;
      return true;
    }
    return host_name_->Verify(request, std::move(callback), sync_status);
  }

  void Cancel(grpc::experimental::TlsCustomVerificationCheckRequest* request) override {
    if (host_name_ != nullptr) host_name_->Cancel(request);
  }

 private:
  const std::shared_ptr<RevocationList> crl_;  // null: no revocation check
  const std::unique_ptr<grpc::experimental::HostNameCertificateVerifier> host_name_;  // null on a listener
};

}  // namespace

bool IsLoopbackAddress(absl::string_view address) {
  absl::string_view host = address;
  if (absl::ConsumePrefix(&host, "[")) {
    host = host.substr(0, host.find(']'));
  } else if (const size_t colon = host.rfind(':'); colon != absl::string_view::npos &&
                                                   host.find(':') == colon) {
    host = host.substr(0, colon);  // "host:port" (a bare IPv6 address has several colons)
  }
  if (host == "localhost") return true;
  const std::string h(host);
  in_addr v4;
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsConfig& config,
                                                                               absl::string_view address) {
  if (!config.enabled()) {
    if (!config.insecure && !IsLoopbackAddress(address)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "refusing to listen on ", address,
          " without TLS: give --tls_ca, --tls_cert and --tls_key (kestrel certs makes them), or --insecure"));
    }
    return grpc::InsecureServerCredentials();
  }
  KESTREL_ASSIGN_OR_RETURN(std::shared_ptr<RevocationList> crl, CheckFiles(config));
  grpc::experimental::TlsServerCredentialsOptions options(WatchFiles(config));
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.set_certificate_verifier(grpc::experimental::ExternalCertificateVerifier::Create<RevocationAndHostVerifier>(
      std::move(crl), /*check_host_name=*/false));
  return grpc::experimental::TlsServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsConfig& config) {
  if (!config.enabled()) return grpc::InsecureChannelCredentials();
  KESTREL_ASSIGN_OR_RETURN(std::shared_ptr<RevocationList> crl, CheckFiles(config));
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(WatchFiles(config));
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_verify_server_certs(true);
  options.set_certificate_verifier(grpc::experimental::ExternalCertificateVerifier::Create<RevocationAndHostVerifier>(
      std::move(crl), /*check_host_name=*/true));
  return grpc::experimental::TlsCredentials(options);
}

std::string DescribeTransport(const TlsConfig& config) {
  if (config.enabled()) {
    return absl::StrCat("mutual TLS (CA ", config.ca_file,
                        config.crl_file.empty() ? "" : absl::StrCat(", CRL ", config.crl_file), ")");
  }
  return config.insecure ? "plaintext (--insecure)" : "plaintext (loopback only)";
}

}  // namespace kestrel
