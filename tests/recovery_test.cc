// Recovery end to end on loopback: real kestrel_scheduler, 2 kestrel_server and 2 kestrel_worker processes
// train LR in BSP with a fixed data order, checkpointing every few clocks. A reference run goes uninterrupted;
// then runs where a server or a worker is killed with SIGKILL at a random moment (and restarted with the same
// rank, as a launcher would), and runs where a process dies inside each phase of checkpointing (explicit
// fault-injection points) and the job is restarted with --resume. Every run must finish with parameters
// bitwise identical to the reference: the same full-table fingerprints (values and optimizer state of every
// row, summed over the servers) and the same predictions on every test example. Every process runs over mutual
// TLS with the certificate of its role and rank, restarted ones too (tests/test_cluster_tls.h); the test reads
// the fingerprints as an admin.
//
// KESTREL_RECOVERY_TRIALS (default 2) sets the number of random kill trials per role; scripts/recovery_soak.sh
// runs many more. Each test with random kills draws its choices (victims, moments) from one seed, printed as
// "seed=N (replay: KESTREL_TEST_SEED=N)" (common/test_seed.h): a replay makes the same choices, though the
// processes' own timing still varies.
#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "common/checkpoint_layout.h"
#include "common/partition.h"
#include "proto/ps.grpc.pb.h"
#include "proto/scheduler.grpc.pb.h"
#include "tests/cluster_job.h"
#include "tests/records.h"
#include "tests/server_process.h"
#include "tests/test_cluster_tls.h"
#include "common/test_seed.h"
#include "worker/data/datagen.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

constexpr int kServers = 2;
constexpr int kWorkers = 2;
using Job = ClusterJob;

// Waits for a random point of the run: no checkpoint yet, or after the first few, plus up to 300 ms. Returns
// how long it waited.
absl::Duration RandomMoment(const Job& job, std::mt19937& rng) {
  const absl::Time start = absl::Now();
  const int64_t after = 50 * std::uniform_int_distribution<int>(0, 6)(rng);
  while (after > 0 && job.LatestCheckpointClock() < after && absl::Now() - start < absl::Seconds(60)) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  absl::SleepFor(absl::Milliseconds(std::uniform_int_distribution<int>(0, 300)(rng)));
  return absl::Now() - start;
}

int Trials() {
  const char* env = std::getenv("KESTREL_RECOVERY_TRIALS");
  int n = 2;
  if (env != nullptr && !absl::SimpleAtoi(env, &n)) n = 2;
  return std::max(n, 1);
}

class RecoveryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new std::string(TmpDir() + "/recovery_data");
    fs::create_directories(*data_);
    ASSERT_TRUE(GenerateCriteoData(SmallDatagenOptions(), *data_).ok());
    // The reference: the scheduler as every iteration's barrier. Every other job runs with the default
    // protocol (server-enforced clocks) and must end bitwise identical to it.
    Job job(TmpDir() + "/recovery_reference", *data_);
    job.SetLeaseClocks(0);
    ASSERT_TRUE(job.StartAll(/*resume=*/false).ok());
    auto outcome = job.Finish();
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    ASSERT_FALSE(outcome->tables.empty());
    reference_ = new Outcome(*outcome);
    reference_checkpoints_ = new std::string(job.checkpoints());
    reference_final_clock_ = job.LatestCheckpointClock();
    std::printf("reference: %s (last checkpoint at clock %lld)\n", DescribeOutcome(*reference_).c_str(),
                static_cast<long long>(job.LatestCheckpointClock()));
    job.KillAll();
  }

  // The uninterrupted run of the 6-epoch job (computed on first use): long enough for two kills mid-training.
  static const Outcome& LongReference() {
    if (long_reference_ == nullptr) {
      Job job(TmpDir() + "/recovery_long_reference", *data_, /*bounded=*/false, /*replicas=*/1, /*epochs=*/6);
      EXPECT_TRUE(job.StartAll(/*resume=*/false).ok());
      auto outcome = job.Finish();
      EXPECT_TRUE(outcome.ok()) << outcome.status();
      long_reference_ = new Outcome(outcome.ok() ? *outcome : Outcome{});
      job.KillAll();
    }
    return *long_reference_;
  }

  // The uninterrupted run of the bounded job (computed on first use).
  static const Outcome& BoundedReference() {
    if (bounded_reference_ == nullptr) {
      Job job(TmpDir() + "/recovery_bounded_reference", *data_, /*bounded=*/true);
      EXPECT_TRUE(job.StartAll(/*resume=*/false).ok());
      auto outcome = job.Finish();
      EXPECT_TRUE(outcome.ok()) << outcome.status();
      bounded_reference_ = new Outcome(outcome.ok() ? *outcome : Outcome{});
      std::printf("bounded reference: %s\n", DescribeOutcome(*bounded_reference_).c_str());
      job.KillAll();
    }
    return *bounded_reference_;
  }

  void ExpectReference(const absl::StatusOr<Outcome>& outcome, const std::string& what) {
    ASSERT_TRUE(outcome.ok()) << what << ": " << outcome.status();
    EXPECT_TRUE(Equal(*outcome, *reference_)) << what << ": " << DescribeOutcome(*outcome) << "\n reference: "
                                               << DescribeOutcome(*reference_);
  }

  static std::string* data_;
  static Outcome* reference_;
  static Outcome* bounded_reference_;
  static Outcome* long_reference_;
  static std::string* reference_checkpoints_;  // the reference job's checkpoint directory
  static int64_t reference_final_clock_;         // the clock of its final checkpoint (the job's last)
};
std::string* RecoveryTest::data_ = nullptr;
Outcome* RecoveryTest::reference_ = nullptr;
Outcome* RecoveryTest::bounded_reference_ = nullptr;
Outcome* RecoveryTest::long_reference_ = nullptr;
std::string* RecoveryTest::reference_checkpoints_ = nullptr;
int64_t RecoveryTest::reference_final_clock_ = -1;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Damages `path` one way: "flip" a byte in its middle, "truncate" it by a byte, or "delete" it.
void Damage(const std::string& path, const std::string& how) {
  if (how == "delete") {
    fs::remove(path);
  } else if (how == "truncate") {
    fs::resize_file(path, fs::file_size(path) - 1);
  } else {
    std::string contents = ReadAll(path);
    contents[contents.size() / 2] ^= 0x20;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
  }
}

// The scheduler is killed; a new one starts at the same address with --resume. It rebuilds the job from the
// latest manifest and from the members registering again: the old servers and workers are refused (exit 3)
// and restarted by the supervisor, every server restores the checkpoint, and the job ends as the reference.
TEST_F(RecoveryTest, RestartedSchedulerRebuildsTheJobFromTheManifest) {
  const TestSeed seed;
  std::mt19937 rng(seed.value());
  Job job(TmpDir() + "/recovery_scheduler", *data_);
  ASSERT_TRUE(job.StartAll(/*resume=*/false).ok());
  const int port = job.scheduler()->port();
  const absl::Duration delay = RandomMoment(job, rng);
  job.Kill(job.scheduler());
  const int64_t clock = job.LatestCheckpointClock();
  absl::Status restarted = job.StartScheduler(/*resume=*/true, "", port);
  ASSERT_TRUE(restarted.ok()) << restarted;
  absl::Status supervised = job.Supervise();
  ASSERT_TRUE(supervised.ok()) << supervised;
  ExpectReference(job.Finish(), absl::StrCat("scheduler killed after ", absl::FormatDuration(delay),
                                             " (last checkpoint at clock ", clock, ")"));
  job.KillAll();
}

// Every kind of checkpoint file, damaged every way: a server resuming from it refuses to start (exit 2) and
// its log names the file (and, for a shard's files, the shard). Nothing is ever silently re-initialized.
TEST_F(RecoveryTest, DamagedCheckpointFilesAreNamedAndRefused) {
  const std::string work = TmpDir() + "/recovery_corruption";
  const std::string copy = work + "/ckpt";
  fs::remove_all(work);
  fs::create_directories(work);
  fs::copy(*reference_checkpoints_, copy, fs::copy_options::recursive);
  std::string latest = ReadAll(copy + "/LATEST");
  latest = latest.substr(0, latest.find('\n'));
  const std::string shard_dir = copy + "/" + latest + "/shard-0000";
  std::vector<std::pair<std::string, std::string>> files = {{"LATEST", copy + "/LATEST"},
                                                            {"MANIFEST", copy + "/" + latest + "/MANIFEST"}};
  for (const char* kind : {"CURRENT", "MANIFEST-", "OPTIONS-", ".sst"}) {
    for (const auto& entry : fs::directory_iterator(shard_dir)) {
      const std::string name = entry.path().filename().string();
      if (name.find(kind) != std::string::npos) {
        files.emplace_back(kind, entry.path().string());
        break;
      }
    }
  }
  ASSERT_EQ(files.size(), 6u) << "every kind of file is present";
  int runs = 0;
  for (const auto& [kind, path] : files) {
    for (const std::string how : {"flip", "truncate", "delete"}) {
      SCOPED_TRACE(absl::StrCat(how, " ", kind, " (", path, ")"));
      fs::remove_all(copy);
      fs::copy(*reference_checkpoints_, copy, fs::copy_options::recursive);
      Damage(path, how);
      auto args = TestClusterTls::Get().WithFlags(
          {"--job_id=rec", "--num_servers=2", "--rank=0", "--port=0", "--checkpoint_dir=" + copy, "--resume"},
          kJob, "server", 0);
      ASSERT_TRUE(args.ok()) << args.status();
      auto server = ServerProcess::Spawn(RunfilePath("server/kestrel_server"), *args, work,
                                         absl::StrCat("server_", ++runs));
      ASSERT_TRUE(server.ok()) << server.status();
      absl::StatusOr<int> code = server->Wait(absl::Seconds(30));
      ASSERT_TRUE(code.ok()) << "the server started serving from a damaged checkpoint";
      EXPECT_EQ(*code, 2);
      const std::string log = ReadAll(server->log_path());
      EXPECT_NE(log.find(path), std::string::npos) << log;
      if (kind != "LATEST" && kind != "MANIFEST") { EXPECT_NE(log.find("server 0"), std::string::npos) << log; }
    }
  }
  // The undamaged copy loads, and the scheduler path refuses a damaged part too (exit 2, file and server named).
  fs::remove_all(copy);
  fs::copy(*reference_checkpoints_, copy, fs::copy_options::recursive);
  auto good_args = TestClusterTls::Get().WithFlags(
      {"--job_id=rec", "--num_servers=2", "--rank=0", "--checkpoint_dir=" + copy, "--resume"}, kJob, "server", 0);
  ASSERT_TRUE(good_args.ok()) << good_args.status();
  auto good = ServerProcess::Start(RunfilePath("server/kestrel_server"), *good_args, work, "server_good");
  ASSERT_TRUE(good.ok()) << good.status();
  (void)good->Stop(SIGTERM);
  const std::string sst = files.back().second;
  fs::remove(sst);
  auto scheduler_args = TestClusterTls::Get().WithFlags(
      {"--job_id=rec", "--num_servers=2", "--num_workers=2", "--consistency=asp", "--checkpoint_dir=" + copy,
       "--resume"},
      kJob, "scheduler", 0);
  ASSERT_TRUE(scheduler_args.ok()) << scheduler_args.status();
  auto scheduler = ServerProcess::Start(RunfilePath("scheduler/kestrel_scheduler"), *scheduler_args, work, "scheduler");
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  std::vector<ServerProcess> servers;
  for (int s = 0; s < kServers; ++s) {
    auto server_args = TestClusterTls::Get().WithFlags(
        {"--job_id=rec", "--num_servers=2", absl::StrCat("--rank=", s), "--scheduler=" + scheduler->address(),
         "--checkpoint_dir=" + copy},
        kJob, "server", s);
    ASSERT_TRUE(server_args.ok()) << server_args.status();
    auto server = ServerProcess::Start(RunfilePath("server/kestrel_server"), *server_args, work,
                                       absl::StrCat("cluster_server", s));
    ASSERT_TRUE(server.ok()) << server.status();
    servers.push_back(std::move(server).value());
  }
  absl::StatusOr<int> code = scheduler->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << "the scheduler went on with a damaged checkpoint";
  EXPECT_EQ(*code, 2);
  const std::string log = ReadAll(scheduler->log_path());
  EXPECT_NE(log.find(sst), std::string::npos) << log;
  EXPECT_NE(log.find("server 0"), std::string::npos) << log;
}

TEST_F(RecoveryTest, KilledServerIsReplacedAndTheJobEndsBitwiseIdentical) {
  const TestSeed seed;
  std::mt19937 rng(seed.value());
  for (int trial = 0; trial < Trials(); ++trial) {
    Job job(absl::StrCat(TmpDir(), "/recovery_server_", trial), *data_);
    ASSERT_TRUE(job.StartAll(/*resume=*/false).ok());
    const int victim = trial % kServers;
    const absl::Duration delay = RandomMoment(job, rng);
    const int64_t clock = job.LatestCheckpointClock();
    job.Kill(job.server(victim));
    ASSERT_TRUE(job.StartServer(victim).ok());
    ExpectReference(job.Finish(), absl::StrCat("trial ", trial, ": server ", victim, " killed after ",
                                               absl::FormatDuration(delay), " (last checkpoint at clock ", clock, ")"));
    job.KillAll();
  }
}

// Replicated (--replicas=2): a killed server's ranges fail over to their backups. The job ends bitwise identical
// to the unreplicated reference with no rollback at all (so no clock was redone: clocks only move back in a
// rollback), which the scheduler's records show, and no worker rejoined.
TEST_F(RecoveryTest, ReplicatedJobFailsOverAKilledServerWithoutRollingBack) {
  const TestSeed seed;
  std::mt19937 rng(seed.value());
  for (int trial = 0; trial < Trials(); ++trial) {
    Job job(absl::StrCat(TmpDir(), "/recovery_replicated_", trial), *data_, /*bounded=*/false, /*replicas=*/2);
    ASSERT_TRUE(job.StartAll(/*resume=*/false).ok());
    const int victim = std::uniform_int_distribution<int>(0, kServers - 1)(rng);
    // Once training runs (a server lost while the job forms holds nothing yet: no failover is needed).
    for (absl::Time give_up = absl::Now() + absl::Seconds(60); absl::Now() < give_up;) {
      absl::StatusOr<DescribeResponse> d = job.DescribeJob();
      if (d.ok() && d->min_clock() >= 1) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
    const absl::Duration delay = RandomMoment(job, rng);
    job.Kill(job.server(victim));
    ASSERT_TRUE(job.StartServer(victim).ok());  // as a launcher would: it joins, out of service
    const std::string what =
        absl::StrCat("trial ", trial, ": server ", victim, " killed after ", absl::FormatDuration(delay));
    absl::StatusOr<Outcome> outcome = job.Finish();
    ExpectReference(outcome, what);
    if (outcome.ok()) {
      EXPECT_EQ(outcome->scheduler.rollbacks(), 0u) << what;
      EXPECT_EQ(outcome->scheduler.failovers(), 1u) << what;
      // The replacement is re-replicated unless the job ended first; either way the records agree.
      const bool synced = outcome->scheduler.rereplications() == 1;
      EXPECT_EQ(outcome->scheduler.under_replicated_ranges(), synced ? 0 : kServers) << what;
      EXPECT_EQ(outcome->scheduler.view().out_of_service_size(), synced ? 0 : 1) << what;
    }
    for (int w = 0; w < kWorkers; ++w) {  // no worker stopped training, let alone rejoined
      const std::string log = ReadAll(job.worker(w)->log_path());
      EXPECT_EQ(log.find("training stopped"), std::string::npos) << what << ": worker " << w << "\n" << log;
      EXPECT_EQ(log.find("rolled back"), std::string::npos) << what << ": worker " << w;
    }
    job.KillAll();
  }
}

// Replicated: a server is killed early, its replacement is re-replicated (a synced copy of every range it
// holds, then back in service), and then the other server is killed: the replacement's copies take over. Two
// failovers, no rollback, bitwise identical to an uninterrupted run of the same (longer) job.
TEST_F(RecoveryTest, ReplicatedJobSurvivesASecondFailureAfterReReplication) {
  const Outcome& reference = LongReference();
  Job job(TmpDir() + "/recovery_replicated_second", *data_, /*bounded=*/false, /*replicas=*/2, /*epochs=*/6);
  ASSERT_TRUE(job.StartAll(/*resume=*/false).ok());
  auto wait_for = [&](const std::function<bool(const DescribeResponse&)>& done, const char* what) {
    for (absl::Time give_up = absl::Now() + absl::Seconds(60); absl::Now() < give_up;) {
      absl::StatusOr<DescribeResponse> d = job.DescribeJob();
      if (d.ok() && done(*d)) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    ADD_FAILURE() << "timed out waiting for " << what;
    return false;
  };
  ASSERT_TRUE(wait_for([](const DescribeResponse& d) { return d.min_clock() >= 1; }, "training"));
  job.Kill(job.server(0));
  ASSERT_TRUE(job.StartServer(0).ok());
  ASSERT_TRUE(wait_for([](const DescribeResponse& d) { return d.rereplications() == 1; }, "re-replication"));
  absl::StatusOr<DescribeResponse> before = job.DescribeJob();
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(before->view().job_state(), "running") << "the second kill must land while training";
  EXPECT_EQ(before->under_replicated_ranges(), 0);
  job.Kill(job.server(1));
  ASSERT_TRUE(job.StartServer(1).ok());
  absl::StatusOr<Outcome> outcome = job.Finish();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_TRUE(Equal(*outcome, reference)) << DescribeOutcome(*outcome) << "\n reference: " << DescribeOutcome(reference);
  EXPECT_EQ(outcome->scheduler.rollbacks(), 0u);
  EXPECT_EQ(outcome->scheduler.failovers(), 2u);
  job.KillAll();
}

// Replicated, both copies lost: the second death leaves a range with no copy, so the job rolls back to its last
// checkpoint as an unreplicated one does, and still ends bitwise identical.
TEST_F(RecoveryTest, ReplicatedJobLosingEveryCopyRollsBack) {
  const Outcome& reference = LongReference();
  Job job(TmpDir() + "/recovery_replicated_double", *data_, /*bounded=*/false, /*replicas=*/2, /*epochs=*/6);
  ASSERT_TRUE(job.StartAll(/*resume=*/false).ok());
  while (job.LatestCheckpointClock() < 50) absl::SleepFor(absl::Milliseconds(5));
  job.Kill(job.server(0));  // not restarted yet: no replacement to re-replicate onto
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (true) {  // the failover first
    absl::StatusOr<DescribeResponse> d = job.DescribeJob();
    if (d.ok() && d->failovers() == 1) break;
    ASSERT_LT(absl::Now(), deadline) << "server 0 was not failed over";
    absl::SleepFor(absl::Milliseconds(20));
  }
  job.Kill(job.server(1));  // the last copy of every range
  ASSERT_TRUE(job.StartServer(0).ok());
  ASSERT_TRUE(job.StartServer(1).ok());
  absl::StatusOr<Outcome> outcome = job.Finish();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_TRUE(Equal(*outcome, reference)) << DescribeOutcome(*outcome) << "\n reference: " << DescribeOutcome(reference);
  if (outcome.ok()) {
    EXPECT_GE(outcome->scheduler.rollbacks(), 1u);
    EXPECT_EQ(outcome->scheduler.rereplications(), 0u);
    EXPECT_EQ(outcome->scheduler.view().out_of_service_size(), 0);  // the rollback restored every server
  }
  job.KillAll();
}

TEST_F(RecoveryTest, KilledWorkerIsReplacedAndTheJobEndsBitwiseIdentical) {
  const TestSeed seed;
  std::mt19937 rng(seed.value());
  for (int trial = 0; trial < Trials(); ++trial) {
    Job job(absl::StrCat(TmpDir(), "/recovery_worker_", trial), *data_);
    ASSERT_TRUE(job.StartAll(/*resume=*/false).ok());
    const int victim = (trial + 1) % kWorkers;
    const absl::Duration delay = RandomMoment(job, rng);
    job.Kill(job.worker(victim));
    ASSERT_TRUE(job.StartWorker(victim).ok());
    ExpectReference(job.Finish(), absl::StrCat("trial ", trial, ": worker ", victim, " killed after ",
                                               absl::FormatDuration(delay)));
    job.KillAll();
  }
}

// A worker that dies with its pushes through a checkpoint's cut (clock 100) in, but before it reported them (its
// 8th report under 16-clock leases and a cut every 50: at 16, 32, 48, 50, 66, 82, 98 and 100): its replacement
// continues at the cut, where the servers hold its updates, and tells the scheduler so before asking to start
// it, or the cut would wait for a report that never comes. The job ends bitwise identical.
TEST_F(RecoveryTest, WorkerDeadBeforeReportingTheCheckpointsCutIsReplacedThere) {
  Job job(TmpDir() + "/recovery_unreported", *data_);
  job.SetLeaseClocks(16);
  ASSERT_TRUE(job.StartScheduler(/*resume=*/false).ok());
  for (int s = 0; s < 2; ++s) ASSERT_TRUE(job.StartServer(s).ok());
  ASSERT_TRUE(job.StartWorker(0).ok());
  ASSERT_TRUE(job.StartWorker(1, "worker.report.before@8").ok());
  absl::StatusOr<int> died = job.worker(1)->Wait(absl::Seconds(60));
  ASSERT_TRUE(died.ok()) << "the fault point was not reached: " << died.status();
  ASSERT_EQ(*died, 128 + SIGKILL);
  ASSERT_TRUE(job.StartWorker(1).ok());
  ExpectReference(job.Finish(), "worker 1 dead before reporting clock 100");
  std::ifstream log(job.worker(1)->log_path());
  const std::string text((std::istreambuf_iterator<char>(log)), {});
  EXPECT_NE(text.find("the servers hold this rank's updates through clock 100 (the scheduler's last report: 98)"),
            std::string::npos)
      << "the replacement did not start ahead of the scheduler's report at the cut:" << LogTail(job.worker(1)->log_path(), 20);
  job.KillAll();
}

// Server-enforced clocks (--lease_clocks): the servers hold each read until the clocks it must see are in, and
// workers ask the scheduler once per lease. The arithmetic is the same, so the job ends bitwise identical to the
// reference run with the scheduler as every iteration's barrier; so does it after a worker is killed while the
// other's reads wait at the servers for its pushes (its replacement continues where the servers hold its
// updates, not at its last report, up to a lease behind), and after a server is killed (the servers restart
// their clocks at the checkpoint's, and answer no read of a later clock before every worker's updates are in).
TEST_F(RecoveryTest, LeasedJobEndsAndRecoversBitwiseIdenticalToTheSchedulerBarrier) {
  const TestSeed seed;
  std::mt19937 rng(seed.value());
  {
    Job job(TmpDir() + "/recovery_leased", *data_);
    job.SetLeaseClocks(16);
    ASSERT_TRUE(job.StartAll(/*resume=*/false).ok());
    ExpectReference(job.Finish(), "leased, uninterrupted");
    job.KillAll();
  }
  for (const char* victim : {"worker", "server"}) {
    Job job(absl::StrCat(TmpDir(), "/recovery_leased_", victim), *data_);
    job.SetLeaseClocks(16);
    ASSERT_TRUE(job.StartAll(/*resume=*/false).ok());
    // Mid-training: after the second checkpoint, plus up to 100 ms.
    const absl::Time start = absl::Now();
    while (job.LatestCheckpointClock() < 100 && absl::Now() - start < absl::Seconds(60)) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    absl::SleepFor(absl::Milliseconds(std::uniform_int_distribution<int>(0, 100)(rng)));
    const absl::Duration delay = absl::Now() - start;
    if (std::string(victim) == "worker") {
      job.Kill(job.worker(1));
      ASSERT_TRUE(job.StartWorker(1).ok());
    } else {
      job.Kill(job.server(0));
      ASSERT_TRUE(job.StartServer(0).ok());
    }
    ExpectReference(job.Finish(), absl::StrCat("leased: ", victim, " killed after ", absl::FormatDuration(delay)));
    job.KillAll();
  }
}

// A stall of the scheduler (SIGSTOP for 6 s mid-training, as a VM pause would) restarts no one: when it runs
// again it judges members by the time it was running (MembershipOptions::stall_threshold), the members' calls
// that waited on it are answered, and the job ends bitwise identical with no rollback. (Finish() without
// supervision: any member that exited fails the test.)
TEST_F(RecoveryTest, SchedulerPausedForSixSecondsRestartsNoOne) {
  Job job(TmpDir() + "/recovery_scheduler_pause", *data_);
  ASSERT_TRUE(job.StartAll(/*resume=*/false).ok());
  ASSERT_TRUE(job.WaitForClock(20).ok());
  absl::StatusOr<DescribeResponse> before = job.DescribeJob();
  ASSERT_TRUE(before.ok()) << before.status();
  const pid_t scheduler = job.scheduler()->pid();
  ASSERT_EQ(kill(scheduler, SIGSTOP), 0);
  absl::SleepFor(absl::Seconds(6));
  ASSERT_EQ(kill(scheduler, SIGCONT), 0);
  absl::StatusOr<Outcome> outcome = job.Finish();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->scheduler.rollbacks(), 0u);
  EXPECT_EQ(outcome->scheduler.view().generation(), before->view().generation())
      << "a member was declared dead or registered again";
  ExpectReference(outcome, "scheduler paused for 6 s");
  job.KillAll();
}

// With bounded tables (admission, expiry, eviction; their sketches and tombstones in checkpoints), a killed
// server or worker still leaves the job bitwise identical to the uninterrupted bounded run.
TEST_F(RecoveryTest, BoundedTablesRecoverBitwiseIdenticalToo) {
  const Outcome& reference = BoundedReference();
  ASSERT_FALSE(reference.tables.empty());
  EXPECT_NE(reference.tables, reference_->tables) << "the bounds changed nothing";
  const TestSeed seed;
  std::mt19937 rng(seed.value());
  for (int trial = 0; trial < Trials(); ++trial) {
    Job job(absl::StrCat(TmpDir(), "/recovery_bounded_", trial), *data_, /*bounded=*/true);
    ASSERT_TRUE(job.StartAll(/*resume=*/false).ok());
    const absl::Duration delay = RandomMoment(job, rng);
    const int64_t clock = job.LatestCheckpointClock();
    std::string what;
    if (trial % 2 == 0) {
      job.Kill(job.server(trial / 2 % kServers));
      ASSERT_TRUE(job.StartServer(trial / 2 % kServers).ok());
      what = "server";
    } else {
      job.Kill(job.worker(1));
      ASSERT_TRUE(job.StartWorker(1).ok());
      what = "worker";
    }
    const absl::StatusOr<Outcome> outcome = job.Finish();
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    EXPECT_TRUE(Equal(*outcome, reference))
        << "trial " << trial << ": " << what << " killed after " << absl::FormatDuration(delay)
        << " (last checkpoint at clock " << clock << "): " << DescribeOutcome(*outcome) << "\n reference: "
        << DescribeOutcome(reference);
    job.KillAll();
  }
}

// A bounded table with a disk tier: rows move to disk and back while copy-on-write checkpoints are written (the
// disk tier's writes into the store wait for the snapshot). A server killed halfway through writing one ends the
// job bitwise identical to the uninterrupted run.
TEST_F(RecoveryTest, DiskTierTablesRecoverBitwiseIdenticalFromAKillMidWrite) {
  const std::string model =
      "model { type: LOGISTIC_REGRESSION sparse_capacity { max_memory_bytes: 32768 max_disk_bytes: 67108864 } }";
  std::optional<Outcome> reference;
  bool spilled = false;
  {
    Job job(TmpDir() + "/recovery_disk_reference", *data_, false, 1, 2, kServers, kWorkers, model);
    ASSERT_TRUE(job.StartAll(/*resume=*/false).ok());
    const absl::StatusOr<Outcome> outcome = job.Finish();
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    reference = *outcome;
    // A disk tier creates its file on the first row it takes (server/shard_store.h).
    const CheckpointLayout layout(job.checkpoints());
    for (int s = 0; s < kServers; ++s) {
      std::error_code error;
      for (const fs::directory_entry& file : fs::directory_iterator(layout.LiveDir(s) + "/cold", error)) {
        spilled |= file.is_regular_file();
      }
    }
  }
  // Rows left memory (a server's disk tier holds a file of them), and came back exact (the predictions are the same).
  EXPECT_TRUE(spilled) << "no row went to disk";
  EXPECT_EQ(reference->eval_fingerprint, reference_->eval_fingerprint);
  Job job(TmpDir() + "/recovery_disk_killed", *data_, false, 1, 2, kServers, kWorkers, model);
  ASSERT_TRUE(job.StartAll(/*resume=*/false, "", "server.checkpoint.half_written@2").ok());
  absl::StatusOr<int> code = job.server(1)->Wait(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << "the fault point was never reached: " << code.status();
  EXPECT_EQ(*code, 128 + SIGKILL);
  job.server(1).reset();
  ASSERT_TRUE(job.StartServer(1).ok());
  const absl::StatusOr<Outcome> outcome = job.Finish();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_TRUE(Equal(*outcome, *reference)) << DescribeOutcome(*outcome) << "\n reference: "
                                           << DescribeOutcome(*reference);
  job.KillAll();
}

// Compact tables: FM embeddings stored in bf16 with stochastic rounding and row-wise Adagrad. The run repeats
// bitwise, and a server killed at a random moment (its replacement restores the two-byte rows from the checkpoint)
// ends bitwise identical too.
TEST_F(RecoveryTest, CompactTablesRepeatAndRecoverBitwiseIdentical) {
  const std::string model =
      "model { type: FM embedding_dim: 8 embedding_optimizer { type: ROWWISE_ADAGRAD learning_rate: 0.05 } "
      "embedding_storage { type: VALUE_TYPE_BFLOAT16 stochastic_rounding: true } }";
  std::optional<Outcome> reference;
  {
    Job job(TmpDir() + "/recovery_compact_reference", *data_, false, 1, 2, kServers, kWorkers, model);
    ASSERT_TRUE(job.StartAll(/*resume=*/false).ok());
    const absl::StatusOr<Outcome> outcome = job.Finish();
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    reference = *outcome;
    std::printf("compact reference: %s\n", DescribeOutcome(*reference).c_str());
    job.KillAll();
  }
  const TestSeed seed;
  std::mt19937 rng(seed.value());
  for (int trial = 0; trial < 2; ++trial) {
    Job job(absl::StrCat(TmpDir(), "/recovery_compact_", trial), *data_, false, 1, 2, kServers, kWorkers, model);
    ASSERT_TRUE(job.StartAll(/*resume=*/false).ok());
    std::string what = "uninterrupted";
    if (trial == 1) {
      const absl::Duration delay = RandomMoment(job, rng);
      what = absl::StrCat("server 0 killed after ", absl::FormatDuration(delay), " (last checkpoint at clock ",
                          job.LatestCheckpointClock(), ")");
      job.Kill(job.server(0));
      ASSERT_TRUE(job.StartServer(0).ok());
    }
    const absl::StatusOr<Outcome> outcome = job.Finish();
    ASSERT_TRUE(outcome.ok()) << what << ": " << outcome.status();
    EXPECT_TRUE(Equal(*outcome, *reference))
        << what << ": " << DescribeOutcome(*outcome) << "\n reference: " << DescribeOutcome(*reference);
    job.KillAll();
  }
}

// A server lost after the last iteration. While the final checkpoint is written (every worker done, each
// waiting for it): the job rolls back to the checkpoint before and the workers redo their last iterations.
// Once it is committed (worker 0 evaluating, or every worker gone): the replacement restores it, and worker 0's
// evaluation reads the restored model. Either way the job ends as the reference.
TEST_F(RecoveryTest, ServerLostAfterTheLastIterationStillEndsBitwiseIdentical) {
  std::string latest = ReadAll(*reference_checkpoints_ + "/LATEST");
  latest = latest.substr(0, latest.find('\n'));
  int final_sequence = 0;
  ASSERT_TRUE(absl::SimpleAtoi(latest.substr(latest.find('-') + 1), &final_sequence)) << latest;
  {
    Job job(TmpDir() + "/recovery_final_checkpoint", *data_);
    const std::string fault = absl::StrCat("server.checkpoint.snapshot_cut@", final_sequence);
    ASSERT_TRUE(job.StartAll(/*resume=*/false, "", fault).ok());
    absl::StatusOr<int> code = job.server(1)->Wait(absl::Seconds(90));
    ASSERT_TRUE(code.ok()) << fault << " was never reached: " << code.status();
    EXPECT_EQ(*code, 128 + SIGKILL);
    job.server(1).reset();
    ASSERT_TRUE(job.StartServer(1).ok());
    ExpectReference(job.Finish(), "server 1 killed writing the final checkpoint");
    job.KillAll();
  }
  {
    Job job(TmpDir() + "/recovery_after_final", *data_);
    ASSERT_TRUE(job.StartAll(/*resume=*/false).ok());
    const absl::Time deadline = absl::Now() + absl::Seconds(90);
    while (job.LatestCheckpointClock() != reference_final_clock_ && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(2));
    }
    ASSERT_EQ(job.LatestCheckpointClock(), reference_final_clock_) << "no final checkpoint";
    job.Kill(job.server(1));
    ASSERT_TRUE(job.StartServer(1).ok());
    const absl::StatusOr<Outcome> outcome = job.Finish();
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    // The tables are compared only when someone still needed them (a rollback restored the final checkpoint);
    // a server replaced after every worker left holds nothing, and needs nothing: the model is in the checkpoint.
    EXPECT_EQ(outcome->eval_fingerprint, reference_->eval_fingerprint);
    EXPECT_EQ(outcome->logloss, reference_->logloss);
    job.KillAll();
  }
}

// A process dies inside each phase of a checkpoint; the job restarts from what is committed and ends the same.
TEST_F(RecoveryTest, DeathInEveryCheckpointPhaseRestoresACompleteCheckpoint) {
  struct Fault {
    std::string point;
    bool scheduler;  // the scheduler dies (else server 1, which is then replaced)
  };
  // @2: the second checkpoint, so a complete one exists to fall back to.
  // Copy-on-write (the default): the server dies after marking the cut, halfway through writing it while the
  // workers train on, once it is written, and once it is snapshotted.
  const std::vector<Fault> faults = {
      {"server.checkpoint.cut@2", false},           {"server.checkpoint.half_written@2", false},
      {"server.checkpoint.rows_written@2", false},    {"server.checkpoint.snapshot_cut@2", false},
      {"scheduler.checkpoint.shards_written@2", true}, {"scheduler.checkpoint.manifest_written@2", true},
      {"scheduler.checkpoint.committed@2", true},
  };
  for (const Fault& fault : faults) {
    SCOPED_TRACE(fault.point);
    Job job(absl::StrCat(TmpDir(), "/recovery_fault_", fault.point.substr(0, fault.point.find('@'))), *data_);
    absl::Status started =
        job.StartAll(/*resume=*/false, fault.scheduler ? fault.point : "", fault.scheduler ? "" : fault.point);
    ASSERT_TRUE(started.ok()) << started;
    std::optional<ServerProcess>& dying = fault.scheduler ? job.scheduler() : job.server(1);
    absl::StatusOr<int> code = dying->Wait(absl::Seconds(60));
    ASSERT_TRUE(code.ok()) << "the fault point was never reached: " << code.status();
    EXPECT_EQ(*code, 128 + SIGKILL);
    const int64_t committed = job.LatestCheckpointClock();
    EXPECT_EQ(committed, fault.point.rfind("scheduler.checkpoint.committed", 0) == 0 ? 100 : 50)
        << "LATEST names the newest complete checkpoint";
    if (fault.scheduler) {
      // The scheduler is gone: restart the whole job from the checkpoint directory.
      job.KillAll();
      ASSERT_TRUE(job.StartAll(/*resume=*/true).ok());
    } else {
      dying.reset();
      ASSERT_TRUE(job.StartServer(1).ok());
    }
    ExpectReference(job.Finish(), fault.point);
    job.KillAll();
  }
}

}  // namespace
}  // namespace kestrel
