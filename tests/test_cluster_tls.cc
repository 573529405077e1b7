#include "tests/test_cluster_tls.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace kestrel {

TestClusterTls& TestClusterTls::Get() {
  static TestClusterTls* const instance = [] {
    // Under Bazel each test has its own $TEST_TMPDIR (the only place it may write); outside it, the pid keeps
    // concurrent test processes apart.
    const char* tmp = std::getenv("TEST_TMPDIR");
    return new TestClusterTls(tmp != nullptr ? absl::StrCat(tmp, "/test_cluster_tls")
                                             : absl::StrCat("/tmp/test_cluster_tls.", getpid()));
  }();
  return *instance;
}

absl::StatusOr<TestClusterTls::Issued> TestClusterTls::Issue(const std::string& job, const std::string& role,
                                                             int rank) {
  absl::MutexLock lock(&mu_);
  auto it = issued_.find(Key(job, role, rank));
  if (it != issued_.end()) return it->second;
  if (!ca_.has_value()) {
    absl::StatusOr<TestingCa> ca = TestingCa::Create(dir_, "test-cluster");
    if (!ca.ok()) return ca.status();
    ca_ = *std::move(ca);
  }
  Issued issued;
  absl::StatusOr<TlsConfig> config = ca_->Issue(job, role, rank);
  if (!config.ok()) return config.status();
  issued.config = *std::move(config);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials = MakeChannelCredentials(issued.config);
  if (!credentials.ok()) return credentials.status();
  issued.credentials = *std::move(credentials);
  issued_.emplace(Key(job, role, rank), issued);
  return issued;
}

absl::StatusOr<TlsConfig> TestClusterTls::Config(const std::string& job, const std::string& role, int rank) {
  absl::StatusOr<Issued> issued = Issue(job, role, rank);
  if (!issued.ok()) return issued.status();
  return issued->config;
}

absl::StatusOr<std::vector<std::string>> TestClusterTls::Flags(const std::string& job, const std::string& role,
                                                               int rank) {
  absl::StatusOr<Issued> issued = Issue(job, role, rank);
  if (!issued.ok()) return issued.status();
  return TestingCa::Flags(issued->config);
}

absl::StatusOr<std::vector<std::string>> TestClusterTls::WithFlags(std::vector<std::string> args,
                                                                   const std::string& job, const std::string& role,
                                                                   int rank) {
  absl::StatusOr<std::vector<std::string>> flags = Flags(job, role, rank);
  if (!flags.ok()) return flags.status();
  args.insert(args.end(), flags->begin(), flags->end());
  return args;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> TestClusterTls::Credentials(const std::string& job,
                                                                                      const std::string& role,
                                                                                      int rank) {
  absl::StatusOr<Issued> issued = Issue(job, role, rank);
  if (!issued.ok()) return issued.status();
  return issued->credentials;
}

}  // namespace kestrel
