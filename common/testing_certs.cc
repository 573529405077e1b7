#include "common/testing_certs.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/peer_identity.h"

namespace kestrel {
namespace {

absl::Status Run(const std::string& command) {
  const std::string full = command + " >/dev/null 2>&1";
  if (std::system(full.c_str()) != 0) return absl::InternalError("failed: " + command);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TestingCa> TestingCa::Create(const std::string& dir, const std::string& name) {
  std::filesystem::create_directories(dir);
  TestingCa ca;
  ca.dir_ = dir;
  ca.name_ = name;
  ca.ca_file_ = absl::StrCat(dir, "/", name, "-ca.pem");
  ca.ca_key_ = absl::StrCat(dir, "/", name, "-ca.key");
  absl::Status made = Run(absl::StrCat(
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=", name,
      " -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign -keyout ",
      ca.ca_key_, " -out ", ca.ca_file_));
  if (!made.ok()) return made;
  return ca;
}

std::vector<std::string> TestingCa::Flags(const TlsConfig& tls) {
  return {"--tls_ca=" + tls.ca_file, "--tls_cert=" + tls.cert_file, "--tls_key=" + tls.key_file};
}

absl::StatusOr<TlsConfig> TestingCa::Issue(const std::string& job, const std::string& role, int rank) const {
  absl::StatusOr<PeerRole> peer_role = ParsePeerRole(role);
  if (!peer_role.ok()) return peer_role.status();
  const std::string base = absl::StrCat(dir_, "/", name_, "-", job, "-", role, "-", rank);
  const std::string ext = base + ".ext";
  {
    std::ofstream out(ext);
    out << "basicConstraints=CA:FALSE\n"
        << "keyUsage=critical,digitalSignature,keyEncipherment\n"
        << "extendedKeyUsage=serverAuth,clientAuth\n"
        << "subjectAltName=URI:" << SpiffeIdOf({job, *peer_role, rank})
        << (IsListener(*peer_role) ? ",IP:127.0.0.1,DNS:localhost" : "") << "\n";
  }
  absl::Status made = Run(absl::StrCat("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=",
                                       role, "-", rank, " -keyout ", base, ".key -out ", base, ".csr"));
  if (!made.ok()) return made;
  made = Run(absl::StrCat("openssl x509 -req -days 1 -in ", base, ".csr -CA ", ca_file_, " -CAkey ", ca_key_,
                          " -CAcreateserial -extfile ", ext, " -out ", base, ".pem"));
  if (!made.ok()) return made;
  TlsConfig config;
  config.ca_file = ca_file_;
  config.cert_file = base + ".pem";
  config.key_file = base + ".key";
  return config;
}

}  // namespace kestrel
