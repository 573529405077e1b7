#include "common/peer_identity.h"

#include <map>
#include <string>
#include <vector>

#include "grpc/grpc_security_constants.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

// An AuthContext holding given properties, as gRPC's TLS transport fills one after a handshake.
class FakeAuthContext final : public grpc::AuthContext {
 public:
  FakeAuthContext(bool authenticated, std::vector<std::string> spiffe_ids)
      : authenticated_(authenticated), ids_(std::move(spiffe_ids)) {}
  bool IsPeerAuthenticated() const override { return authenticated_; }
  std::vector<grpc::string_ref> GetPeerIdentity() const override { return {}; }
  std::string GetPeerIdentityPropertyName() const override { return ""; }
  std::vector<grpc::string_ref> FindPropertyValues(const std::string& name) const override {
    std::vector<grpc::string_ref> out;
    if (name == GRPC_PEER_SPIFFE_ID_PROPERTY_NAME) {
      for (const std::string& id : ids_) out.emplace_back(id);
    }
    return out;
  }
  grpc::AuthPropertyIterator begin() const override { return Iterator(); }
  grpc::AuthPropertyIterator end() const override { return Iterator(); }
  void AddProperty(const std::string&, const grpc::string_ref&) override {}
  bool SetPeerIdentityPropertyName(const std::string&) override { return false; }

 private:
  struct Iterator : grpc::AuthPropertyIterator {
    Iterator() : grpc::AuthPropertyIterator() {}
  };
  const bool authenticated_;
  const std::vector<std::string> ids_;
};

TEST(PeerIdentityTest, ParsesKestrelSpiffeIdsAndNothingElse) {
  absl::StatusOr<PeerIdentity> id = ParseSpiffeId("spiffe://kestrel/ctr-1.a_b/worker/3");
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->job, "ctr-1.a_b");
  EXPECT_EQ(id->role, PeerRole::kWorker);
  EXPECT_EQ(id->rank, 3);
  EXPECT_EQ(SpiffeIdOf(*id), "spiffe://kestrel/ctr-1.a_b/worker/3");
  for (PeerRole role : {PeerRole::kServer, PeerRole::kScheduler, PeerRole::kAdmin}) {
    PeerIdentity p{"j", role, 0};
    absl::StatusOr<PeerIdentity> back = ParseSpiffeId(SpiffeIdOf(p));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->role, role);
  }
  for (const char* bad :
       {"", "spiffe://kestrel/", "spiffe://kestrel/j/worker", "spiffe://kestrel/j/worker/", "spiffe://kestrel/j/root/0",
        "spiffe://other/j/worker/0", "http://kestrel/j/worker/0", "spiffe://kestrel/j/worker/-1",
        "spiffe://kestrel/j/worker/+1", "spiffe://kestrel/j/worker/01", "spiffe://kestrel/j/worker/99999999999",
        "spiffe://kestrel/j/worker/1/x", "spiffe://kestrel/../worker/1", "spiffe://kestrel/j k/worker/1",
        "spiffe://kestrel//worker/1"}) {
    EXPECT_EQ(ParseSpiffeId(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(PeerIdentityTest, AuthorizesByJobAndRoleAndNeverEchoesTheJob) {
  const PeerRoles workers = RolesOf({PeerRole::kWorker});
  // Plaintext: nothing to check.
  FakeAuthContext plaintext(false, {});
  absl::StatusOr<std::optional<PeerIdentity>> caller = AuthorizePeer(&plaintext, "ctr", workers, "Pull");
  ASSERT_TRUE(caller.ok()) << caller.status();
  EXPECT_FALSE(caller->has_value());
  EXPECT_TRUE(AuthorizePeer(nullptr, "ctr", workers, "Pull").ok());

  FakeAuthContext worker(true, {"spiffe://kestrel/ctr/worker/2"});
  caller = AuthorizePeer(&worker, "ctr", workers, "Pull");
  ASSERT_TRUE(caller.ok()) << caller.status();
  ASSERT_TRUE(caller->has_value());
  EXPECT_EQ((*caller)->rank, 2);

  absl::Status denied = AuthorizePeer(&worker, "ctr", RolesOf({PeerRole::kScheduler}), "Restore").status();
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(denied.message(), "a worker may not call Restore");

  FakeAuthContext other_job(true, {"spiffe://kestrel/secret-job/worker/2"});
  denied = AuthorizePeer(&other_job, "ctr", workers, "Pull").status();
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(denied.message().find("ctr"), std::string::npos) << denied;
  EXPECT_EQ(denied.message().find("secret-job"), std::string::npos) << denied;

  for (const FakeAuthContext* bad : {new FakeAuthContext(true, {}),
                                     new FakeAuthContext(true, {"spiffe://kestrel/ctr/root/0"}),
                                     new FakeAuthContext(true, {"spiffe://kestrel/ctr/worker/1",
                                                                "spiffe://kestrel/ctr/admin/0"})}) {
    EXPECT_EQ(AuthorizePeer(bad, "ctr", workers, "Pull").status().code(), absl::StatusCode::kPermissionDenied);
    delete bad;
  }
}

TEST(PeerIdentityTest, ClaimedRanksMustBeTheCertificates) {
  const std::optional<PeerIdentity> worker3 = PeerIdentity{"j", PeerRole::kWorker, 3};
  EXPECT_TRUE(CheckClaimedRank(worker3, 3, "Advance").ok());
  absl::Status denied = CheckClaimedRank(worker3, 4, "Advance");
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(denied.message(), "Advance claims rank 4; the certificate is worker 3's");
  EXPECT_EQ(CheckClaimedRank(worker3, -1, "Push").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(CheckClaimedRank(std::nullopt, 7, "Advance").ok());
  EXPECT_TRUE(CheckClaimedRank(PeerIdentity{"j", PeerRole::kAdmin, 0}, -1, "Stats").ok());
}

}  // namespace
}  // namespace kestrel
