#include "server/server_session.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/scheduler_client_testing.h"
#include "gtest/gtest.h"
#include "server/hosted_shards.h"

namespace kestrel {
namespace {

constexpr int kHeartbeatMs = 200;

// Records where the session says the other servers are.
class RecordedPeers final : public PeerLinks {
 public:
  void Resize(int) override {}
  void SetAddresses(const std::vector<std::string>& addresses) override {
    absl::MutexLock lock(&mu_);
    addresses_ = addresses;
  }
  PieceStream::Deliver PiecesTo(const std::string&, std::string) override { return nullptr; }
  std::vector<std::string> addresses() const {
    absl::MutexLock lock(&mu_);
    return addresses_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> addresses_;
};

// One server (rank 0 of `servers`, `replicas` copies of each range) as kestrel_server serves it, its session's
// scheduler answered by the test.
struct Fixture {
  Fixture(int servers, int replicas, int bsp_workers) {
    ShardOptions options;
    options.job_id = "t";
    options.owner = 0;
    options.bsp_workers = bsp_workers;
    Partition partition = *Partition::Uniform(servers);
    if (replicas > 1) partition = *partition.WithReplicas(replicas);
    layout = std::make_unique<ServedLayout>(*HostedShards::Create(options, partition), &peers);
  }

  // A registration answer of a job shaped like this server, at `generation`.
  RegisterResponse Answer(uint64_t generation = 3) const {
    RegisterResponse answer;
    answer.set_rank(0);
    answer.set_id(0);
    answer.set_incarnation(std::string(16, 'i'));
    answer.set_generation(generation);
    ClusterView& view = *answer.mutable_view();
    view.set_generation(generation);
    view.set_num_servers(layout->hosted()->partition().num_servers());
    view.set_num_workers(2);
    view.set_partition(layout->hosted()->partition().ToString());
    view.set_consistency(layout->hosted()->own().bsp_workers() > 0 ? CONSISTENCY_BSP : CONSISTENCY_ASP);
    view.set_heartbeat_interval_ms(kHeartbeatMs);
    return answer;
  }

  absl::StatusOr<std::unique_ptr<ServerSession>> Join(std::unique_ptr<SchedulerClientForTests> client) {
    ServerSessionOptions options;
    options.scheduler = "scheduler:1";
    options.address = "server0:1";
    options.scheduler_timeout = absl::Seconds(5);
    options.on_refused = [this](absl::Status status) {
      refused_status = status;
      refused.Notify();
    };
    options.on_removed = [this] { removed.Notify(); };
    return ServerSession::Join(std::move(options), std::move(client), {layout.get(), &lease, &peers});
  }

  RecordedPeers peers;
  std::unique_ptr<ServedLayout> layout;
  PrimaryLease lease;
  absl::Notification refused, removed;
  absl::Status refused_status;
};

absl::Status CheckWorker(const ServedLayout& layout, int rank, uint64_t generation) {
  RequestContext ctx;
  ctx.job_id = "t";
  ctx.worker_rank = rank;
  ctx.generation = generation;
  return layout.hosted()->own().CheckJob(ctx);
}

TEST(ServerSessionTest, RegistersHoldsTheLeaseAndAppliesEveryHeartbeatsView) {
  Fixture f(/*servers=*/3, /*replicas=*/2, /*bsp_workers=*/0);
  auto client = std::make_unique<SchedulerClientForTests>();
  SchedulerClientForTests* scheduler = client.get();
  int failures_left = 2;  // the scheduler is not up yet
  client->register_ = [&](MemberRole role, const std::string& address, int id) -> absl::StatusOr<RegisterResponse> {
    EXPECT_EQ(role, ROLE_SERVER);
    EXPECT_EQ(address, "server0:1");
    EXPECT_EQ(id, 0);
    if (failures_left-- > 0) return absl::UnavailableError("connection refused");
    return f.Answer();
  };
  absl::Notification second_view;
  client->heartbeat = [&](MemberRole, int, const std::string& incarnation,
                          uint64_t) -> absl::StatusOr<HeartbeatResponse> {
    EXPECT_EQ(incarnation, std::string(16, 'i'));
    HeartbeatResponse answer;
    answer.set_generation(4);
    answer.set_job_state("running");
    answer.add_worker_generations(4);
    answer.add_worker_generations(3);
    answer.set_routing_generation(1);
    answer.add_out_of_service(2);
    for (const char* a : {"server0:1", "server1:1", ""}) answer.add_server_addresses(a);
    if (scheduler->heartbeats >= 2) second_view.Notify();
    return answer;
  };
  EXPECT_TRUE(CheckWorker(*f.layout, 0, 1).ok()) << "no view yet: workers are not checked";
  absl::StatusOr<std::unique_ptr<ServerSession>> session = f.Join(std::move(client));
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ(scheduler->registers, 3);
  EXPECT_TRUE(f.lease.Enforced());
  EXPECT_TRUE(f.lease.Held()) << "the registration's answer grants the lease";
  ASSERT_TRUE(second_view.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(CheckWorker(*f.layout, 0, 4).ok());
  EXPECT_EQ(CheckWorker(*f.layout, 1, 2).code(), absl::StatusCode::kFailedPrecondition) << "a superseded worker";
  EXPECT_EQ(f.layout->hosted()->routing_generation(), 1u);
  EXPECT_EQ(f.peers.addresses(), (std::vector<std::string>{"server0:1", "server1:1", ""}));
  EXPECT_FALSE(f.refused.HasBeenNotified());
}

TEST(ServerSessionTest, AServerWhoseFlagsDoNotMatchTheJobIsRefused) {
  Fixture f(/*servers=*/2, /*replicas=*/1, /*bsp_workers=*/0);
  auto client = std::make_unique<SchedulerClientForTests>();
  client->register_ = [&](MemberRole, const std::string&, int) -> absl::StatusOr<RegisterResponse> {
    RegisterResponse answer = f.Answer();
    answer.mutable_view()->set_consistency(CONSISTENCY_BSP);  // BSP with 2 workers; this server: --bsp_workers=0
    return answer;
  };
  absl::StatusOr<std::unique_ptr<ServerSession>> session = f.Join(std::move(client));
  EXPECT_EQ(session.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(session.status().message().find("does not match the job's"), absl::string_view::npos)
      << session.status();
}

TEST(ServerSessionTest, AServerOfARescaledJobServesTheJobsLayout) {
  Fixture f(/*servers=*/2, /*replicas=*/1, /*bsp_workers=*/0);
  auto client = std::make_unique<SchedulerClientForTests>();
  client->register_ = [&](MemberRole, const std::string&, int) -> absl::StatusOr<RegisterResponse> {
    RegisterResponse answer = f.Answer();
    answer.set_rank(1);  // a rescale removed a lower rank: this id serves rank 1 of 3
    answer.mutable_view()->set_num_servers(3);
    answer.mutable_view()->set_partition(Partition::Uniform(3)->ToString());
    answer.mutable_view()->set_layout_generation(2);
    return answer;
  };
  client->heartbeat = [](MemberRole, int, const std::string&, uint64_t) -> absl::StatusOr<HeartbeatResponse> {
    return absl::UnavailableError("not answering");
  };
  absl::StatusOr<std::unique_ptr<ServerSession>> session = f.Join(std::move(client));
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ((*session)->rank(), 1);
  EXPECT_EQ(f.layout->generation(), 2u);
  EXPECT_EQ(f.layout->hosted()->own().owner(), 1);
  EXPECT_EQ(f.layout->hosted()->partition().num_servers(), 3);
}

TEST(ServerSessionTest, ARefusedHeartbeatAndARemovalAreEachToldOnce) {
  Fixture f(/*servers=*/2, /*replicas=*/1, /*bsp_workers=*/0);
  auto client = std::make_unique<SchedulerClientForTests>();
  client->register_ = [&](MemberRole, const std::string&, int) { return f.Answer(); };
  client->heartbeat = [](MemberRole, int, const std::string&, uint64_t) -> absl::StatusOr<HeartbeatResponse> {
    HeartbeatResponse answer;
    answer.set_removed(true);
    return answer;
  };
  absl::StatusOr<std::unique_ptr<ServerSession>> session = f.Join(std::move(client));
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_TRUE(f.removed.WaitForNotificationWithTimeout(absl::Seconds(10)));
  session->reset();

  Fixture g(/*servers=*/2, /*replicas=*/1, /*bsp_workers=*/0);
  client = std::make_unique<SchedulerClientForTests>();
  client->register_ = [&](MemberRole, const std::string&, int) { return g.Answer(); };
  client->heartbeat = [](MemberRole, int, const std::string&, uint64_t) -> absl::StatusOr<HeartbeatResponse> {
    return absl::FailedPreconditionError("declared dead");
  };
  absl::StatusOr<std::unique_ptr<ServerSession>> refused = g.Join(std::move(client));
  ASSERT_TRUE(refused.ok()) << refused.status();
  ASSERT_TRUE(g.refused.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(g.refused_status, absl::FailedPreconditionError("declared dead"));
}

TEST(ServerSessionTest, AnIdAnElasticJobRemovedIsOutOfRange) {
  Fixture f(/*servers=*/2, /*replicas=*/1, /*bsp_workers=*/0);
  auto client = std::make_unique<SchedulerClientForTests>();
  client->register_ = [](MemberRole, const std::string&, int) -> absl::StatusOr<RegisterResponse> {
    return absl::OutOfRangeError("removed");
  };
  EXPECT_EQ(f.Join(std::move(client)).status(), absl::OutOfRangeError("removed"));
  EXPECT_FALSE(f.lease.Enforced());
}

}  // namespace
}  // namespace kestrel
