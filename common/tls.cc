#include "common/tls.h"

#include <arpa/inet.h>

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status.h"

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

struct Pems {
  std::string ca, cert, key;
};

[[nodiscard]] absl::StatusOr<Pems> ReadAll(const TlsConfig& c) {
  if (c.ca_file.empty() || c.cert_file.empty() || c.key_file.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs all three of --tls_ca, --tls_cert and --tls_key (or none, for plaintext)");
  }
  Pems p;
  KESTREL_ASSIGN_OR_RETURN(p.ca, ReadPem(c.ca_file, "CA"));
  KESTREL_ASSIGN_OR_RETURN(p.cert, ReadPem(c.cert_file, "certificate"));
  KESTREL_ASSIGN_OR_RETURN(p.key, ReadPem(c.key_file, "key"));
  return p;
}

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
  KESTREL_ASSIGN_OR_RETURN(Pems pems, ReadAll(config));
  grpc::SslServerCredentialsOptions options(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = std::move(pems.ca);
  options.pem_key_cert_pairs.push_back({std::move(pems.key), std::move(pems.cert)});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsConfig& config) {
  if (!config.enabled()) return grpc::InsecureChannelCredentials();
  KESTREL_ASSIGN_OR_RETURN(Pems pems, ReadAll(config));
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = std::move(pems.ca);
  options.pem_private_key = std::move(pems.key);
  options.pem_cert_chain = std::move(pems.cert);
  return grpc::SslCredentials(options);
}

std::string DescribeTransport(const TlsConfig& config) {
  if (config.enabled()) return absl::StrCat("mutual TLS (CA ", config.ca_file, ")");
  return config.insecure ? "plaintext (--insecure)" : "plaintext (loopback only)";
}

}  // namespace kestrel
