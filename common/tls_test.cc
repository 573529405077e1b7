#include "common/tls.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "common/testing_certs.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

std::string TmpDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/tls_test";
}

// Answers every call UNIMPLEMENTED: the server needs one service; the tests only watch handshakes.
class NoService final : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    class Reactor final : public grpc::ServerGenericBidiReactor {
     public:
      Reactor() { Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "")); }
      void OnDone() override { delete this; }
    };
    return new Reactor;
  }
};

// A gRPC server on 127.0.0.1 with `credentials`.
std::unique_ptr<grpc::Server> StartServer(std::shared_ptr<grpc::ServerCredentials> credentials, int* port) {
  static NoService* const service = new NoService;
  grpc::ServerBuilder builder;
  builder.RegisterCallbackGenericService(service);
  builder.AddListeningPort("127.0.0.1:0", std::move(credentials), port);
  return builder.BuildAndStart();
}

// Whether a channel with `credentials` completes its handshake with the server.
bool Connects(int port, std::shared_ptr<grpc::ChannelCredentials> credentials) {
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port), std::move(credentials));
  return channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(3));
}

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ca_ = new TestingCa(*TestingCa::Create(TmpDir(), "job-ca"));
    other_ca_ = new TestingCa(*TestingCa::Create(TmpDir(), "other-ca"));
  }
  static TestingCa* ca_;
  static TestingCa* other_ca_;
};
TestingCa* TlsTest::ca_ = nullptr;
TestingCa* TlsTest::other_ca_ = nullptr;

TEST_F(TlsTest, MutualTlsAdmitsOnlyClientsWithACertificateOfTheSameCa) {
  absl::StatusOr<TlsConfig> server_tls = ca_->Issue("j", "server", 0);
  ASSERT_TRUE(server_tls.ok()) << server_tls.status();
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> server_credentials =
      MakeServerCredentials(*server_tls, "0.0.0.0:7100");  // TLS may listen anywhere
  ASSERT_TRUE(server_credentials.ok()) << server_credentials.status();
  int port = 0;
  std::unique_ptr<grpc::Server> server = StartServer(*server_credentials, &port);
  ASSERT_NE(server, nullptr);

  absl::StatusOr<TlsConfig> worker_tls = ca_->Issue("j", "worker", 0);
  ASSERT_TRUE(worker_tls.ok()) << worker_tls.status();
  EXPECT_TRUE(Connects(port, *MakeChannelCredentials(*worker_tls)));

  // No client certificate: the server requires one.
  grpc::SslCredentialsOptions no_cert;
  std::ifstream ca_in(ca_->ca_file());
  no_cert.pem_root_certs.assign(std::istreambuf_iterator<char>(ca_in), std::istreambuf_iterator<char>());
  EXPECT_FALSE(Connects(port, grpc::SslCredentials(no_cert)));
  // Plaintext.
  EXPECT_FALSE(Connects(port, grpc::InsecureChannelCredentials()));
  // A certificate from another CA (which also does not trust the server's).
  absl::StatusOr<TlsConfig> stranger = other_ca_->Issue("j", "worker", 0);
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  EXPECT_FALSE(Connects(port, *MakeChannelCredentials(*stranger)));
  // Another CA's certificate presented to a client that trusts the job's CA.
  TlsConfig mixed = *stranger;
  mixed.ca_file = ca_->ca_file();
  EXPECT_FALSE(Connects(port, *MakeChannelCredentials(mixed)));
  server->Shutdown();
}

TEST(TlsConfigTest, PlaintextOnlyOnLoopbackUnlessInsecure) {
  const TlsConfig none;
  EXPECT_TRUE(MakeServerCredentials(none, "127.0.0.1:7100").ok());
  EXPECT_TRUE(MakeServerCredentials(none, "127.9.9.9:0").ok());
  EXPECT_TRUE(MakeServerCredentials(none, "localhost:7100").ok());
  EXPECT_TRUE(MakeServerCredentials(none, "[::1]:7100").ok());
  for (const char* address : {"0.0.0.0:7100", "10.1.2.3:7100", "[::]:7100", "example.com:7100", "128.0.0.1:1"}) {
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> refused = MakeServerCredentials(none, address);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << address;
    EXPECT_NE(refused.status().message().find("--insecure"), std::string::npos) << refused.status();
  }
  TlsConfig insecure;
  insecure.insecure = true;
  EXPECT_TRUE(MakeServerCredentials(insecure, "0.0.0.0:7100").ok());
}

TEST(TlsConfigTest, IncompleteMissingOrBogusFilesAreNamed) {
  TlsConfig partial;
  partial.ca_file = "/nonexistent/ca.pem";
  EXPECT_EQ(MakeChannelCredentials(partial).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeServerCredentials(partial, "127.0.0.1:1").status().code(), absl::StatusCode::kInvalidArgument);

  TlsConfig missing;
  missing.ca_file = "/nonexistent/ca.pem";
  missing.cert_file = "/nonexistent/cert.pem";
  missing.key_file = "/nonexistent/key.pem";
  absl::Status status = MakeChannelCredentials(missing).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("/nonexistent/ca.pem"), std::string::npos) << status;

  const std::string junk = TmpDir() + "/junk.pem";
  std::filesystem::create_directories(TmpDir());
  { std::ofstream(junk) << "not a certificate"; }
  TlsConfig bogus;
  bogus.ca_file = bogus.cert_file = bogus.key_file = junk;
  status = MakeServerCredentials(bogus, "127.0.0.1:1").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("not PEM"), std::string::npos) << status;
}

}  // namespace
}  // namespace kestrel
