#include "common/revocation.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"

namespace kestrel {

struct RevocationList::Snapshot {
  absl::Status status;  // not OK: the CRL is unusable and every peer is refused
  std::vector<std::shared_ptr<X509_CRL>> crls;
  size_t revoked = 0;  // entries over all CRLs, for the log
};

namespace {

std::shared_ptr<X509_CRL> OwnCrl(X509_CRL* crl) { return std::shared_ptr<X509_CRL>(crl, X509_CRL_free); }
std::shared_ptr<X509> OwnCert(X509* cert) { return std::shared_ptr<X509>(cert, X509_free); }

// Every object of one PEM type in `text` (read by `read`), in order; reading stops at the first that does not
// parse, leaving OpenSSL's error queue clear.
template <typename T, typename Read, typename Own>
std::vector<std::shared_ptr<T>> ReadAllPem(const std::string& text, Read read, Own own) {
  std::vector<std::shared_ptr<T>> out;
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())),
                                                BIO_free);
  while (bio != nullptr) {
    T* object = read(bio.get(), nullptr, nullptr, nullptr);
    if (object == nullptr) break;
    out.push_back(own(object));
  }
  ERR_clear_error();
  return out;
}

// The whole file, refusing what is missing, empty or larger than `max_bytes`.
absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes, absl::string_view what) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read the TLS ", what, " file ", path));
  const std::streamoff size = in.tellg();
  if (size <= 0 || static_cast<size_t>(size) > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the TLS ", what, " file ", path, " is ", size, " bytes; expected 1 to ", max_bytes));
  }
  in.seekg(0);
  std::string text(static_cast<size_t>(size), '\0');
  if (!in.read(text.data(), size)) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read the TLS ", what, " file ", path));
  }
  return text;
}

std::string SerialOf(X509* cert) {
  std::unique_ptr<BIGNUM, decltype(&BN_free)> bn(ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr),
                                                 BN_free);
  if (bn == nullptr) return "?";
  char* hex = BN_bn2hex(bn.get());
  std::string serial = hex != nullptr ? hex : "?";
  OPENSSL_free(hex);
  return serial;
}

// Whether `ca` issued `crl` and signed it: its subject is the CRL's issuer, it may sign CRLs (no key usage
// extension, or one with cRLSign) and the signature verifies with its key.
bool SignedBy(X509_CRL* crl, X509* ca) {
  if (X509_NAME_cmp(X509_CRL_get_issuer(crl), X509_get_subject_name(ca)) != 0) return false;
  if ((X509_get_key_usage(ca) & KU_CRL_SIGN) == 0) return false;
  EVP_PKEY* key = X509_get0_pubkey(ca);
  const bool verified = key != nullptr && X509_CRL_verify(crl, key) == 1;
  ERR_clear_error();
  return verified;
}

// The CRLs of `crl_file`, each checked against the CAs of `ca_file`.
absl::StatusOr<std::vector<std::shared_ptr<X509_CRL>>> ReadCrls(const std::string& crl_file,
                                                                const std::string& ca_file) {
  KESTREL_ASSIGN_OR_RETURN(const std::string crl_text, ReadFile(crl_file, kMaxCrlFileBytes, "CRL"));
  std::vector<std::shared_ptr<X509_CRL>> crls = ReadAllPem<X509_CRL>(crl_text, PEM_read_bio_X509_CRL, OwnCrl);
  if (crls.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the TLS CRL file ", crl_file, " holds no PEM certificate revocation list"));
  }
  absl::StatusOr<std::string> ca_text = ReadFile(ca_file, kMaxCrlFileBytes, "CA");
  if (!ca_text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot check the TLS CRL file ", crl_file, ": ",
                                                   ca_text.status().message()));
  }
  const std::vector<std::shared_ptr<X509>> cas = ReadAllPem<X509>(*ca_text, PEM_read_bio_X509, OwnCert);
  for (size_t i = 0; i < crls.size(); ++i) {
    bool signed_by_a_ca = false;
    for (const std::shared_ptr<X509>& ca : cas) signed_by_a_ca = signed_by_a_ca || SignedBy(crls[i].get(), ca.get());
    if (!signed_by_a_ca) {
      return absl::InvalidArgumentError(absl::StrCat("the TLS CRL file ", crl_file, ": CRL ", i + 1,
                                                     " is not signed by a CA of ", ca_file));
    }
  }
  return crls;
}

}  // namespace

RevocationList::FileVersion RevocationList::VersionOf(const std::string& path) {
  FileVersion version;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return version;
  version.exists = true;
  version.device = st.st_dev;
  version.inode = st.st_ino;
  version.size = st.st_size;
  version.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  version.ctime_ns = int64_t{st.st_ctim.tv_sec} * 1000000000 + st.st_ctim.tv_nsec;
  return version;
}

absl::StatusOr<std::shared_ptr<RevocationList>> RevocationList::Open(const std::string& crl_file,
                                                                     const std::string& ca_file) {
  std::shared_ptr<RevocationList> list(new RevocationList(crl_file, ca_file));
  absl::MutexLock lock(&list->mu_);
  list->ReloadLocked(VersionOf(crl_file), VersionOf(ca_file));
  if (!list->snapshot_->status.ok()) return list->snapshot_->status;
  return list;
}

void RevocationList::ReloadLocked(const FileVersion& crl_version, const FileVersion& ca_version) {
  auto snapshot = std::make_shared<Snapshot>();
  absl::StatusOr<std::vector<std::shared_ptr<X509_CRL>>> crls = ReadCrls(crl_file_, ca_file_);
  if (crls.ok()) {
    snapshot->crls = *std::move(crls);
    for (const std::shared_ptr<X509_CRL>& crl : snapshot->crls) {
      snapshot->revoked += sk_X509_REVOKED_num(X509_CRL_get_REVOKED(crl.get()));
    }
  } else {
    snapshot->status = crls.status();
  }
  crl_version_ = crl_version;
  ca_version_ = ca_version;
  snapshot_ = std::move(snapshot);
}

absl::Status RevocationList::Check(absl::string_view peer_cert_pem) {
  const FileVersion crl_version = VersionOf(crl_file_);
  const FileVersion ca_version = VersionOf(ca_file_);
  std::shared_ptr<const Snapshot> snapshot;
  {
    absl::MutexLock lock(&mu_);
    if (!(crl_version == crl_version_) || !(ca_version == ca_version_)) {
      ReloadLocked(crl_version, ca_version);
      if (snapshot_->status.ok()) {
        KLOG(Info) << "TLS: read the CRL " << crl_file_ << " again: " << snapshot_->crls.size() << " list(s), "
                   << snapshot_->revoked << " revoked certificate(s)";
      } else {
        KLOG(Error) << "TLS: refusing every peer until the CRL is fixed: " << snapshot_->status.message();
      }
    }
    snapshot = snapshot_;
  }
  if (!snapshot->status.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no revocation check possible, so no peer is accepted: ", snapshot->status.message()));
  }
  const std::string pem(peer_cert_pem);
  const std::vector<std::shared_ptr<X509>> certs = ReadAllPem<X509>(pem, PEM_read_bio_X509, OwnCert);
  if (certs.empty()) return absl::InvalidArgumentError("the peer's certificate does not parse");
  X509* leaf = certs.front().get();
  for (const std::shared_ptr<X509_CRL>& crl : snapshot->crls) {
    if (X509_NAME_cmp(X509_CRL_get_issuer(crl.get()), X509_get_issuer_name(leaf)) != 0) continue;
    X509_REVOKED* entry = nullptr;
    if (X509_CRL_get0_by_cert(crl.get(), &entry, leaf) == 1) {
      return absl::PermissionDeniedError(
          absl::StrCat("the peer's certificate (serial ", SerialOf(leaf), ") is revoked by ", crl_file_));
    }
  }
  return absl::OkStatus();
}

}  // namespace kestrel
