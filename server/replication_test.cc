#include "server/replication.h"

#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace kestrel {
namespace {

std::unique_ptr<HostedShards> Server(int server, int servers, int replicas) {
  ShardOptions options;
  options.job_id = "t";
  options.owner = server;
  Partition partition = *Partition::Uniform(servers);
  if (replicas > 1) partition = *partition.WithReplicas(replicas);
  return *HostedShards::Create(options, partition);
}

// Records what ForwardToBackups sends and answers each backup as the test says, later.
struct Backups {
  std::map<int, ReplicationDone> pending;  // by backup
  SendToBackup Send() {
    return [this](int backup, ReplicationDone done) { pending[backup] = std::move(done); };
  }
};

TEST(ForwardToBackupsTest, AnswersOnceEveryBackupHasTheUpdate) {
  auto hosted = Server(0, 4, 3);  // server 0's ranges are backed up on servers 1 and 2
  Backups backups;
  int answers = 0;
  absl::Status answer = absl::UnknownError("not answered");
  ForwardToBackups(*hosted, 0, backups.Send(), [&](absl::Status s) {
    ++answers;
    answer = s;
  });
  ASSERT_EQ(backups.pending.size(), 2u);
  EXPECT_EQ(backups.pending.count(1) + backups.pending.count(2), 2u);
  backups.pending[2](absl::OkStatus());
  EXPECT_EQ(answers, 0) << "the worker hears nothing before every backup has it";
  backups.pending[1](absl::OkStatus());
  EXPECT_EQ(answers, 1);
  EXPECT_TRUE(answer.ok()) << answer;
}

TEST(ForwardToBackupsTest, AFailedBackupMakesThePushUnavailableNamingIt) {
  auto hosted = Server(0, 4, 3);
  Backups backups;
  int answers = 0;
  absl::Status answer;
  ForwardToBackups(*hosted, 0, backups.Send(), [&](absl::Status s) {
    ++answers;
    answer = s;
  });
  backups.pending[1](absl::DeadlineExceededError("slow"));
  backups.pending[2](absl::PermissionDeniedError("later failure"));
  EXPECT_EQ(answers, 1);
  EXPECT_EQ(answer.code(), absl::StatusCode::kUnavailable) << "the worker retries; the retry is applied once";
  EXPECT_NE(answer.message().find("backup server 1 of the ranges of server 0"), absl::string_view::npos) << answer;
  EXPECT_NE(answer.message().find("DEADLINE_EXCEEDED: slow"), absl::string_view::npos) << answer;
}

TEST(ForwardToBackupsTest, WithoutBackupsAnswersAtOnceAndSendsNothing) {
  auto hosted = Server(1, 2, 1);
  Backups backups;
  bool answered = false;
  ForwardToBackups(*hosted, 1, backups.Send(), [&](absl::Status s) {
    answered = true;
    EXPECT_TRUE(s.ok());
  });
  EXPECT_TRUE(answered);
  EXPECT_TRUE(backups.pending.empty());
  EXPECT_EQ(CheckReplicated(*hosted).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ForwardToBackupsTest, AnAnswerOnTheSendingThreadIsFine) {
  auto hosted = Server(0, 3, 2);
  int answers = 0;
  ForwardToBackups(
      *hosted, 0, [](int, ReplicationDone done) { done(absl::UnavailableError("address not known yet")); },
      [&](absl::Status s) {
        ++answers;
        EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
      });
  EXPECT_EQ(answers, 1);
}

}  // namespace
}  // namespace kestrel
