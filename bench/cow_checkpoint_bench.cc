// cow_checkpoint_bench: how long a checkpoint holds training, rows written inside the cut against copy-on-write (only
// the cut marked inside it), and training throughput while a copy-on-write checkpoint is written against without
// one. Also the bytes per row of compact (Q8) checkpoints.
//
//   bench/run_cow_checkpoint_bench.sh                  # 1M and 10M rows, 3 runs; writes bench/results
//   bench/run_cow_checkpoint_bench.sh --rows=1000000 --runs=1 --output=/tmp/quick.md
//
// One process, one Shard, one sparse table "emb": dim 16, ADAGRAD (a stored row is 16 values + 16 accumulators =
// 128 bytes, plus RocksDB's 12-byte key), every row dirty before each checkpoint (Table::MarkAllDirty and a fresh
// working store: a full checkpoint, the most a server ever writes). For each --rows, each of --runs runs:
//   1. Written inside the cut: ShardStore::TEST_WriteInsideTheCut, Checkpoint timed: requests (and the scheduler's
//      workers) wait for all of it.
//   2. Training alone: a trainer thread runs steps (a pull then a push of --step_keys distinct keys drawn uniformly
//      from the table's, pre-drawn) for --baseline_seconds: steps/s and CPU-seconds per step.
//   3. Copy-on-write: BeginCheckpoint timed (the hold), then FinishCheckpoint while the trainer keeps running:
//      steps/s during the write, the retained copies' peak, the pushes' back-pressure wait.
//   4. Training alone again, as long as the write took (at least --baseline_seconds).
// The throughput ratio is (3) against (2) and (4) together, of the same run; every figure is the median (min, max)
// over runs. Each checkpoint's directory is deleted once measured.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "common/checkpoint_layout.h"
#include "common/hash.h"
#include "common/partition.h"
#include "common/status.h"
#include "proto/checkpoint.pb.h"
#include "proto/table.pb.h"
#include "server/shard.h"
#include "server/shard_store.h"

ABSL_FLAG(std::string, rows, "1000000,10000000", "Comma-separated table sizes (rows, all dirty at each checkpoint).");
ABSL_FLAG(int, runs, 3, "Runs per size; every figure is the median (min, max) over runs.");
ABSL_FLAG(int64_t, step_keys, 32768, "Distinct keys per training step (pull + push).");
ABSL_FLAG(double, baseline_seconds, 3, "Seconds of training without a checkpoint per run.");
ABSL_FLAG(int64_t, retained_mb, 512, "The shard's bound on retained copies (kestrel_server --checkpoint_retained_mb).");
ABSL_FLAG(int64_t, q8_rows, 1000000, "Rows of the compact-checkpoint comparison (0: skip it).");
ABSL_FLAG(std::string, dir, "/tmp",
          "Where the checkpoints go: a fresh directory is made inside it and removed at the end.");
ABSL_FLAG(std::string, output, "bench/results/cow_checkpoint_bench.md", "Markdown report path ('' to skip).");
ABSL_FLAG(std::string, git_commit, "", "Commit being measured.");
ABSL_FLAG(std::string, invocation, "", "The command that reproduces this run (the run_*.sh script passes its own).");

namespace kestrel {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kDim = 16;
constexpr int64_t kFillBatch = 65536;
constexpr int kStepBatches = 32;  // pre-drawn steps, used in turn

using bench::ProcessCpuSeconds;
using bench::SecondsSince;

TableConfig Emb(CheckpointCodec codec) {
  TableConfig c;
  c.set_name("emb");
  c.set_dim(kDim);
  c.set_seed(1);
  c.mutable_initializer()->set_type(InitializerConfig::NORMAL);
  c.mutable_optimizer()->set_type(OptimizerConfig::ADAGRAD);
  c.set_checkpoint_codec(codec);
  return c;
}

RequestContext Ctx() {
  RequestContext ctx;
  ctx.job_id = "kestrel";
  return ctx;
}

uint64_t KeyOf(int64_t i) { return Mix64(static_cast<uint64_t>(i) + 1); }

// One server: a shard holding `rows` rows of "emb" (all pushed once), and its store.
struct Server {
  std::unique_ptr<Shard> shard;
  std::unique_ptr<ShardStore> store;
  double fill_seconds = 0;
};

absl::StatusOr<Server> MakeServer(const CheckpointLayout& layout, int id, int64_t rows, CheckpointCodec codec) {
  Server server;
  ShardOptions options;
  options.job_id = "kestrel";
  options.max_cut_retained_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_retained_mb)) << 20;
  KESTREL_ASSIGN_OR_RETURN(server.shard, Shard::Create(options, *Partition::Uniform(1)));
  KESTREL_ASSIGN_OR_RETURN(server.store, ShardStore::Open(layout, id));
  KESTREL_RETURN_IF_ERROR(server.shard->CreateTable(Ctx(), Emb(codec)).status());
  const Clock::time_point start = Clock::now();
  std::vector<uint64_t> keys;
  std::vector<float> grads;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0, 0.1f);
  for (int64_t first = 0; first < rows; first += kFillBatch) {
    keys.clear();
    for (int64_t i = first; i < std::min(rows, first + kFillBatch); ++i) keys.push_back(KeyOf(i));
    std::sort(keys.begin(), keys.end());
    grads.resize(keys.size() * kDim);
    for (float& g : grads) g = normal(rng);
    KESTREL_RETURN_IF_ERROR(server.shard->Push(Ctx(), "emb", keys, grads, kDim));
  }
  server.fill_seconds = SecondsSince(start);
  return server;
}

// Every row dirty and a fresh, empty working store: the next checkpoint writes the whole table.
absl::Status MakeAllDirty(Server& server) {
  KESTREL_RETURN_IF_ERROR(server.shard->Exclusive([](const std::vector<Table*>& tables) {
    for (Table* t : tables) t->MarkAllDirty();
    return absl::OkStatus();
  }));
  return server.store->Rebase();
}

// Pre-drawn training steps: sorted distinct keys and their gradients.
struct Steps {
  std::vector<std::vector<uint64_t>> keys;
  std::vector<float> grads;
};

Steps DrawSteps(int64_t rows, int64_t step_keys) {
  Steps steps;
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0, 0.1f);
  for (int b = 0; b < kStepBatches; ++b) {
    std::vector<uint64_t> keys;
    for (int64_t i = 0; i < step_keys; ++i) keys.push_back(KeyOf(static_cast<int64_t>(rng() % rows)));
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    steps.keys.push_back(std::move(keys));
  }
  steps.grads.resize(static_cast<size_t>(step_keys) * kDim);
  for (float& g : steps.grads) g = normal(rng);
  return steps;
}

// Runs training steps on its own thread until Stop(); counts them.
class Trainer {
 public:
  Trainer(Shard& shard, const Steps& steps) : shard_(shard), steps_(steps), thread_([this] { Run(); }) {}
  ~Trainer() { Stop(); }
  int64_t steps() const { return done_.load(); }
  // Returns once no step is in flight, and none starts until Resume (the scheduler's hold at a clock boundary).
  void Pause() {
    pause_ = true;
    while (!paused_.load() && !ended_.load()) std::this_thread::yield();  // ended: on an error (status())
  }
  void Resume() {
    paused_ = false;
    pause_ = false;
  }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  const absl::Status& status() const { return status_; }

 private:
  void Run() {
    std::string values;
    for (int64_t i = 0; !stop_.load(); ++i) {
      if (pause_.load()) {
        paused_ = true;
        while (pause_.load() && !stop_.load()) std::this_thread::yield();
        continue;
      }
      const std::vector<uint64_t>& keys = steps_.keys[i % steps_.keys.size()];
      absl::Status s = shard_.Pull(Ctx(), "emb", keys, kDim, &values);
      if (s.ok()) {
        s = shard_.Push(Ctx(), "emb", keys, absl::MakeConstSpan(steps_.grads.data(), keys.size() * kDim), kDim);
      }
      if (!s.ok()) {
        status_ = s;
        ended_ = true;
        return;
      }
      done_.fetch_add(1);
    }
  }

  Shard& shard_;
  const Steps& steps_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> pause_{false};
  std::atomic<bool> paused_{false};
  std::atomic<bool> ended_{false};
  std::atomic<int64_t> done_{0};
  absl::Status status_;
  std::thread thread_;
};

absl::Status MeasureSize(const CheckpointLayout& layout, int64_t rows, int runs, bench::Figures& figures,
                         std::string* notes) {
  const std::string label = rows >= 1000000 ? absl::StrCat(rows / 1000000, "M") : absl::StrCat(rows);
  KESTREL_ASSIGN_OR_RETURN(Server server, MakeServer(layout, 0, rows, CHECKPOINT_FP32));
  const Steps steps = DrawSteps(rows, absl::GetFlag(FLAGS_step_keys));
  absl::StrAppend(notes, absl::StrFormat("- %s rows: filled in %.1f s.\n", label, server.fill_seconds));
  static uint64_t sequence = 0;
  for (int run = 0; run < runs; ++run) {
    // 1. The write inside the cut.
    KESTREL_RETURN_IF_ERROR(MakeAllDirty(server));
    server.store->TEST_WriteInsideTheCut(true);
    Clock::time_point start = Clock::now();
    std::string name = CheckpointLayout::CheckpointName(++sequence);
    KESTREL_ASSIGN_OR_RETURN(const ShardCheckpoint old, server.store->Checkpoint(*server.shard, name));
    const double old_hold = SecondsSince(start);
    server.store->TEST_WriteInsideTheCut(false);
    std::error_code error;
    fs::remove_all(layout.CheckpointDir(name), error);  // a full copy of the rows: not kept

    // 2. Training alone.
    KESTREL_RETURN_IF_ERROR(MakeAllDirty(server));
    double cpu = ProcessCpuSeconds();
    start = Clock::now();
    auto trainer = std::make_unique<Trainer>(*server.shard, steps);
    std::this_thread::sleep_for(std::chrono::duration<double>(absl::GetFlag(FLAGS_baseline_seconds)));
    int64_t before = trainer->steps();
    double seconds = SecondsSince(start);
    int64_t base_steps = before;
    double base_seconds = seconds;
    const double base_cpu = (ProcessCpuSeconds() - cpu) / std::max<int64_t>(before, 1);

    // 3. Copy-on-write: the cut while no step is in flight (as the scheduler holds the workers at a clock
    // boundary), then the write with the trainer running on.
    trainer->Pause();
    before = trainer->steps();
    start = Clock::now();
    cpu = ProcessCpuSeconds();
    name = CheckpointLayout::CheckpointName(++sequence);
    KESTREL_RETURN_IF_ERROR(server.store->BeginCheckpoint(*server.shard, name));
    const double cow_hold = SecondsSince(start);
    trainer->Resume();
    KESTREL_ASSIGN_OR_RETURN(const ShardCheckpoint cow, server.store->FinishCheckpoint());
    seconds = SecondsSince(start);
    const int64_t during = trainer->steps() - before;
    const double during_cpu = ProcessCpuSeconds() - cpu;
    fs::remove_all(layout.CheckpointDir(name), error);

    // 4. Training alone again, as long as the write took: the baseline spans the write.
    before = trainer->steps();
    start = Clock::now();
    std::this_thread::sleep_for(
        std::chrono::duration<double>(std::max(seconds, absl::GetFlag(FLAGS_baseline_seconds))));
    base_steps += trainer->steps() - before;
    base_seconds += SecondsSince(start);
    const double base_rate = base_steps / base_seconds;
    trainer->Stop();
    KESTREL_RETURN_IF_ERROR(trainer->status());
    if (cow.rows_written() != static_cast<uint64_t>(rows) || old.rows_written() != static_cast<uint64_t>(rows)) {
      return absl::InternalError(absl::StrFormat("wrote %d and %d rows, expected %d", old.rows_written(),
                                                 cow.rows_written(), rows));
    }
    const double cow_rate = during / seconds;
    figures.Add(absl::StrCat(label, ": hold, written inside the cut: ms"), "%.0f", 1e3 * old_hold);
    figures.Add(absl::StrCat(label, ": hold, copy-on-write (the cut): ms"), "%.2f", 1e3 * cow_hold);
    figures.Add(absl::StrCat(label, ": copy-on-write write + snapshot: s"), "%.2f", seconds);
    figures.Add(absl::StrCat(label, ": training without a checkpoint: steps/s"), "%.1f", base_rate);
    figures.Add(absl::StrCat(label, ": training while written: steps/s"), "%.1f", cow_rate);
    figures.Add(absl::StrCat(label, ": throughput while written / without"), "%.2f", cow_rate / base_rate);
    figures.Add(absl::StrCat(label, ": CPU-s per step without"), "%.4f", base_cpu);
    figures.Add(absl::StrCat(label, ": CPU-s per 1M rows written (writer + trainer's extra)"), "%.2f",
                (during_cpu - base_cpu * during) / (rows / 1e6));
    figures.Add(absl::StrCat(label, ": retained copies peak: MB"), "%.0f", cow.retained_peak_bytes() / 1e6);
    figures.Add(absl::StrCat(label, ": pushes' back-pressure wait: s"), "%.2f", cow.backpressure_seconds());
    std::printf("%s run %d: hold %.0f ms -> %.2f ms; steps/s %.1f -> %.1f (%.2f); retained peak %.0f MB\n",
                label.c_str(), run + 1, 1e3 * old_hold, 1e3 * cow_hold, base_rate, cow_rate, cow_rate / base_rate,
                cow.retained_peak_bytes() / 1e6);
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

// Bytes per row of a full checkpoint of the same rows, fp32 against Q8.
absl::Status MeasureCompact(const CheckpointLayout& layout, int64_t rows, bench::Figures& figures) {
  double per_row[2] = {0, 0};
  const CheckpointCodec codecs[2] = {CHECKPOINT_FP32, CHECKPOINT_Q8};
  for (int c = 0; c < 2; ++c) {
    KESTREL_ASSIGN_OR_RETURN(Server server, MakeServer(layout, 10 + c, rows, codecs[c]));
    KESTREL_ASSIGN_OR_RETURN(const ShardCheckpoint written,
                             server.store->Checkpoint(*server.shard, CheckpointLayout::CheckpointName(900 + c)));
    per_row[c] = static_cast<double>(written.bytes_written()) / written.rows_written();
    uint64_t files = 0;
    for (const CheckpointFile& f : written.files()) files += f.size();
    figures.Add(absl::StrCat(c == 0 ? "fp32" : "Q8", " checkpoint: bytes per row written (key + value)"), "%.1f",
                per_row[c]);
    figures.Add(absl::StrCat(c == 0 ? "fp32" : "Q8", " checkpoint: file bytes per row"), "%.1f",
                static_cast<double>(files) / rows);
  }
  figures.Add("bytes per row fp32 / Q8 (key + value)", "%.2f", per_row[0] / per_row[1]);
  // A stored row's key: the table name, a NUL and the 8-byte key (server/shard_store.cc).
  constexpr double kKeyBytes = sizeof("emb") + sizeof(uint64_t);
  figures.Add("value bytes per row fp32 / Q8", "%.2f", (per_row[0] - kKeyBytes) / (per_row[1] - kKeyBytes));
  return absl::OkStatus();
}

absl::Status RunBench(int argc, char** argv) {
  const Clock::time_point bench_start = Clock::now();
  const std::string load_start = bench::LoadAverage();
  std::vector<int64_t> sizes;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_rows), ',')) {
    int64_t rows = 0;
    if (!absl::SimpleAtoi(part, &rows) || rows < 1 || rows > (int64_t{1} << 30)) {
      return absl::InvalidArgumentError(absl::StrCat("--rows: bad size '", part, "'"));
    }
    sizes.push_back(rows);
  }
  const int runs = absl::GetFlag(FLAGS_runs);
  if (runs < 1) return absl::InvalidArgumentError("--runs must be >= 1");
  if (absl::GetFlag(FLAGS_step_keys) < 1) return absl::InvalidArgumentError("--step_keys must be >= 1");
  const bench::Machine machine =
      bench::DescribeMachine(argc, argv, absl::GetFlag(FLAGS_git_commit), absl::GetFlag(FLAGS_invocation));
  const std::string parent = bench::UserPath(absl::GetFlag(FLAGS_dir));
  std::error_code error;
  fs::create_directories(parent, error);
  std::string dir_template = absl::StrCat(parent, "/cow_checkpoint_bench.XXXXXX");
  if (::mkdtemp(dir_template.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::string work_dir = dir_template;

  bench::Figures figures, compact;
  std::string notes;
  absl::Status status = [&]() -> absl::Status {
    const CheckpointLayout layout(absl::StrCat(work_dir, "/ckpt"));
    for (int64_t rows : sizes) KESTREL_RETURN_IF_ERROR(MeasureSize(layout, rows, runs, figures, &notes));
    if (absl::GetFlag(FLAGS_q8_rows) > 0) {
      KESTREL_RETURN_IF_ERROR(MeasureCompact(layout, absl::GetFlag(FLAGS_q8_rows), compact));
    }
    return absl::OkStatus();
  }();
  fs::remove_all(work_dir, error);
  KESTREL_RETURN_IF_ERROR(status);

  std::string md = "# Kestrel cow_checkpoint_bench: checkpoints that do not stop training\n\n";
  absl::StrAppend(&md, "## Machine\n\n", bench::MachineMarkdown(machine, load_start));
  absl::StrAppend(&md, absl::StrFormat("| Bench runtime | %.0f s |\n\n", SecondsSince(bench_start)));
  absl::StrAppend(&md, bench::CommandMarkdown(machine));
  absl::StrAppend(
      &md, "## What is measured\n\n",
      absl::StrFormat(
          "One process, one Shard, one sparse table: dim %d, ADAGRAD (128 bytes of values and accumulators per "
          "row, plus a 12-byte key), every row dirty before each checkpoint (a full checkpoint: the most a server "
          "writes). Per size and run: the checkpoint **written inside the cut** (ShardStore::TEST_WriteInsideTheCut: "
          "requests and the scheduler's workers wait for the whole checkpoint), then %.0f s of **training alone** "
          "(one trainer thread: pull + push of %d distinct keys drawn uniformly from the table, pre-drawn), then a "
          "**copy-on-write** checkpoint: the trainer pauses between steps (as the scheduler holds workers at a clock "
          "boundary), BeginCheckpoint is the hold, and FinishCheckpoint (the write) runs while the trainer keeps "
          "going; throughput while written is counted from the cut to the write's end. Then training alone again "
          "for as long as the write took: the throughput without a checkpoint is over both windows. Retained "
          "copies are bounded at %d MiB. Both cores are shared by the trainer, the writer and RocksDB's flush: "
          "CPU-seconds are the process's, which carry over to machines with more cores.\n\n",
          kDim, absl::GetFlag(FLAGS_baseline_seconds), absl::GetFlag(FLAGS_step_keys),
          absl::GetFlag(FLAGS_retained_mb)),
      notes, "\n");
  absl::StrAppend(&md, "## Hold and throughput\n\n", figures.Markdown(), "\n");
  if (absl::GetFlag(FLAGS_q8_rows) > 0) {
    absl::StrAppend(&md, "## Compact (Q8) checkpoints\n\n",
                    absl::StrFormat("A full checkpoint of %d rows of the same table with checkpoint_codec "
                                    "CHECKPOINT_FP32 and CHECKPOINT_Q8.\n\n",
                                    absl::GetFlag(FLAGS_q8_rows)),
                    compact.Markdown(), "\n");
  }
  return bench::PublishReport(md, absl::GetFlag(FLAGS_output));
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Kestrel cow_checkpoint_bench: checkpoint holds (written inside the cut vs copy-on-write) and training throughput "
      "during a checkpoint. Usually run through bench/run_cow_checkpoint_bench.sh.");
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = kestrel::RunBench(argc, argv);
  if (!status.ok()) {
    std::fprintf(stderr, "cow_checkpoint_bench FAILED: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
