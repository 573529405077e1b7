// Rescaling a running job end to end on loopback (docs/elasticity.md): real kestrel_scheduler, kestrel_server
// and kestrel_worker processes train LR in BSP over mutual TLS (tests/cluster_job.h).
//
// Servers only: mid-run the job goes from 2 to 3 servers (a new server is started, then Scheduler.Scale is
// asked for, as `kestrel scale` does) and later back to 2 (the leaving server exits 0 by itself). BSP sums a clock's pushes in rank order on whichever server
// owns a row, so where rows live does not change their arithmetic: the rescaled job must end bitwise identical
// to an uninterrupted one (the same predictions on every test example, the same full-table fingerprints), with
// no rollback (no clock redone), and each move must keep the full-table fingerprint (read by the scheduler
// while the workers are held).
//
// Servers and workers: 2 servers x 2 workers go to 3 x 3 and then to 2 x 1 at fixed clocks, mid-epoch. Each
// worker logs the training lines of every iteration it trains (--line_log): no line may be read twice in an
// epoch, each epoch reads nearly every line (an epoch leaves at most a batch's remainder per share unread, as an
// unscaled one does), no rank trains a clock twice, the test AUC stays within 0.002 of the unscaled run, and a
// second run of the same schedule is bitwise identical.
#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/scheduler.grpc.pb.h"
#include "tests/cluster_job.h"
#include "tests/test_cluster_tls.h"
#include "worker/data/datagen.h"

namespace kestrel {
namespace {

constexpr int kEpochs = 6;

// Asks the job's scheduler (as an admin) for a rescale and waits for the answer.
absl::StatusOr<ScaleResponse> Scale(ClusterJob& job, int servers, int workers, int64_t at_clock = 0) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> admin = TestClusterTls::Get().Credentials(kJob, "admin", 0);
  if (!admin.ok()) return admin.status();
  auto stub = Scheduler::NewStub(grpc::CreateChannel(job.scheduler()->address(), *admin));
  ScaleRequest request;
  request.set_job_id(kJob);
  request.set_servers(servers);
  request.set_workers(workers);
  request.set_join_timeout_ms(60000);
  request.set_verify(true);
  request.set_at_clock(at_clock);
  ScaleResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  grpc::Status status = stub->Scale(&context, request, &response);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }
  return response;
}


class RescaleTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_NO_FATAL_FAILURE(SetUpDataAndReference("rescale", kEpochs, &data_, &reference_, &final_clock_));
  }

  static std::string* data_;
  static Outcome* reference_;
  static int64_t final_clock_;
};
std::string* RescaleTest::data_ = nullptr;
Outcome* RescaleTest::reference_ = nullptr;
int64_t RescaleTest::final_clock_ = 0;

TEST_F(RescaleTest, ServersScaledTwoToThreeToTwoMidRunEndBitwiseIdenticalWithoutRollback) {
  ClusterJob job(TmpDir() + "/rescale_servers", *data_, /*bounded=*/false, /*replicas=*/1, kEpochs);
  ASSERT_TRUE(job.StartAll(/*resume=*/false).ok());

  // 2 -> 3: the new server starts first and waits to be named (it retries its registration).
  ASSERT_TRUE(job.WaitForClock(final_clock_ / 5).ok());
  ASSERT_TRUE(job.StartServer(2, /*fault=*/"", /*num_servers=*/3).ok());
  absl::StatusOr<ScaleResponse> grown = Scale(job, 3, 2);
  ASSERT_TRUE(grown.ok()) << grown.status();
  job.Rescaled(3, 2);
  EXPECT_EQ(grown->layout_generation(), 1u);
  EXPECT_GT(grown->clock(), 0);
  EXPECT_LT(grown->clock(), final_clock_) << "the rescale happened mid-run";
  EXPECT_GT(grown->rows_moved(), 0u);
  EXPECT_NE(grown->fingerprint_before(), 0u);
  EXPECT_EQ(grown->fingerprint_after(), grown->fingerprint_before()) << "the move changed the table";
  absl::StatusOr<DescribeResponse> d = job.DescribeJob();
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->view().num_servers(), 3);
  EXPECT_EQ(d->view().layout_generation(), 1u);

  // 3 -> 2: server 2's rows move back to the others, and it exits by itself, 0: it did not fail.
  ASSERT_TRUE(job.WaitForClock(grown->clock() + final_clock_ / 5).ok());
  absl::StatusOr<ScaleResponse> shrunk = Scale(job, 2, 2);
  ASSERT_TRUE(shrunk.ok()) << shrunk.status();
  job.Rescaled(2, 2);
  EXPECT_EQ(shrunk->layout_generation(), 2u);
  EXPECT_GT(shrunk->clock(), grown->clock());
  EXPECT_LT(shrunk->clock(), final_clock_);
  EXPECT_EQ(shrunk->fingerprint_after(), shrunk->fingerprint_before()) << "the move changed the table";
  absl::StatusOr<int> left = job.server(2)->Wait(absl::Seconds(30));
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(*left, 0) << "see " << job.server(2)->log_path();

  absl::StatusOr<Outcome> outcome = job.Finish();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_TRUE(Equal(*outcome, *reference_)) << DescribeOutcome(*outcome) << "\n reference: "
                                            << DescribeOutcome(*reference_);
  EXPECT_EQ(outcome->servers, 2);
  EXPECT_EQ(outcome->scheduler.rollbacks(), 0u) << "no clock was redone";
  EXPECT_EQ(outcome->scheduler.view().layout_generation(), 2u);
  job.KillAll();
}

TEST_F(RescaleTest, ReplicatedServersScaledTwoToThreeToTwoEndBitwiseIdentical) {
  // Two copies of every range: each row goes to both servers holding its range in the new layout.
  ClusterJob job(TmpDir() + "/rescale_replicated", *data_, /*bounded=*/false, /*replicas=*/2, kEpochs);
  ASSERT_TRUE(job.StartAll(/*resume=*/false).ok());
  ASSERT_TRUE(job.WaitForClock(1).ok());
  ASSERT_TRUE(job.StartServer(2, /*fault=*/"", /*num_servers=*/3).ok());
  absl::StatusOr<ScaleResponse> grown = Scale(job, 3, 2, final_clock_ / 3);
  ASSERT_TRUE(grown.ok()) << grown.status();
  job.Rescaled(3, 2);
  EXPECT_EQ(grown->fingerprint_after(), grown->fingerprint_before());
  absl::StatusOr<ScaleResponse> shrunk = Scale(job, 2, 2, 2 * final_clock_ / 3);
  ASSERT_TRUE(shrunk.ok()) << shrunk.status();
  job.Rescaled(2, 2);
  EXPECT_EQ(shrunk->fingerprint_after(), shrunk->fingerprint_before());
  absl::StatusOr<int> left = job.server(2)->Wait(absl::Seconds(30));
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(*left, 0);
  absl::StatusOr<Outcome> outcome = job.Finish();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_TRUE(Equal(*outcome, *reference_)) << DescribeOutcome(*outcome) << "\n reference: "
                                            << DescribeOutcome(*reference_);
  EXPECT_EQ(outcome->scheduler.rollbacks(), 0u);
  EXPECT_EQ(outcome->scheduler.failovers(), 0u);
  job.KillAll();
}

TEST_F(RescaleTest, SchedulerRestartedWithTheStartingCountsResumesTheRescaledLayout) {
  ClusterJob job(TmpDir() + "/rescale_restart", *data_, /*bounded=*/false, /*replicas=*/1, kEpochs);
  ASSERT_TRUE(job.StartAll(/*resume=*/false).ok());
  const int port = job.scheduler()->port();
  ASSERT_TRUE(job.WaitForClock(1).ok());
  ASSERT_TRUE(job.StartServer(2, /*fault=*/"", /*num_servers=*/3).ok());
  absl::StatusOr<ScaleResponse> grown = Scale(job, 3, 2, final_clock_ / 4);
  ASSERT_TRUE(grown.ok()) << grown.status();
  job.Rescaled(3, 2);
  // A checkpoint of the rescaled job, then the scheduler dies; its launcher restarts it with the flags it
  // started with (2 servers), as a StatefulSet would.
  const absl::Time deadline = absl::Now() + absl::Minutes(1);
  while (job.LatestCheckpointClock() <= grown->clock() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_GT(job.LatestCheckpointClock(), grown->clock());
  job.Kill(job.scheduler());
  ASSERT_TRUE(job.StartScheduler(/*resume=*/true, "", port, /*servers=*/2, /*workers=*/2).ok());
  absl::Status supervised = job.Supervise();
  ASSERT_TRUE(supervised.ok()) << supervised;
  absl::StatusOr<Outcome> outcome = job.Finish();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->servers, 3);
  EXPECT_EQ(outcome->scheduler.view().layout_generation(), 1u);
  EXPECT_TRUE(Equal(*outcome, *reference_)) << DescribeOutcome(*outcome) << "\n reference: "
                                            << DescribeOutcome(*reference_);
  job.KillAll();
}

// The job with 2 servers and 2 workers, rescaled to 3 servers and 3 workers at clock `grow`, and to 2 servers and
// 1 worker at clock `shrink`; every move must keep the full-table fingerprint.
absl::StatusOr<Outcome> RunWorkerSchedule(const std::string& name, const std::string& data, int64_t grow,
                                          int64_t shrink, LineAudit* audit) {
  ClusterJob job(TmpDir() + "/" + name, data, /*bounded=*/false, /*replicas=*/1, kEpochs);
  job.EnableLineLogs();
  KESTREL_RETURN_IF_ERROR(job.StartAll(/*resume=*/false));
  KESTREL_RETURN_IF_ERROR(job.WaitForClock(1));  // running
  // The new ranks retry their registration until the rescale names them.
  KESTREL_RETURN_IF_ERROR(job.StartServer(2, /*fault=*/"", /*num_servers=*/3));
  KESTREL_RETURN_IF_ERROR(job.StartWorker(2));
  KESTREL_ASSIGN_OR_RETURN(ScaleResponse grown, Scale(job, 3, 3, grow));
  job.Rescaled(3, 3);
  if (grown.clock() != grow) return absl::InternalError(absl::StrCat("grew at clock ", grown.clock()));
  KESTREL_ASSIGN_OR_RETURN(ScaleResponse shrunk, Scale(job, 2, 1, shrink));
  job.Rescaled(2, 1);
  if (shrunk.clock() != shrink) return absl::InternalError(absl::StrCat("shrank at clock ", shrunk.clock()));
  for (const ScaleResponse& r : {grown, shrunk}) {
    if (r.fingerprint_after() != r.fingerprint_before()) {
      return absl::DataLossError(absl::StrCat("rescale ", r.layout_generation(), " changed the table"));
    }
  }
  absl::StatusOr<int> server_left = job.server(2)->Wait(absl::Seconds(30));
  if (!server_left.ok() || *server_left != 0) {
    return absl::InternalError(absl::StrCat("server 2 did not exit 0 after the shrink; see ", job.server(2)->log_path()));
  }
  for (int w = 1; w < 3; ++w) {  // left out: they exit 0 by themselves
    absl::StatusOr<int> code = job.worker(w)->Wait(absl::Seconds(30));
    if (!code.ok() || *code != 0) {
      return absl::InternalError(absl::StrCat("worker ", w, " did not exit 0 after the shrink; see ",
                                              job.worker(w)->log_path()));
    }
  }
  absl::StatusOr<Outcome> outcome = job.Finish();
  *audit = Audit(job, {0, 1, 2});
  job.KillAll();
  return outcome;
}

TEST_F(RescaleTest, JobScaledTo3x3ThenTo2x1ReadsEveryLineOnceAndRepeatsBitwise) {
  // Mid-epoch boundaries (epochs are final_clock_ / kEpochs clocks long with 2 workers).
  const int64_t per_epoch = final_clock_ / kEpochs;
  const int64_t grow = 2 * per_epoch + per_epoch / 3;
  const int64_t shrink = grow + per_epoch + 11;
  LineAudit first_audit, second_audit;
  absl::StatusOr<Outcome> first = RunWorkerSchedule("rescale_workers_1", *data_, grow, shrink, &first_audit);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->scheduler.rollbacks(), 0u) << "no clock was redone";
  EXPECT_NEAR(first->auc, reference_->auc, 0.002) << DescribeOutcome(*first);
  EXPECT_TRUE(first_audit.problem.empty()) << first_audit.problem;
  ASSERT_EQ(first_audit.clocks.size(), 3u);
  EXPECT_EQ(first_audit.clocks[1], shrink) << "worker 1 trains until the shrink";
  EXPECT_EQ(first_audit.clocks[2], shrink - grow) << "worker 2 trains from the growth to the shrink";
  EXPECT_GT(first_audit.clocks[0], shrink);
  std::printf("scaled run: AUC %.5f (reference %.5f), %lld clocks (reference %lld); lines read per epoch:",
              first->auc, reference_->auc, static_cast<long long>(first_audit.clocks[0]),
              static_cast<long long>(final_clock_));
  for (const auto& [epoch, lines] : first_audit.by_epoch) std::printf(" %zu", lines.size());
  std::printf("\n");
  // Every epoch read (nearly) every line: at most a batch's remainder per share is left unread.
  ASSERT_EQ(first_audit.by_epoch.size(), static_cast<size_t>(kEpochs));
  size_t most = 0;
  for (const auto& [epoch, lines] : first_audit.by_epoch) most = std::max(most, lines.size());
  for (const auto& [epoch, lines] : first_audit.by_epoch) {
    EXPECT_GT(lines.size() + 3 * 2 * 128, most) << "epoch " << epoch << " read only " << lines.size() << " lines";
  }
  // The same schedule again: bitwise the same job.
  absl::StatusOr<Outcome> second = RunWorkerSchedule("rescale_workers_2", *data_, grow, shrink, &second_audit);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(Equal(*first, *second)) << DescribeOutcome(*first) << "\n second: " << DescribeOutcome(*second);
  EXPECT_EQ(first_audit.by_epoch, second_audit.by_epoch);
}

TEST_F(RescaleTest, WorkerCountChangedAtAnEpochBoundaryStartsTheEpochAfresh) {
  // At the boundary nothing of the epoch was read: it starts afresh, sharded by the new count.
  const int64_t per_epoch = final_clock_ / kEpochs;
  LineAudit audit;
  absl::StatusOr<Outcome> outcome =
      RunWorkerSchedule("rescale_workers_boundary", *data_, 2 * per_epoch, 3 * per_epoch + per_epoch / 2, &audit);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_TRUE(audit.problem.empty()) << audit.problem;
  ASSERT_EQ(audit.by_epoch.size(), static_cast<size_t>(kEpochs));
  size_t most = 0;
  for (const auto& [epoch, lines] : audit.by_epoch) most = std::max(most, lines.size());
  for (const auto& [epoch, lines] : audit.by_epoch) {
    EXPECT_GT(lines.size() + 3 * 2 * 128, most) << "epoch " << epoch << " read only " << lines.size() << " lines";
  }
  EXPECT_EQ(audit.clocks[2], 3 * per_epoch + per_epoch / 2 - 2 * per_epoch);
  EXPECT_NEAR(outcome->auc, reference_->auc, 0.002);
  EXPECT_EQ(outcome->scheduler.rollbacks(), 0u);
}

}  // namespace
}  // namespace kestrel
