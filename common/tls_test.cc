#include "common/tls.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/peer_identity.h"
#include "common/testing_certs.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

std::string TmpDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/tls_test";
}

// The PEM certificate a peer presented, as gRPC's auth context holds it ("" on plaintext).
std::string PeerCertificate(const grpc::AuthContext* auth) {
  if (auth == nullptr) return "";
  const std::vector<grpc::string_ref> pems = auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME);
  return pems.empty() ? "" : std::string(pems[0].data(), pems[0].size());
}

// Answers every call UNIMPLEMENTED: the server needs one service; the tests watch handshakes. The message says
// who the client is (common/peer_identity.h, as a worker of job "j") on its first line, then its certificate.
class NoService final : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* context) override {
    class Reactor final : public grpc::ServerGenericBidiReactor {
     public:
      explicit Reactor(const grpc::AuthContext* auth) {
        absl::StatusOr<std::optional<PeerIdentity>> who =
            AuthorizePeer(auth, "j", RolesOf({PeerRole::kWorker}), "Call");
        std::string identity = !who.ok() ? std::string(who.status().message())
                                         : who->has_value() ? SpiffeIdOf(**who) : "plaintext";
        Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, identity + "\n" + PeerCertificate(auth)));
      }
      void OnDone() override { delete this; }
    };
    return new Reactor(context->auth_context().get());
  }
};

// A gRPC server on 127.0.0.1 with `credentials`, and the service it answers with.
struct TestServer {
  std::unique_ptr<NoService> service;
  std::unique_ptr<grpc::Server> server;  // declared after the service it calls, so destroyed before it
  int port = 0;
};

TestServer StartServer(std::shared_ptr<grpc::ServerCredentials> credentials) {
  TestServer started;
  started.service = std::make_unique<NoService>();
  grpc::ServerBuilder builder;
  builder.RegisterCallbackGenericService(started.service.get());
  builder.AddListeningPort("127.0.0.1:0", std::move(credentials), &started.port);
  started.server = builder.BuildAndStart();
  return started;
}

// Whether a channel with `credentials` completes its handshake with the server.
bool Connects(int port, std::shared_ptr<grpc::ChannelCredentials> credentials) {
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port), std::move(credentials));
  return channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(3));
}

// One call on a new connection (a channel of its own, outside gRPC's shared subchannel pool, so a new
// handshake): the call's status, and the certificates each side saw of the other.
struct Outcome {
  grpc::Status status;
  std::string server_cert;  // the certificate the client saw
  // Whether the call reached the service over an accepted handshake.
  bool accepted() const { return status.error_code() == grpc::StatusCode::UNIMPLEMENTED; }
  // Who the server took the client for (AuthorizePeer), and the certificate it saw.
  std::string client_identity() const { return status.error_message().substr(0, status.error_message().find('\n')); }
  std::string client_cert() const {
    const size_t newline = status.error_message().find('\n');
    return newline == std::string::npos ? "" : status.error_message().substr(newline + 1);
  }
};

Outcome CallOnNewConnection(int port, std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  grpc::GenericStub stub(grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port), std::move(credentials), args));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  Outcome outcome;
  absl::Notification done;
  stub.UnaryCall(&context, "/kestrel.test.NoService/Call", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status status) {
                   outcome.status = std::move(status);
                   done.Notify();
                 });
  done.WaitForNotification();
  outcome.server_cert = PeerCertificate(context.auth_context().get());
  return outcome;
}

// Calls on new connections until `wanted` holds of one, for up to `limit`; the last outcome.
template <typename Wanted>
Outcome CallUntil(int port, const std::shared_ptr<grpc::ChannelCredentials>& credentials, Wanted wanted,
                  absl::Duration limit = absl::Seconds(30)) {
  const absl::Time deadline = absl::Now() + limit;
  Outcome outcome = CallOnNewConnection(port, credentials);
  while (!wanted(outcome) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
    outcome = CallOnNewConnection(port, credentials);
  }
  return outcome;
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
  TestServer server = StartServer(*server_credentials);
  ASSERT_NE(server.server, nullptr);
  const int port = server.port;

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
  server.server->Shutdown();

  // A listener whose certificate does not name the address dialled (a worker's names no host): the client
  // refuses it even though the job's CA signed it.
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> hostless = MakeServerCredentials(*worker_tls, "0.0.0.0:1");
  ASSERT_TRUE(hostless.ok()) << hostless.status();
  TestServer impostor = StartServer(*hostless);
  ASSERT_NE(impostor.server, nullptr);
  EXPECT_FALSE(CallOnNewConnection(impostor.port, *MakeChannelCredentials(*worker_tls)).accepted());
  impostor.server->Shutdown();
}

TEST_F(TlsTest, PeersSeeEachOthersCertificatesInTheAuthContext) {
  absl::StatusOr<TlsConfig> server_tls = ca_->Issue("j", "server", 9);
  absl::StatusOr<TlsConfig> worker_tls = ca_->Issue("j", "worker", 9);
  ASSERT_TRUE(server_tls.ok() && worker_tls.ok());
  TestServer server = StartServer(*MakeServerCredentials(*server_tls, "127.0.0.1:0"));
  ASSERT_NE(server.server, nullptr);
  const int port = server.port;
  const Outcome outcome = CallOnNewConnection(port, *MakeChannelCredentials(*worker_tls));
  ASSERT_TRUE(outcome.accepted()) << outcome.status.error_message();
  EXPECT_EQ(outcome.server_cert, ReadTestFile(server_tls->cert_file));
  EXPECT_EQ(outcome.client_cert(), ReadTestFile(worker_tls->cert_file));
  EXPECT_EQ(outcome.client_identity(), "spiffe://kestrel/j/worker/9");
  absl::StatusOr<TlsConfig> admin_tls = ca_->Issue("j", "admin", 0);
  ASSERT_TRUE(admin_tls.ok());
  const Outcome admin = CallOnNewConnection(port, *MakeChannelCredentials(*admin_tls));
  EXPECT_EQ(admin.client_identity(), "a admin may not call Call");
  server.server->Shutdown();
}

TEST_F(TlsTest, FilesReplacedInPlaceAreUsedWithoutARestart) {
  // Both sides trust a bundle file that holds the job's CA; then a new CA joins the bundle and issues new
  // leaves over the old files (each renamed over its path), as an operator rotates a running job's CA.
  const std::string dir = TmpDir() + "/rotation";
  absl::StatusOr<TestingCa> next_ca = TestingCa::Create(dir, "next-ca");
  ASSERT_TRUE(next_ca.ok()) << next_ca.status();
  const std::string bundle = dir + "/bundle.pem";
  ASSERT_TRUE(TestingCa::WriteBundle({ca_}, bundle).ok());
  absl::StatusOr<TlsConfig> server_tls = ca_->Issue("j", "server", 3);
  absl::StatusOr<TlsConfig> worker_tls = ca_->Issue("j", "worker", 3);
  ASSERT_TRUE(server_tls.ok() && worker_tls.ok());
  server_tls->ca_file = worker_tls->ca_file = bundle;
  server_tls->reload_seconds = worker_tls->reload_seconds = 1;
  TestServer server = StartServer(*MakeServerCredentials(*server_tls, "127.0.0.1:0"));
  ASSERT_NE(server.server, nullptr);
  const int port = server.port;
  const std::shared_ptr<grpc::ChannelCredentials> worker = *MakeChannelCredentials(*worker_tls);
  const Outcome before = CallOnNewConnection(port, worker);
  ASSERT_TRUE(before.accepted()) << before.status.error_message();
  ASSERT_EQ(before.server_cert, ReadTestFile(server_tls->cert_file));

  ASSERT_TRUE(TestingCa::WriteBundle({ca_, &*next_ca}, bundle).ok());
  ASSERT_TRUE(next_ca->Reissue("j", "server", 3, *server_tls).ok());
  ASSERT_TRUE(next_ca->Reissue("j", "worker", 3, *worker_tls).ok());
  const std::string new_server_cert = ReadTestFile(server_tls->cert_file);
  const std::string new_worker_cert = ReadTestFile(worker_tls->cert_file);
  ASSERT_NE(new_server_cert, before.server_cert);
  // The same server object and the same channel credentials: both re-read their files.
  const Outcome after = CallUntil(port, worker, [&](const Outcome& o) {
    return o.accepted() && o.server_cert == new_server_cert && o.client_cert() == new_worker_cert;
  });
  EXPECT_TRUE(after.accepted()) << after.status.error_message();
  EXPECT_EQ(after.server_cert, new_server_cert);
  EXPECT_EQ(after.client_cert(), new_worker_cert);
  EXPECT_EQ(after.client_identity(), "spiffe://kestrel/j/worker/3");

  // The old CA leaves the bundle: a certificate it issued is refused from the server's next read on (the
  // client trusts the new CA, so the refusal is the server's).
  absl::StatusOr<TlsConfig> old_worker_tls = ca_->Issue("j", "worker", 4);
  ASSERT_TRUE(old_worker_tls.ok());
  old_worker_tls->ca_file = bundle;
  const std::shared_ptr<grpc::ChannelCredentials> old_worker = *MakeChannelCredentials(*old_worker_tls);
  ASSERT_TRUE(CallOnNewConnection(port, old_worker).accepted());
  ASSERT_TRUE(TestingCa::WriteBundle({&*next_ca}, bundle).ok());
  EXPECT_FALSE(CallUntil(port, old_worker, [](const Outcome& o) { return !o.accepted(); }).accepted());
  EXPECT_TRUE(CallOnNewConnection(port, worker).accepted());
  server.server->Shutdown();
}

TEST_F(TlsTest, ARevokedClientIsRefusedFromItsNextConnectionOn) {
  const std::string crl = TmpDir() + "/clients.crl";
  ASSERT_TRUE(ca_->WriteCrl(crl).ok());
  absl::StatusOr<TlsConfig> server_tls = ca_->Issue("j", "server", 5);
  ASSERT_TRUE(server_tls.ok());
  server_tls->crl_file = crl;
  TestServer server = StartServer(*MakeServerCredentials(*server_tls, "127.0.0.1:0"));
  ASSERT_NE(server.server, nullptr);
  const int port = server.port;
  absl::StatusOr<TlsConfig> revoked_tls = ca_->Issue("j", "worker", 5);
  absl::StatusOr<TlsConfig> kept_tls = ca_->Issue("j", "worker", 6);
  ASSERT_TRUE(revoked_tls.ok() && kept_tls.ok());
  const std::shared_ptr<grpc::ChannelCredentials> revoked = *MakeChannelCredentials(*revoked_tls);
  const std::shared_ptr<grpc::ChannelCredentials> kept = *MakeChannelCredentials(*kept_tls);
  ASSERT_TRUE(CallOnNewConnection(port, revoked).accepted());
  ASSERT_TRUE(CallOnNewConnection(port, kept).accepted());

  // The CRL is checked on every handshake: no waiting for a reload.
  ASSERT_TRUE(ca_->Revoke(revoked_tls->cert_file, crl).ok());
  const Outcome refused = CallOnNewConnection(port, revoked);
  EXPECT_FALSE(refused.accepted()) << refused.status.error_message();
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.status.error_message();
  EXPECT_TRUE(CallOnNewConnection(port, kept).accepted());

  // A CRL that stops parsing refuses everyone until it is fixed (fail closed).
  const std::string good = ReadTestFile(crl);
  ASSERT_TRUE(WriteFileOver(crl, "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n").ok());
  EXPECT_FALSE(CallOnNewConnection(port, kept).accepted());
  ASSERT_TRUE(WriteFileOver(crl, good).ok());
  EXPECT_TRUE(CallOnNewConnection(port, kept).accepted());
  EXPECT_FALSE(CallOnNewConnection(port, revoked).accepted());
  server.server->Shutdown();
}

TEST_F(TlsTest, AClientRefusesARevokedServer) {
  const std::string crl = TmpDir() + "/servers.crl";
  ASSERT_TRUE(ca_->WriteCrl(crl).ok());
  absl::StatusOr<TlsConfig> server_tls = ca_->Issue("j", "server", 7);
  absl::StatusOr<TlsConfig> worker_tls = ca_->Issue("j", "worker", 7);
  ASSERT_TRUE(server_tls.ok() && worker_tls.ok());
  worker_tls->crl_file = crl;
  TestServer server = StartServer(*MakeServerCredentials(*server_tls, "127.0.0.1:0"));
  ASSERT_NE(server.server, nullptr);
  const int port = server.port;
  const std::shared_ptr<grpc::ChannelCredentials> worker = *MakeChannelCredentials(*worker_tls);
  ASSERT_TRUE(CallOnNewConnection(port, worker).accepted());

  ASSERT_TRUE(ca_->Revoke(server_tls->cert_file, crl).ok());
  const Outcome refused = CallOnNewConnection(port, worker);
  EXPECT_FALSE(refused.accepted()) << refused.status.error_message();
  EXPECT_EQ(refused.server_cert, "");  // the call never ran on that connection
  // A client without the CRL still connects: the refusal is the client's own check.
  worker_tls->crl_file.clear();
  EXPECT_TRUE(CallOnNewConnection(port, *MakeChannelCredentials(*worker_tls)).accepted());
  server.server->Shutdown();
}

TEST_F(TlsTest, AnUnusableCrlIsRefusedAtStartNamingTheFile) {
  absl::StatusOr<TlsConfig> tls = ca_->Issue("j", "server", 8);
  ASSERT_TRUE(tls.ok());
  const std::string missing = TmpDir() + "/missing.crl";
  const std::string junk = TmpDir() + "/junk.crl";
  const std::string foreign = TmpDir() + "/foreign.crl";
  { std::ofstream(junk) << "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n"; }
  ASSERT_TRUE(other_ca_->WriteCrl(foreign).ok());  // parses, but the job's CA did not sign it
  for (const std::string& crl : {missing, junk, foreign}) {
    TlsConfig bad = *tls;
    bad.crl_file = crl;
    for (const absl::Status& status :
         {MakeServerCredentials(bad, "127.0.0.1:0").status(), MakeChannelCredentials(bad).status()}) {
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
      EXPECT_NE(status.message().find(crl), std::string::npos) << status;
    }
  }
  TlsConfig crl_only;
  crl_only.crl_file = foreign;
  EXPECT_EQ(MakeChannelCredentials(crl_only).status().code(), absl::StatusCode::kInvalidArgument);
  TlsConfig no_reload = *tls;
  no_reload.reload_seconds = 0;
  EXPECT_EQ(MakeServerCredentials(no_reload, "127.0.0.1:0").status().code(), absl::StatusCode::kInvalidArgument);
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
