// The order in which workers train the data (TrainerOptions::line_log): every line exactly once per epoch at 1, 2
// and 3 BSP workers, with and without shuffling, with a short and an empty last batch; the same examples in each
// global step at any worker count; header lines; drop_last; a worker resumed mid-window; an empty batch's empty
// push.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "worker/compute/cpu_backend.h"
#include "inprocess/local_ps_client.h"
#include "worker/model.h"
#include "worker/trainer.h"

namespace kestrel {
namespace {

std::string TmpDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

// A Criteo TSV file of `lines` examples, each line distinct, and a blank line among them.
std::string WriteCriteo(const std::string& name, int lines) {
  const std::string path = TmpDir() + "/" + name;
  std::ofstream out(path);
  for (int i = 0; i < lines; ++i) {
    if (i == lines / 2) out << "\n";
    out << (i % 3 == 0 ? 1 : 0);
    for (int j = 0; j < 13; ++j) out << "\t" << (i + j) % 17;
    for (int f = 0; f < 26; ++f) out << "\t" << absl::StrCat(absl::Hex((i * 31 + f * 7) % 50 + 16));
    out << "\n";
  }
  return path;
}

// A BSP barrier among in-process workers: iteration c starts once every worker has finished c iterations. A
// worker that fails (Fail) releases the others with an error.
class Barrier {
 public:
  explicit Barrier(int workers) : finished_(workers, 0) {}

  class Gate final : public ClockGate {
   public:
    Gate(Barrier* barrier, int rank) : barrier_(barrier), rank_(rank) {}
    absl::Status WaitToStart(int64_t clock) override { return barrier_->WaitFor(clock); }
    absl::Status Advance(int64_t finished, bool, const WorkerState&) override {
      absl::MutexLock lock(&barrier_->mu_);
      barrier_->finished_[rank_] = finished;
      return absl::OkStatus();
    }
    absl::Status WaitAllFinished(int64_t iterations) override { return barrier_->WaitFor(iterations); }

   private:
    Barrier* const barrier_;
    const int rank_;
  };

  void Fail() {
    absl::MutexLock lock(&mu_);
    failed_ = true;
  }

 private:
  absl::Status WaitFor(int64_t clock) {
    absl::MutexLock lock(&mu_);
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (failed_) return true;
      for (int64_t f : finished_) {
        if (f < clock) return false;
      }
      return true;
    };
    mu_.Await(absl::Condition(&ready));
    return failed_ ? absl::AbortedError("another worker failed") : absl::OkStatus();
  }

  absl::Mutex mu_;
  std::vector<int64_t> finished_ ABSL_GUARDED_BY(mu_);
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
};

// One worker's line log: per clock, its epoch and lines.
struct Logged {
  int64_t epoch = 0;
  std::vector<uint64_t> lines;
};
std::map<int64_t, Logged> ReadLineLog(const std::string& path) {
  std::map<int64_t, Logged> out;
  std::ifstream in(path);
  std::string text;
  while (std::getline(in, text)) {
    std::istringstream fields(text);
    int64_t clock = 0;
    Logged logged;
    fields >> clock >> logged.epoch;
    uint64_t line = 0;
    while (fields >> line) logged.lines.push_back(line);
    out[clock] = logged;
  }
  return out;
}

// A BSP run of `workers` in-process workers (threads) over two in-process servers.
struct BspRun {
  std::vector<TrainResult> results;
  std::vector<std::map<int64_t, Logged>> logs;  // by rank
};
absl::StatusOr<BspRun> TrainBsp(const JobConfig& job, int workers, const std::string& name) {
  const Partition partition = *Partition::Uniform(2);
  std::vector<std::unique_ptr<Shard>> shards;
  std::vector<Shard*> views;
  for (int s = 0; s < 2; ++s) {
    ShardOptions shard_options;
    shard_options.owner = s;
    shard_options.bsp_workers = workers;
    KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<Shard> shard, Shard::Create(shard_options, partition));
    shards.push_back(std::move(shard));
    views.push_back(shards.back().get());
  }
  Barrier barrier(workers);
  BspRun run;
  run.results.resize(workers);
  std::vector<absl::Status> statuses(workers);
  std::vector<std::string> logs;
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    logs.push_back(absl::StrCat(TmpDir(), "/", name, "-", workers, "-", w, ".lines"));
    std::filesystem::remove(logs.back());
  }
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      PsClientOptions client_options;
      client_options.worker_rank = w;
      client_options.bsp_pushes = true;
      std::unique_ptr<PsClient> client = NewLocalPsClient(client_options, views);
      auto backend = NewCpuBackend();
      Barrier::Gate gate(&barrier, w);
      TrainerOptions options;
      options.job = job;
      options.rank = w;
      options.num_workers = workers;
      options.partition = partition;
      options.evaluate = false;
      options.line_log = logs[w];
      Trainer trainer(options, client.get(), &gate, backend.get());
      absl::StatusOr<TrainResult> result = trainer.Run();
      if (result.ok()) {
        run.results[w] = *result;
      } else {
        statuses[w] = result.status();
        barrier.Fail();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& status : statuses) KESTREL_RETURN_IF_ERROR(status);
  for (const std::string& log : logs) run.logs.push_back(ReadLineLog(log));
  return run;
}

// Each epoch's lines over every worker of `run`; a line trained twice in an epoch fails the test.
std::map<int64_t, std::set<uint64_t>> LinesByEpoch(const BspRun& run) {
  std::map<int64_t, std::set<uint64_t>> epochs;
  for (const std::map<int64_t, Logged>& log : run.logs) {
    for (const auto& [clock, logged] : log) {
      for (uint64_t line : logged.lines) {
        EXPECT_TRUE(epochs[logged.epoch].insert(line).second) << "line " << line << " twice in epoch " << logged.epoch;
      }
    }
  }
  return epochs;
}

class TrainerDataOrderTest : public ::testing::Test {
 protected:
  // LR over `lines` Criteo lines, 2 epochs, a global batch of 12 examples.
  static JobConfig Job(const std::string& file, int workers) {
    JobConfig job;
    job.mutable_model()->set_type(ModelConfig::LOGISTIC_REGRESSION);
    job.mutable_data()->add_train_files(file);
    job.mutable_train()->set_batch_size(12 / workers);
    job.mutable_train()->set_epochs(2);
    job.mutable_train()->set_log_every_steps(1000);
    return job;
  }
};

// 97 lines: at 3 workers the shares hold 33, 32 and 32 lines: 9 iterations of 4, workers 1 and 2 train an empty
// last batch. 101 lines: every worker's last batch is short. The examples of each global step are the same at any
// worker count (the global batch is 12 throughout), and every epoch trains every line once.
TEST_F(TrainerDataOrderTest, EveryLineOncePerEpochAtAnyWorkerCountShuffledOrNot) {
  for (int lines : {97, 101}) {
    const std::string file = WriteCriteo(absl::StrCat("order-", lines, ".tsv"), lines);
    for (int64_t shuffle : {0, 10}) {
      std::map<int64_t, std::set<uint64_t>> reference;  // lines of each global step, 1 worker
      std::vector<uint64_t> first_epoch_order;
      for (int workers = 1; workers <= 3; ++workers) {
        SCOPED_TRACE(absl::StrCat(lines, " lines, shuffle ", shuffle, ", ", workers, " workers"));
        JobConfig job = Job(file, workers);
        job.mutable_train()->set_shuffle_buffer(shuffle);
        ASSERT_EQ(*IterationsOf(job, workers), 2 * 9);
        absl::StatusOr<BspRun> run = TrainBsp(job, workers, absl::StrCat("order-", lines, "-", shuffle));
        ASSERT_TRUE(run.ok()) << run.status();
        std::map<int64_t, std::set<uint64_t>> steps;
        int64_t examples = 0;
        for (int w = 0; w < workers; ++w) {
          EXPECT_EQ(run->results[w].steps, 18);
          examples += run->results[w].examples;
          ASSERT_EQ(run->logs[w].size(), 18u) << "worker " << w << " logs every iteration";
          for (const auto& [clock, logged] : run->logs[w]) {
            EXPECT_EQ(logged.epoch, clock / 9);
            EXPECT_LE(logged.lines.size(), static_cast<size_t>(12 / workers));
            steps[clock].insert(logged.lines.begin(), logged.lines.end());
          }
        }
        EXPECT_EQ(examples, 2 * lines);
        const std::map<int64_t, std::set<uint64_t>> epochs = LinesByEpoch(*run);
        EXPECT_EQ(epochs.size(), 2u);
        for (const auto& [epoch, read] : epochs) {
          EXPECT_EQ(read.size(), static_cast<size_t>(lines)) << "epoch " << epoch;
          EXPECT_EQ(*read.rbegin(), static_cast<uint64_t>(lines - 1));
        }
        if (workers == 1) {
          reference = steps;
          for (int64_t clock = 0; clock < 9; ++clock) {
            const std::vector<uint64_t>& batch = run->logs[0].at(clock).lines;
            first_epoch_order.insert(first_epoch_order.end(), batch.begin(), batch.end());
          }
          std::vector<uint64_t> second_epoch_order;
          for (int64_t clock = 9; clock < 18; ++clock) {
            const std::vector<uint64_t>& batch = run->logs[0].at(clock).lines;
            second_epoch_order.insert(second_epoch_order.end(), batch.begin(), batch.end());
          }
          if (shuffle == 0) {
            EXPECT_EQ(second_epoch_order, first_epoch_order);
            for (size_t i = 0; i < first_epoch_order.size(); ++i) EXPECT_EQ(first_epoch_order[i], i);
          } else {
            EXPECT_NE(second_epoch_order, first_epoch_order) << "every epoch is shuffled anew";
          }
        } else {
          EXPECT_EQ(steps, reference) << "a global step's examples depend on the worker count";
        }
      }
    }
  }
}

TEST_F(TrainerDataOrderTest, DropLastTrainsTheSmallestShareWholeBatchesOnly) {
  const std::string file = WriteCriteo("drop-last.tsv", 101);
  for (int workers = 1; workers <= 3; ++workers) {
    SCOPED_TRACE(absl::StrCat(workers, " workers"));
    JobConfig job = Job(file, workers);
    job.mutable_train()->set_drop_last(true);
    job.mutable_train()->set_shuffle_buffer(16);
    // floor(floor(101 / workers) / (12 / workers)): 8, 8 (50 / 6) and 8 (33 / 4).
    ASSERT_EQ(*IterationsOf(job, workers), 2 * 8);
    absl::StatusOr<BspRun> run = TrainBsp(job, workers, "drop-last");
    ASSERT_TRUE(run.ok()) << run.status();
    for (int w = 0; w < workers; ++w) {
      EXPECT_EQ(run->results[w].examples, 2 * 8 * (12 / workers));
      for (const auto& [clock, logged] : run->logs[w]) {
        EXPECT_EQ(logged.lines.size(), static_cast<size_t>(12 / workers)) << "clock " << clock;
      }
    }
    const std::map<int64_t, std::set<uint64_t>> epochs = LinesByEpoch(*run);
    EXPECT_EQ(epochs.size(), 2u);
    for (const auto& [epoch, read] : epochs) EXPECT_EQ(read.size(), 96u) << "epoch " << epoch;
  }
  JobConfig small = Job(file, 1);
  small.mutable_train()->set_batch_size(200);
  EXPECT_EQ(*IterationsOf(small, 1), 2) << "one short batch per epoch";
  small.mutable_train()->set_drop_last(true);
  EXPECT_EQ(IterationsOf(small, 1).status().code(), absl::StatusCode::kFailedPrecondition);
}

// A CSV with a header line in each file: the headers are neither trained nor counted.
TEST_F(TrainerDataOrderTest, HeaderLinesAreNotTrained) {
  std::vector<std::string> files;
  for (int f = 0; f < 2; ++f) {
    files.push_back(absl::StrCat(TmpDir(), "/header-", f, ".csv"));
    std::ofstream out(files.back());
    out << "label,item\n";
    for (int i = 0; i < 25 + f; ++i) out << (i % 2) << ",v" << (f * 100 + i) << "\n";
  }
  for (int workers = 1; workers <= 3; ++workers) {
    SCOPED_TRACE(absl::StrCat(workers, " workers"));
    JobConfig job = Job(files[0], workers);
    job.mutable_data()->add_train_files(files[1]);
    job.mutable_data()->set_format(DataConfig::DELIMITED);
    FeatureSchema& schema = *job.mutable_data()->mutable_schema();
    schema.set_header(true);
    schema.add_features()->set_name("item");
    job.mutable_train()->set_shuffle_buffer(8);
    // 51 lines in steps of 12: 5 per epoch.
    ASSERT_EQ(*IterationsOf(job, workers), 2 * 5);
    absl::StatusOr<BspRun> run = TrainBsp(job, workers, "header");
    ASSERT_TRUE(run.ok()) << run.status();
    const std::map<int64_t, std::set<uint64_t>> epochs = LinesByEpoch(*run);
    ASSERT_EQ(epochs.size(), 2u);
    for (const auto& [epoch, read] : epochs) {
      EXPECT_EQ(read.size(), 51u) << "epoch " << epoch;
      EXPECT_EQ(*read.rbegin(), 50u) << "epoch " << epoch;
    }
  }
}

// Records each Advance's state.
class StateGate final : public ClockGate {
 public:
  absl::Status WaitToStart(int64_t) override { return absl::OkStatus(); }
  absl::Status Advance(int64_t finished, bool, const WorkerState& state) override {
    absl::MutexLock lock(&mu_);
    states_[finished] = state;
    return absl::OkStatus();
  }
  absl::Status WaitAllFinished(int64_t) override { return absl::OkStatus(); }
  WorkerState At(int64_t clock) {
    absl::MutexLock lock(&mu_);
    return states_.at(clock);
  }

 private:
  absl::Mutex mu_;
  std::map<int64_t, WorkerState> states_ ABSL_GUARDED_BY(mu_);
};

// A worker replaced mid-window continues from the reported reader position (re-reading the window, not the
// epoch) with exactly the lines the uninterrupted run trained.
TEST_F(TrainerDataOrderTest, AWorkerResumedMidWindowTrainsTheSameLines) {
  const std::string file = WriteCriteo("resume.tsv", 101);
  JobConfig job = Job(file, 1);
  job.mutable_train()->set_shuffle_buffer(40);
  auto train = [&](int64_t start_clock, const WorkerState& start_state, const std::string& log, StateGate* gate) {
    std::filesystem::remove(log);
    ShardOptions shard_options;
    auto shard = *Shard::Create(shard_options, *Partition::Uniform(1));
    std::unique_ptr<PsClient> client = NewLocalPsClient(PsClientOptions(), {shard.get()});
    auto backend = NewCpuBackend();
    TrainerOptions options;
    options.job = job;
    options.evaluate = false;
    options.line_log = log;
    options.start_clock = start_clock;
    options.start_state = start_state;
    Trainer trainer(options, client.get(), gate, backend.get());
    return trainer.Run();
  };
  StateGate gate;
  const std::string full_log = TmpDir() + "/resume-full.lines";
  ASSERT_TRUE(train(0, WorkerState(), full_log, &gate).ok());
  const std::map<int64_t, Logged> full = ReadLineLog(full_log);
  for (int64_t clock : {2, 5, 12}) {  // inside the first and second windows of epoch 0, and in epoch 1
    const WorkerState state = gate.At(clock);
    EXPECT_EQ(state.clock(), clock);
    StateGate resumed_gate;
    const std::string log = absl::StrCat(TmpDir(), "/resume-", clock, ".lines");
    absl::StatusOr<TrainResult> resumed = train(clock, state, log, &resumed_gate);
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    const std::map<int64_t, Logged> rest = ReadLineLog(log);
    ASSERT_EQ(rest.size(), full.size() - clock);
    for (const auto& [c, logged] : rest) EXPECT_EQ(logged.lines, full.at(c).lines) << "clock " << c;
  }
  // The reported position: the window's first line, and the next position (one worker: the lines trained).
  WorkerState state = gate.At(5);
  EXPECT_EQ(state.reader().window_line(), 40u);
  EXPECT_EQ(state.reader().global_line(), 60u);
  // The worker reads from the position it is given, not from the epoch's start: told that positions 60 .. 65 were
  // read, it goes on from 66.
  state.mutable_reader()->set_global_line(66);
  StateGate skipped_gate;
  const std::string log = TmpDir() + "/resume-skipped.lines";
  ASSERT_TRUE(train(5, state, log, &skipped_gate).ok());
  std::vector<uint64_t> order;  // epoch 0's lines in position order
  for (int64_t c = 0; c < 9; ++c) order.insert(order.end(), full.at(c).lines.begin(), full.at(c).lines.end());
  EXPECT_EQ(ReadLineLog(log).at(5).lines, std::vector<uint64_t>(order.begin() + 66, order.begin() + 78));
}

// What an empty batch pushes: an empty dense part completes a BSP clock as a zero gradient would, and outside
// BSP changes nothing, where a zero gradient through Adam still moves the tensor (its moments decay).
TEST(EmptyBatchPushTest, AnEmptyDensePushCountsInBspAndChangesNothingElsewhere) {
  TableConfig dense;
  dense.set_name("d");
  dense.set_kind(TableConfig::DENSE);
  dense.set_dense_size(5);
  dense.set_dim(2);
  dense.mutable_optimizer()->set_type(OptimizerConfig::ADAM);
  dense.mutable_optimizer()->set_learning_rate(0.1f);
  const std::vector<float> grads = {1, -2, 3, -4, 5}, zeros(5, 0.0f);
  auto pull = [](PsClient& client, int64_t clock) {
    std::vector<float> out(5);
    EXPECT_TRUE(client.PullDense("d", absl::MakeSpan(out), CallClock{clock}).ok());
    return out;
  };
  // BSP, 2 workers: worker 1 pushes nothing, or zeros; the same update either way.
  std::vector<std::vector<float>> bsp;
  for (bool empty : {true, false}) {
    ShardOptions shard_options;
    shard_options.bsp_workers = 2;
    auto shard = *Shard::Create(shard_options, *Partition::Uniform(1));
    std::vector<std::unique_ptr<PsClient>> clients;
    for (int w = 0; w < 2; ++w) {
      PsClientOptions options;
      options.worker_rank = w;
      options.bsp_pushes = true;
      clients.push_back(NewLocalPsClient(options, {shard.get()}));
    }
    ASSERT_TRUE(clients[0]->CreateTable(dense).ok());
    pull(*clients[1], 0);  // worker 1 learns the table
    ASSERT_TRUE(clients[0]->PushDense("d", grads, CallClock{0}).ok());
    ASSERT_TRUE(clients[1]->PushDense("d", empty ? absl::Span<const float>() : zeros, CallClock{0}).ok());
    bsp.push_back(pull(*clients[0], 1));
    // A clock every worker leaves empty applies nothing.
    ASSERT_TRUE(clients[0]->PushDense("d", {}, CallClock{1}).ok());
    ASSERT_TRUE(clients[1]->PushDense("d", {}, CallClock{1}).ok());
    EXPECT_EQ(pull(*clients[0], 2), bsp.back());
  }
  EXPECT_EQ(bsp[0], bsp[1]);
  EXPECT_NE(bsp[0], std::vector<float>(5, 0.0f));
  // ASP: after one real step, an empty push leaves the tensor as it is; a zero gradient does not.
  auto shard = *Shard::Create(ShardOptions(), *Partition::Uniform(1));
  PsClientOptions options;
  options.worker_rank = 0;
  std::unique_ptr<PsClient> client = NewLocalPsClient(options, {shard.get()});
  ASSERT_TRUE(client->CreateTable(dense).ok());
  ASSERT_TRUE(client->PushDense("d", grads, CallClock{0}).ok());
  const std::vector<float> stepped = pull(*client, 1);
  ASSERT_TRUE(client->PushDense("d", {}, CallClock{1}).ok());
  EXPECT_EQ(pull(*client, 2), stepped);
  ASSERT_TRUE(client->PushDense("d", zeros, CallClock{2}).ok());
  EXPECT_NE(pull(*client, 3), stepped) << "a zero gradient through Adam moves the tensor";
}

}  // namespace
}  // namespace kestrel
