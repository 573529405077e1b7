// Mutual TLS for the cross-process tests, so they run the way a real job does (every job runs over mutual TLS
// by default). One throwaway CA per test process (common/testing_certs.h) under $TEST_TMPDIR, made
// on first use; a leaf certificate per (job, role, rank), issued once and reused by every process and client of
// that identity, so a test pays for a handful of openssl runs, not one per process it starts.
//
// Identities follow common/peer_identity.h: a process presents its own role and rank (server: its shard index;
// worker: its --rank; scheduler: "scheduler" 0); test code acting as a worker uses that worker's rank, and test
// code reading fingerprints or restoring shards acts as "admin" or "scheduler". The job must be the --job_id
// the test passes. Thread-safe.
#ifndef KESTREL_TESTS_TEST_CLUSTER_TLS_H_
#define KESTREL_TESTS_TEST_CLUSTER_TLS_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/testing_certs.h"
#include "common/tls.h"
#include "grpcpp/security/credentials.h"

namespace kestrel {

class TestClusterTls {
 public:
  // The test process's instance: its CA lives in $TEST_TMPDIR/test_cluster_tls (/tmp/test_cluster_tls.<pid>
  // outside Bazel).
  static TestClusterTls& Get();

  // The TlsConfig presenting spiffe://kestrel/<job>/<role>/<rank> and trusting the CA.
  [[nodiscard]] absl::StatusOr<TlsConfig> Config(const std::string& job, const std::string& role, int rank);

  // The --tls_ca/--tls_cert/--tls_key flags that make a Kestrel binary that identity.
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> Flags(const std::string& job, const std::string& role, int rank);

  // `args` followed by Flags(job, role, rank): a process's command line over mutual TLS.
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> WithFlags(std::vector<std::string> args, const std::string& job,
                                                     const std::string& role, int rank);

  // Channel credentials of that identity, for clients the test itself runs (PsClient, SchedulerClient, stubs).
  [[nodiscard]] absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(const std::string& job,
                                                                        const std::string& role, int rank);

 private:
  using Key = std::tuple<std::string, std::string, int>;
  struct Issued {
    TlsConfig config;
    std::shared_ptr<grpc::ChannelCredentials> credentials;
  };

  explicit TestClusterTls(std::string dir) : dir_(std::move(dir)) {}
  [[nodiscard]] absl::StatusOr<Issued> Issue(const std::string& job, const std::string& role, int rank);

  const std::string dir_;
  absl::Mutex mu_;
  std::optional<TestingCa> ca_ ABSL_GUARDED_BY(mu_);  // made by the first Issue
  std::map<Key, Issued> issued_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kestrel

#endif  // KESTREL_TESTS_TEST_CLUSTER_TLS_H_
