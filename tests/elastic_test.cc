// Elastic jobs end to end on loopback (docs/elasticity.md): real kestrel_scheduler (--elastic), kestrel_server and
// kestrel_worker processes train LR in BSP over mutual TLS (tests/cluster_job.h), and a member dies for good.
//
// A worker in the middle of the ranks dies mid-clock (a fault point kills it before it pushes): after the elastic
// timeout the scheduler removes it without a rollback. The clock it left half done is completed without it, the
// worker above it is renumbered (its certificate still names its id), its unread lines go to the others: no
// line is read twice in an epoch, every epoch reads (nearly) every line, AUC stays within 0.002 of the unscaled
// run, the removed id is refused when it comes back, and a second run with the same death is bitwise identical.
//
// A server dies: without replicas the job rolls back to its last checkpoint onto the other servers; with two
// copies its backups take over and it is removed without a rollback. Either way the job ends bitwise identical
// to the uninterrupted reference (BSP's arithmetic does not depend on the server count).
#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status.h"
#include "gtest/gtest.h"
#include "tests/cluster_job.h"
#include "worker/data/datagen.h"

namespace kestrel {
namespace {

constexpr int kEpochs = 4;
constexpr absl::Duration kElasticTimeout = absl::Seconds(1);

// Waits until the scheduler reports `removals` elastic removals.
absl::StatusOr<DescribeResponse> WaitForRemovals(ClusterJob& job, uint64_t removals) {
  const absl::Time deadline = absl::Now() + absl::Minutes(2);
  while (absl::Now() < deadline) {
    absl::StatusOr<DescribeResponse> d = job.DescribeJob();
    if (d.ok() && d->elastic_removals() >= removals) return d;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat("the scheduler did not remove ", removals, " members"));
}


class ElasticTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_NO_FATAL_FAILURE(SetUpDataAndReference("elastic", kEpochs, &data_, &reference_, &final_clock_));
  }

  static std::string* data_;
  static Outcome* reference_;
  static int64_t final_clock_;  // with 2 workers
};
std::string* ElasticTest::data_ = nullptr;
Outcome* ElasticTest::reference_ = nullptr;
int64_t ElasticTest::final_clock_ = 0;

// 2 servers and 3 workers; worker 1 dies before pushing its clock `death` and is never restarted. `staleness`
// > 0: SSP with it, else BSP.
absl::StatusOr<Outcome> RunWorkerDeath(const std::string& name, const std::string& data, int64_t death,
                                       LineAudit* audit, DescribeResponse* after_removal, int staleness = 0) {
  ClusterJob job(TmpDir() + "/" + name, data, /*bounded=*/false, /*replicas=*/1, kEpochs, /*servers=*/2,
                 /*workers=*/3);
  job.EnableElastic(kElasticTimeout);
  if (staleness > 0) job.SetConsistency("ssp", staleness);
  job.EnableLineLogs();
  KESTREL_RETURN_IF_ERROR(job.StartScheduler(/*resume=*/false));
  for (int s = 0; s < 2; ++s) KESTREL_RETURN_IF_ERROR(job.StartServer(s));
  for (int w = 0; w < 3; ++w) {
    KESTREL_RETURN_IF_ERROR(job.StartWorker(w, w == 1 ? absl::StrCat("worker.push.before@", death + 1) : ""));
  }
  absl::StatusOr<int> died = job.worker(1)->Wait(absl::Minutes(2));
  if (!died.ok()) return absl::InternalError("worker 1 did not die at its fault point");
  const absl::Time died_at = absl::Now();
  KESTREL_ASSIGN_OR_RETURN(*after_removal, WaitForRemovals(job, 1));
  if (absl::Now() - died_at < kElasticTimeout) {  // it was waited for first (a lower bound, not a speed)
    return absl::InternalError(absl::StrCat("worker 1 was removed ", absl::FormatDuration(absl::Now() - died_at),
                                            " after it died, before the elastic timeout"));
  }
  job.WorkersLeft({0, 2});
  // The removed id comes back (a launcher restarting it): it is told it is out and exits 0.
  KESTREL_RETURN_IF_ERROR(job.StartWorker(1));
  absl::StatusOr<int> refused = job.worker(1)->Wait(absl::Seconds(30));
  if (!refused.ok() || *refused != 0) {
    return absl::InternalError(absl::StrCat("worker 1, back after its removal, did not exit 0; see ",
                                            job.worker(1)->log_path()));
  }
  absl::StatusOr<Outcome> outcome = job.Finish();
  *audit = Audit(job, {0, 1, 2});
  job.KillAll();
  return outcome;
}

TEST_F(ElasticTest, WorkerDeadMidClockIsRemovedWithoutRollbackReadingEveryLineOnceAndRepeatsBitwise) {
  // Mid-epoch, well after the first checkpoint (every 50 clocks). Epochs of 3 workers are 2/3 as long.
  const int64_t per_epoch = final_clock_ * 2 / 3 / kEpochs;
  const int64_t death = per_epoch + per_epoch / 2;
  LineAudit audit;
  DescribeResponse removed;
  absl::StatusOr<Outcome> first = RunWorkerDeath("elastic_worker_1", *data_, death, &audit, &removed);
  ASSERT_TRUE(first.ok()) << first.status();
  // The removal: the job has workers 0 and 2 (rank 0 and 1), no rollback.
  EXPECT_EQ(removed.view().num_workers(), 2);
  EXPECT_EQ(std::vector<int>(removed.view().worker_ids().begin(), removed.view().worker_ids().end()),
            (std::vector<int>{0, 2}));
  EXPECT_EQ(first->scheduler.rollbacks(), 0u) << "no clock was redone";
  EXPECT_EQ(first->scheduler.elastic_removals(), 1u);
  EXPECT_NEAR(first->auc, reference_->auc, 0.002) << DescribeOutcome(*first);
  EXPECT_TRUE(audit.problem.empty()) << audit.problem;
  ASSERT_EQ(audit.clocks.size(), 3u);
  EXPECT_EQ(audit.clocks[1], death) << "worker 1 trained until it died";
  EXPECT_EQ(audit.clocks[0], audit.clocks[2]) << "workers 0 and 2 trained every clock";
  ASSERT_EQ(audit.by_epoch.size(), static_cast<size_t>(kEpochs));
  size_t most = 0;
  for (const auto& [epoch, lines] : audit.by_epoch) most = std::max(most, lines.size());
  std::printf("worker 1 died at clock %lld: AUC %.5f (reference %.5f), %lld clocks; lines read per epoch:",
              static_cast<long long>(death), first->auc, reference_->auc, static_cast<long long>(audit.clocks[0]));
  for (const auto& [epoch, lines] : audit.by_epoch) {
    std::printf(" %zu", lines.size());
    // An epoch leaves at most a batch's remainder per share unread (as an unscaled one does).
    EXPECT_GT(lines.size() + 3 * 128, most) << "epoch " << epoch << " read only " << lines.size() << " lines";
  }
  std::printf("\n");
  // The same death again: bitwise the same job.
  LineAudit second_audit;
  DescribeResponse unused;
  absl::StatusOr<Outcome> second = RunWorkerDeath("elastic_worker_2", *data_, death, &second_audit, &unused);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(Equal(*first, *second)) << DescribeOutcome(*first) << "\n second: " << DescribeOutcome(*second);
  EXPECT_EQ(audit.by_epoch, second_audit.by_epoch);
}

TEST_F(ElasticTest, SspWorkerDeadIsRemovedWhereTheOthersStopReadingEveryLineOnce) {
  // SSP(2) under server-enforced clocks: the others run up to 3 clocks past the dead worker's last push before
  // the servers' read gates stop them, and report there (prefetched reads and fused-ahead steps included).
  const int64_t per_epoch = final_clock_ * 2 / 3 / kEpochs;
  const int64_t death = per_epoch / 2;
  LineAudit audit;
  DescribeResponse removed;
  absl::StatusOr<Outcome> outcome = RunWorkerDeath("elastic_ssp", *data_, death, &audit, &removed, /*staleness=*/2);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(removed.view().num_workers(), 2);
  EXPECT_EQ(outcome->scheduler.rollbacks(), 0u);
  EXPECT_EQ(outcome->scheduler.elastic_removals(), 1u);
  EXPECT_TRUE(audit.problem.empty()) << audit.problem;
  ASSERT_EQ(audit.clocks.size(), 3u);
  EXPECT_EQ(audit.clocks[1], death) << "worker 1 trained until it died";
  EXPECT_EQ(audit.clocks[0], audit.clocks[2]) << "workers 0 and 2 trained every clock";
  EXPECT_NEAR(outcome->auc, reference_->auc, 0.01) << DescribeOutcome(*outcome);
}

// 3 servers and 2 workers; server 1 is killed mid-run and never restarted.
absl::StatusOr<Outcome> RunServerDeath(const std::string& name, const std::string& data, int replicas,
                                       int64_t kill_at) {
  ClusterJob job(TmpDir() + "/" + name, data, /*bounded=*/false, replicas, kEpochs, /*servers=*/3, /*workers=*/2);
  job.EnableElastic(kElasticTimeout);
  KESTREL_RETURN_IF_ERROR(job.StartAll(/*resume=*/false));
  KESTREL_RETURN_IF_ERROR(job.WaitForClock(kill_at));
  job.Kill(job.server(1));
  KESTREL_ASSIGN_OR_RETURN(DescribeResponse removed, WaitForRemovals(job, 1));
  if (removed.view().num_servers() != 2 || removed.view().server_ids_size() != 2 ||
      removed.view().server_ids(1) != 2) {
    return absl::InternalError(absl::StrCat("after the removal: ", removed.view().ShortDebugString()));
  }
  absl::StatusOr<Outcome> outcome = job.Finish();
  job.KillAll();
  return outcome;
}

TEST_F(ElasticTest, UnreplicatedServerDeadForGoodIsDroppedAndItsRangesRestoredOntoTheOthers) {
  // After the first checkpoint (clock 50): its rows since then are redone by the rollback.
  absl::StatusOr<Outcome> outcome = RunServerDeath("elastic_server", *data_, /*replicas=*/1, 60);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->servers, 2);
  EXPECT_EQ(outcome->scheduler.rollbacks(), 1u);
  EXPECT_EQ(outcome->scheduler.elastic_removals(), 1u);
  EXPECT_TRUE(Equal(*outcome, *reference_)) << DescribeOutcome(*outcome) << "\n reference: "
                                            << DescribeOutcome(*reference_);
}

TEST_F(ElasticTest, ReplicatedServerDeadForGoodIsRemovedWithoutRollback) {
  absl::StatusOr<Outcome> outcome = RunServerDeath("elastic_replicated", *data_, /*replicas=*/2, final_clock_ / 3);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->servers, 2);
  EXPECT_EQ(outcome->scheduler.rollbacks(), 0u);
  EXPECT_EQ(outcome->scheduler.failovers(), 1u);
  EXPECT_EQ(outcome->scheduler.elastic_removals(), 1u);
  EXPECT_EQ(outcome->scheduler.under_replicated_ranges(), 0) << "every range has both copies again";
  EXPECT_TRUE(Equal(*outcome, *reference_)) << DescribeOutcome(*outcome) << "\n reference: "
                                            << DescribeOutcome(*reference_);
}

}  // namespace
}  // namespace kestrel
