// WorkerSession (worker/worker_session.h) driven without a channel: its scheduler answered by the test, its
// servers in process (inprocess/local_ps_client.h).
#include "worker/worker_session.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "client/scheduler_client_testing.h"
#include "gtest/gtest.h"
#include "inprocess/local_ps_client.h"
#include "server/shard.h"

namespace kestrel {
namespace {

constexpr int kHeartbeatMs = 100;

// Hands the session the test's scheduler (once) and clients of in-process servers.
class InProcessConnector final : public WorkerConnector {
 public:
  InProcessConnector(std::unique_ptr<SchedulerClientForTests> scheduler, std::vector<Shard*> servers)
      : scheduler_(std::move(scheduler)), servers_(std::move(servers)) {}
  std::unique_ptr<SchedulerClient> Scheduler(const std::string& address, const SchedulerClientOptions&) override {
    EXPECT_EQ(address, "scheduler:1");
    return std::move(scheduler_);
  }
  absl::StatusOr<std::unique_ptr<PsClient>> Servers(const PsClientOptions& options, Partition partition,
                                                    const std::vector<std::string>& addresses) override {
    EXPECT_EQ(addresses.size(), servers_.size());
    EXPECT_EQ(partition.num_servers(), static_cast<int>(servers_.size()));
    ++opened;
    return NewLocalPsClient(options, servers_);
  }
  std::atomic<int> opened{0};

 private:
  std::unique_ptr<SchedulerClientForTests> scheduler_;
  const std::vector<Shard*> servers_;
};

ClusterView View(const std::string& state, uint64_t generation) {
  ClusterView view;
  view.set_generation(generation);
  view.set_job_state(state);
  view.set_num_servers(2);
  view.set_num_workers(2);
  view.set_partition(Partition::Uniform(2)->ToString());
  view.set_consistency(CONSISTENCY_ASP);
  view.set_heartbeat_interval_ms(kHeartbeatMs);
  for (const char* a : {"server0:1", "server1:1"}) view.add_server_addresses(a);
  return view;
}

struct Fixture {
  Fixture() {
    for (int s = 0; s < 2; ++s) {
      ShardOptions options;
      options.job_id = "t";
      options.owner = s;
      shards.push_back(*Shard::Create(options, *Partition::Uniform(2)));
      servers.push_back(shards.back().get());
    }
    auto client = std::make_unique<SchedulerClientForTests>();
    scheduler = client.get();
    connector = std::make_shared<InProcessConnector>(std::move(client), servers);
    scheduler->register_ = [](MemberRole role, const std::string&, int id) -> absl::StatusOr<RegisterResponse> {
      EXPECT_EQ(role, ROLE_WORKER);
      RegisterResponse answer;
      answer.set_id(id);
      answer.set_rank(id);
      answer.set_generation(2);
      answer.set_incarnation(std::string(16, 'w'));
      answer.set_clock(5);
      *answer.mutable_view() = View("forming", 2);
      return answer;
    };
    scheduler->heartbeat = [](MemberRole, int, const std::string&, uint64_t) -> absl::StatusOr<HeartbeatResponse> {
      HeartbeatResponse answer;
      answer.set_generation(2);
      return answer;
    };
  }

  WorkerSessionOptions Options() {
    WorkerSessionOptions options;
    options.scheduler = "scheduler:1";
    options.job_id = "t";
    options.id = 1;
    options.connector = connector;
    options.scheduler_timeout = absl::Seconds(10);
    options.recovery_timeout = absl::Seconds(10);
    options.on_refused = [this](absl::Status status) {
      refused_status = status;
      refused.Notify();
    };
    return options;
  }

  std::vector<std::unique_ptr<Shard>> shards;
  std::vector<Shard*> servers;
  SchedulerClientForTests* scheduler;
  std::shared_ptr<InProcessConnector> connector;
  absl::Notification refused;
  absl::Status refused_status;
};

TEST(WorkerSessionTest, JoinsOnceTheJobFormedAndTrainsThroughItsServers) {
  Fixture f;
  std::atomic<int> describes{0};
  f.scheduler->describe = [&]() -> absl::StatusOr<DescribeResponse> {
    DescribeResponse answer;
    *answer.mutable_view() = View(++describes < 3 ? "forming" : "running", 2);
    return answer;
  };
  absl::StatusOr<std::unique_ptr<WorkerSession>> session = WorkerSession::Join(f.Options());
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_GE(describes, 3) << "the pass opens only once every server joined";
  const WorkerPass& pass = (*session)->pass();
  EXPECT_EQ((*session)->id(), 1);
  EXPECT_EQ(pass.rank, 1);
  EXPECT_EQ(pass.clock, 5) << "a replacement continues where its rank was";
  EXPECT_EQ(pass.generation, 2u);
  EXPECT_EQ(pass.num_servers, 2);
  EXPECT_EQ(pass.consistency.mode, CONSISTENCY_ASP);
  EXPECT_EQ(f.connector->opened, 1);

  // The pass's client reaches the servers the connector gave it.
  TableConfig table;
  table.set_name("emb");
  table.set_dim(2);
  ASSERT_TRUE((*session)->client()->CreateTable(table).ok());
  const std::vector<uint64_t> keys = {Partition::FeatureKey(1), Partition::FeatureKey(2)};
  std::vector<float> rows(4, -1.0f);
  ASSERT_TRUE((*session)->client()->Pull("emb", keys, 2, rows.data(), CallClock{5}).ok());
  EXPECT_EQ(rows, std::vector<float>(4, 0.0f));

  std::atomic<int64_t> left_at{-1};
  f.scheduler->leave = [&](int rank, int64_t finished) {
    EXPECT_EQ(rank, 1);
    left_at = finished;
    return absl::OkStatus();
  };
  EXPECT_TRUE((*session)->Leave(9).ok());
  EXPECT_EQ(left_at, 9);
}

TEST(WorkerSessionTest, RecoversIntoTheRolledBackPassOrHandsBackItsOwnError) {
  Fixture f;
  f.scheduler->describe = []() -> absl::StatusOr<DescribeResponse> {
    DescribeResponse answer;
    *answer.mutable_view() = View("running", 2);
    return answer;
  };
  absl::StatusOr<std::unique_ptr<WorkerSession>> session = WorkerSession::Join(f.Options());
  ASSERT_TRUE(session.ok()) << session.status();

  // No rollback comes: the job runs on, so the failure was this worker's own.
  f.scheduler->rejoin = [](int, const std::string&) -> absl::StatusOr<RegisterResponse> {
    RegisterResponse answer;
    answer.set_rank(1);
    answer.set_generation(2);
    *answer.mutable_view() = View("running", 2);
    return answer;
  };
  const absl::Status own = absl::InvalidArgumentError("a bad line");
  EXPECT_EQ((*session)->Recover(own), own);

  // A server died and the job rolled back to clock 3: a new pass, a new client, the new generation.
  std::atomic<int> rejoins{0};
  f.scheduler->rejoin = [&](int id, const std::string& incarnation) -> absl::StatusOr<RegisterResponse> {
    EXPECT_EQ(id, 1);
    EXPECT_EQ(incarnation, std::string(16, 'w'));
    if (++rejoins < 2) return absl::UnavailableError("rolling back");
    RegisterResponse answer;
    answer.set_rank(1);
    answer.set_generation(3);
    answer.set_rollbacks(1);
    answer.set_clock(3);
    *answer.mutable_view() = View("running", 3);
    return answer;
  };
  ASSERT_TRUE((*session)->Recover(absl::UnavailableError("server 0 is gone")).ok());
  EXPECT_TRUE((*session)->pass().rolled_back);
  EXPECT_EQ((*session)->pass().clock, 3);
  EXPECT_EQ((*session)->pass().generation, 3u);
  EXPECT_EQ(f.connector->opened, 2) << "the rolled-back pass has a client of its own";
  EXPECT_FALSE(f.refused.HasBeenNotified());
}

TEST(WorkerSessionTest, ARefusedHeartbeatIsTold) {
  Fixture f;
  f.scheduler->describe = []() -> absl::StatusOr<DescribeResponse> {
    DescribeResponse answer;
    *answer.mutable_view() = View("running", 2);
    return answer;
  };
  f.scheduler->heartbeat = [](MemberRole, int, const std::string&, uint64_t) -> absl::StatusOr<HeartbeatResponse> {
    return absl::FailedPreconditionError("superseded by a replacement");
  };
  absl::StatusOr<std::unique_ptr<WorkerSession>> session = WorkerSession::Join(f.Options());
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE(f.refused.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(f.refused_status.code(), absl::StatusCode::kFailedPrecondition);
}

TEST(WorkerSessionTest, JoinNeedsAConnector) {
  Fixture f;
  WorkerSessionOptions options = f.Options();
  options.connector = nullptr;
  EXPECT_EQ(WorkerSession::Join(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kestrel
