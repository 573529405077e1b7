#include "common/testing_certs.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/peer_identity.h"

namespace kestrel {
namespace {

absl::Status Run(const std::string& command) {
  const std::string full = command + " >/dev/null 2>&1";
  if (std::system(full.c_str()) != 0) return absl::InternalError("failed: " + command);
  return absl::OkStatus();
}

// Renames `from` over `to` (atomic on one file system: a reader sees the old file or the new, never a mix).
absl::Status RenameOver(const std::string& from, const std::string& to) {
  std::error_code error;
  std::filesystem::rename(from, to, error);
  if (error) return absl::InternalError(absl::StrCat("cannot rename ", from, " to ", to, ": ", error.message()));
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteFileOver(const std::string& path, const std::string& text) {
  {
    std::ofstream out(path + ".next", std::ios::binary);
    out << text;
    if (!out.flush()) return absl::InternalError(absl::StrCat("cannot write ", path, ".next"));
  }
  return RenameOver(path + ".next", path);
}

std::string ReadTestFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

absl::StatusOr<TestingCa> TestingCa::Create(const std::string& dir, const std::string& name) {
  std::filesystem::create_directories(dir);
  TestingCa ca;
  ca.dir_ = dir;
  ca.name_ = name;
  ca.ca_file_ = absl::StrCat(dir, "/", name, "-ca.pem");
  ca.ca_key_ = absl::StrCat(dir, "/", name, "-ca.key");
  // What `openssl ca` needs to revoke and sign CRLs: a database of revoked serials and a CRL number.
  ca.ca_config_ = absl::StrCat(dir, "/", name, "-ca.cnf");
  const std::string index = absl::StrCat(dir, "/", name, "-index.txt");
  const std::string crl_number = absl::StrCat(dir, "/", name, "-crlnumber");
  std::ofstream(index).close();
  std::ofstream(crl_number) << "01\n";
  std::ofstream(ca.ca_config_) << "[ca]\ndefault_ca = kestrel_ca\n[kestrel_ca]\n"
                               << "database = " << index << "\ncrlnumber = " << crl_number << "\n"
                               << "certificate = " << ca.ca_file_ << "\nprivate_key = " << ca.ca_key_ << "\n"
                               << "default_md = sha256\ndefault_crl_days = 1\nunique_subject = no\n";
  absl::Status made = Run(absl::StrCat(
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=", name,
      " -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign -keyout ",
      ca.ca_key_, " -out ", ca.ca_file_));
  if (!made.ok()) return made;
  return ca;
}

std::vector<std::string> TestingCa::Flags(const TlsConfig& tls) {
  std::vector<std::string> flags = {"--tls_ca=" + tls.ca_file, "--tls_cert=" + tls.cert_file,
                                    "--tls_key=" + tls.key_file};
  if (!tls.crl_file.empty()) flags.push_back("--tls_crl=" + tls.crl_file);
  return flags;
}

absl::StatusOr<TlsConfig> TestingCa::Issue(const std::string& job, const std::string& role, int rank) const {
  const std::string base = absl::StrCat(dir_, "/", name_, "-", job, "-", role, "-", rank);
  absl::Status made = IssueTo(job, role, rank, base);
  if (!made.ok()) return made;
  TlsConfig config;
  config.ca_file = ca_file_;
  config.cert_file = base + ".pem";
  config.key_file = base + ".key";
  return config;
}

absl::Status TestingCa::Reissue(const std::string& job, const std::string& role, int rank,
                                const TlsConfig& into) const {
  const std::string base = absl::StrCat(dir_, "/", name_, "-", job, "-", role, "-", rank, "-next");
  absl::Status made = IssueTo(job, role, rank, base);
  if (made.ok()) made = RenameOver(base + ".key", into.key_file);
  if (made.ok()) made = RenameOver(base + ".pem", into.cert_file);
  return made;
}

absl::Status TestingCa::Revoke(const std::string& cert_file, const std::string& crl_file) const {
  absl::Status revoked = Run(absl::StrCat("openssl ca -config ", ca_config_, " -revoke ", cert_file));
  if (!revoked.ok()) return revoked;
  return WriteCrl(crl_file);
}

absl::Status TestingCa::WriteCrl(const std::string& crl_file) const {
  const std::string next = crl_file + ".next";
  absl::Status made = Run(absl::StrCat("openssl ca -config ", ca_config_, " -gencrl -out ", next));
  if (!made.ok()) return made;
  return RenameOver(next, crl_file);
}

absl::Status TestingCa::WriteBundle(const std::vector<const TestingCa*>& cas, const std::string& path) {
  const std::string next = path + ".next";
  {
    std::ofstream out(next, std::ios::binary);
    for (const TestingCa* ca : cas) {
      std::ifstream in(ca->ca_file_, std::ios::binary);
      out << in.rdbuf();
    }
    if (!out) return absl::InternalError("cannot write " + next);
  }
  return RenameOver(next, path);
}

absl::Status TestingCa::IssueTo(const std::string& job, const std::string& role, int rank,
                                const std::string& base) const {
  absl::StatusOr<PeerRole> peer_role = ParsePeerRole(role);
  if (!peer_role.ok()) return peer_role.status();
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
  return made;
}

}  // namespace kestrel
