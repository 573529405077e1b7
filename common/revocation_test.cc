#include "common/revocation.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "common/testing_certs.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

std::string TmpDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/revocation_test";
}

class RevocationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ca_ = new TestingCa(*TestingCa::Create(TmpDir(), "job-ca"));
    other_ca_ = new TestingCa(*TestingCa::Create(TmpDir(), "other-ca"));
  }
  static TestingCa* ca_;
  static TestingCa* other_ca_;
};
TestingCa* RevocationTest::ca_ = nullptr;
TestingCa* RevocationTest::other_ca_ = nullptr;

TEST_F(RevocationTest, AListedCertificateIsRefusedFromTheNextCheckOn) {
  const std::string crl = TmpDir() + "/listed.crl";
  ASSERT_TRUE(ca_->WriteCrl(crl).ok());
  absl::StatusOr<TlsConfig> worker = ca_->Issue("j", "worker", 0);
  absl::StatusOr<TlsConfig> server = ca_->Issue("j", "server", 0);
  ASSERT_TRUE(worker.ok() && server.ok());
  absl::StatusOr<std::shared_ptr<RevocationList>> list = RevocationList::Open(crl, ca_->ca_file());
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_TRUE((*list)->Check(ReadTestFile(worker->cert_file)).ok());

  ASSERT_TRUE(ca_->Revoke(worker->cert_file, crl).ok());
  const absl::Status refused = (*list)->Check(ReadTestFile(worker->cert_file));
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << refused;
  EXPECT_NE(refused.message().find("revoked by " + crl), std::string::npos) << refused;
  EXPECT_TRUE((*list)->Check(ReadTestFile(server->cert_file)).ok());
  // A certificate of another CA with the same serial would not be this CRL's business: it is looked up by issuer.
  absl::StatusOr<TlsConfig> stranger = other_ca_->Issue("j", "worker", 0);
  ASSERT_TRUE(stranger.ok());
  EXPECT_TRUE((*list)->Check(ReadTestFile(stranger->cert_file)).ok());
  EXPECT_EQ((*list)->Check("not a certificate").code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RevocationTest, AnUnusableCrlRefusesEveryPeerUntilItIsFixed) {
  const std::string crl = TmpDir() + "/broken.crl";
  ASSERT_TRUE(ca_->WriteCrl(crl).ok());
  absl::StatusOr<TlsConfig> worker = ca_->Issue("j", "worker", 1);
  ASSERT_TRUE(worker.ok());
  absl::StatusOr<std::shared_ptr<RevocationList>> list = RevocationList::Open(crl, ca_->ca_file());
  ASSERT_TRUE(list.ok()) << list.status();
  const std::string good = ReadTestFile(crl);

  ASSERT_TRUE(WriteFileOver(crl, "-----BEGIN X509 CRL-----\ngarbage\n-----END X509 CRL-----\n").ok());
  absl::Status status = (*list)->Check(ReadTestFile(worker->cert_file));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find(crl), std::string::npos) << status;

  ASSERT_TRUE(other_ca_->WriteCrl(crl).ok());  // parses, but the job's CA did not sign it
  status = (*list)->Check(ReadTestFile(worker->cert_file));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find("not signed by a CA of"), std::string::npos) << status;

  std::filesystem::remove(crl);
  EXPECT_EQ((*list)->Check(ReadTestFile(worker->cert_file)).code(), absl::StatusCode::kFailedPrecondition);

  ASSERT_TRUE(WriteFileOver(crl, good).ok());
  EXPECT_TRUE((*list)->Check(ReadTestFile(worker->cert_file)).ok());
}

TEST_F(RevocationTest, OpenRefusesABadCrlNamingTheFile) {
  const std::string missing = TmpDir() + "/missing.crl";
  const std::string junk = TmpDir() + "/junk.crl";
  const std::string foreign = TmpDir() + "/foreign.crl";
  std::filesystem::create_directories(TmpDir());
  { std::ofstream(junk) << "not a CRL"; }
  ASSERT_TRUE(other_ca_->WriteCrl(foreign).ok());
  for (const std::string& crl : {missing, junk, foreign}) {
    absl::StatusOr<std::shared_ptr<RevocationList>> list = RevocationList::Open(crl, ca_->ca_file());
    EXPECT_EQ(list.status().code(), absl::StatusCode::kInvalidArgument) << crl;
    EXPECT_NE(list.status().message().find(crl), std::string::npos) << list.status();
  }
}

TEST_F(RevocationTest, ACrlOfEitherCaOfABundleIsAccepted) {
  const std::string bundle = TmpDir() + "/bundle.pem";
  ASSERT_TRUE(TestingCa::WriteBundle({ca_, other_ca_}, bundle).ok());
  const std::string crl = TmpDir() + "/other.crl";
  absl::StatusOr<TlsConfig> stranger = other_ca_->Issue("j", "worker", 2);
  ASSERT_TRUE(stranger.ok());
  ASSERT_TRUE(other_ca_->Revoke(stranger->cert_file, crl).ok());
  absl::StatusOr<std::shared_ptr<RevocationList>> list = RevocationList::Open(crl, bundle);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ((*list)->Check(ReadTestFile(stranger->cert_file)).code(), absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace kestrel
