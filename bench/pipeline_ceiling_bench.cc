// pipeline_ceiling_bench: how fast the host side of a worker can feed a model — reading and parsing the files,
// key batching, pulls, pushes and the in-process servers' optimizers — with the model's compute replaced by a
// stand-in of a given duration (TrainerOptions::stand_in_compute: the host waits and pushes zero gradients, as it
// waits for a GPU computing the step). With a stand-in of 0 it measures the pipeline's ceiling: the examples/s a
// GPU worker could reach at most, and the CPU-seconds the host spends per example, on a machine without a GPU.
// With a stand-in of the CUDA step's measured time (2.84 ms per 4096 examples on an H100,
// bench/results/cuda_step.md) it shows how much of a GPU's step the host hides.
//
// Each configuration runs --runs times, interleaved; the report gives medians, CPU-seconds per 1000 examples
// (every thread of this process: the worker and its in-process servers) and examples per CPU-second (per core),
// and the time by phase of the last run.
//
// With --baseline_binary (another build of this benchmark, e.g. an older commit's) each round runs that build once
// per configuration, alternated with this one, and the report gives the ratios within each round.
//
//   bench/run_pipeline_ceiling_bench.sh [--before=COMMIT] [--stand_in_us=0,2840] [--runs=3] ...
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "common/logging.h"
#include "common/process_setup.h"
#include "common/status.h"
#include "inprocess/local_trainer.h"
#include "worker/compute/cpu_backend.h"
#include "worker/data/datagen.h"
#include "worker/model.h"

ABSL_FLAG(std::string, stand_in_us, "0,2840",
          "Comma list of stand-in compute durations per batch, in microseconds (0: the pipeline's ceiling).");
ABSL_FLAG(int, runs, 3, "Runs of every configuration, interleaved.");
ABSL_FLAG(int, embedding_dim, 16, "model.embedding_dim.");
ABSL_FLAG(std::string, hidden, "256,128", "model.hidden (sizes the dense tensor pulled and pushed every step).");
ABSL_FLAG(int, batch_size, 4096, "train.batch_size.");
ABSL_FLAG(int64_t, train_rows, 1000000, "Generated training rows (made once in --work_dir).");
ABSL_FLAG(int, max_vocab, 100000, "Largest vocabulary of a generated categorical field.");
ABSL_FLAG(int, servers, 1, "In-process servers (kestrel_worker --local_servers).");
ABSL_FLAG(int, server_threads, -1, "LocalTrainingOptions::server_threads (-1: the default, DefaultServerThreads).");
ABSL_FLAG(int, split_pulls, -1,
          "LocalTrainingOptions::split_pulls: 1 on, 0 off, -1 on when the stand-in is not 0 (it stands for a GPU "
          "computing while the host pulls).");
ABSL_FLAG(int, parse_threads, 0, "data.parse_threads (0: the default, worker/batch_reader.h DefaultParseThreads).");
ABSL_FLAG(std::string, baseline_binary, "",
          "Another build of this benchmark (e.g. an older commit's): each round runs it once per configuration, "
          "alternated with this build, and the report gives both and their ratio within each round ('' for none).");
ABSL_FLAG(std::string, baseline_label, "before", "The baseline build's name in the report.");
ABSL_FLAG(std::string, work_dir, "/tmp/kestrel_pipeline_ceiling", "Where the generated data is kept.");
ABSL_FLAG(std::string, output, "bench/results/pipeline_ceiling.md", "Markdown report ('' for none).");
ABSL_FLAG(std::string, git_commit, "", "Commit to record (default: git rev-parse).");
ABSL_FLAG(std::string, invocation, "", "The command line that started the benchmark, to record.");

namespace kestrel {
namespace {

// The DeepFM job of the realistic size over `data`, evaluated on a token test file (the evaluation is not timed).
JobConfig Job(const std::string& data) {
  JobConfig job;
  ModelConfig& model = *job.mutable_model();
  model.set_type(ModelConfig::DEEPFM);
  model.set_embedding_dim(absl::GetFlag(FLAGS_embedding_dim));
  for (absl::string_view width : absl::StrSplit(absl::GetFlag(FLAGS_hidden), ',', absl::SkipEmpty())) {
    int w = 0;
    if (absl::SimpleAtoi(width, &w)) model.add_hidden(w);
  }
  job.mutable_data()->set_format(DataConfig::CRITEO);
  job.mutable_data()->add_train_files(data + "/train.tsv");
  job.mutable_data()->add_test_files(data + "/test.tsv");
  job.mutable_data()->set_parse_threads(absl::GetFlag(FLAGS_parse_threads));
  job.mutable_train()->set_batch_size(absl::GetFlag(FLAGS_batch_size));
  job.mutable_train()->set_log_every_steps(1000000);
  job.mutable_train()->set_eval_max_examples(100);
  return job;
}

absl::StatusOr<std::string> GeneratedData(const std::string& work) {
  DatagenOptions options;
  options.train_rows = absl::GetFlag(FLAGS_train_rows);
  options.test_rows = 1000;
  options.max_vocab = absl::GetFlag(FLAGS_max_vocab);
  const std::string dir = absl::StrCat(work, "/data-", options.train_rows, "-", options.max_vocab);
  const std::string stamp = dir + "/generated.txt";
  const std::string want = absl::StrCat("seed ", options.seed, " train_rows ", options.train_rows, " max_vocab ",
                                        options.max_vocab);
  if (bench::FirstLineWith(stamp, "seed ") == want) return dir;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  KESTREL_RETURN_IF_ERROR(GenerateCriteoData(options, dir).status());
  KESTREL_RETURN_IF_ERROR(bench::WriteFile(stamp, want + "\n"));
  return dir;
}

struct Run {
  double examples_per_second = 0;
  double cpu_seconds_per_1000 = 0;
  PhaseTimes phases;
};

// One run with a stand-in of `stand_in` per batch. CPU-seconds are counted over the training time only: those of
// the evaluation (100 examples) and of opening the in-process servers are negligible beside 1M examples.
absl::StatusOr<Run> Measure(const JobConfig& job, absl::Duration stand_in) {
  std::unique_ptr<Backend> backend = NewCpuBackend();
  LocalTrainingOptions options;
  options.num_servers = absl::GetFlag(FLAGS_servers);
  options.server_threads = absl::GetFlag(FLAGS_server_threads);
  const int split = absl::GetFlag(FLAGS_split_pulls);
  options.split_pulls = split >= 0 ? split : stand_in > absl::ZeroDuration();
  options.stand_in_compute = stand_in;
  const double cpu_start = bench::ProcessCpuSeconds();
  KESTREL_ASSIGN_OR_RETURN(TrainResult result, TrainInProcess(job, backend.get(), options));
  const double cpu = bench::ProcessCpuSeconds() - cpu_start;
  Run run;
  run.examples_per_second = result.examples_per_second;
  run.cpu_seconds_per_1000 = 1000.0 * cpu / std::max<int64_t>(result.examples, 1);
  run.phases = result.phases;
  return run;
}

// One run of the baseline build (--baseline_binary) with a stand-in of `stand_in`, on the same data and sizes:
// its "examples/s" and "CPU-s per 1000" from the line it prints per run.
absl::StatusOr<Run> MeasureBaseline(absl::Duration stand_in) {
  std::string command = bench::ShellQuote(absl::GetFlag(FLAGS_baseline_binary));
  absl::StrAppend(&command, " --runs=1 --output= --stand_in_us=", absl::ToInt64Microseconds(stand_in),
                  " --embedding_dim=", absl::GetFlag(FLAGS_embedding_dim), " --hidden=",
                  bench::ShellQuote(absl::GetFlag(FLAGS_hidden)), " --batch_size=", absl::GetFlag(FLAGS_batch_size),
                  " --train_rows=", absl::GetFlag(FLAGS_train_rows), " --max_vocab=", absl::GetFlag(FLAGS_max_vocab),
                  " --servers=", absl::GetFlag(FLAGS_servers), " --work_dir=",
                  bench::ShellQuote(absl::GetFlag(FLAGS_work_dir)), " 2>&1");
  const std::string out = bench::RunCommand(command);
  // "run 1, stand-in 0: 265514 examples/s, 0.0068 CPU-s per 1000"
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    const size_t colon = line.find(": ");
    if (!absl::StartsWith(line, "run 1, stand-in") || colon == absl::string_view::npos) continue;
    Run run;
    if (std::sscanf(std::string(line.substr(colon + 2)).c_str(), "%lf examples/s, %lf CPU-s per 1000",
                    &run.examples_per_second, &run.cpu_seconds_per_1000) == 2) {
      return run;
    }
  }
  return absl::InternalError(absl::StrCat("the baseline printed no run line: ", out.substr(0, 2000)));
}

int Main(int argc, char** argv) {
  SetLogIdentity("pipeline_ceiling_bench");
  const std::string load_start = bench::LoadAverage();
  std::vector<absl::Duration> stand_ins;
  for (absl::string_view us : absl::StrSplit(absl::GetFlag(FLAGS_stand_in_us), ',', absl::SkipEmpty())) {
    int64_t micros = 0;
    if (!absl::SimpleAtoi(us, &micros) || micros < 0) {
      std::fprintf(stderr, "--stand_in_us: '%s' is not a duration in microseconds\n", std::string(us).c_str());
      return 2;
    }
    stand_ins.push_back(absl::Microseconds(micros));
  }
  const std::string work = absl::GetFlag(FLAGS_work_dir);
  std::filesystem::create_directories(work);
  absl::StatusOr<std::string> data = GeneratedData(work);
  if (!data.ok()) {
    std::fprintf(stderr, "datagen: %s\n", data.status().ToString().c_str());
    return 1;
  }
  const JobConfig job = Job(*data);
  const bool baseline = !absl::GetFlag(FLAGS_baseline_binary).empty();
  const std::string label = absl::GetFlag(FLAGS_baseline_label);
  std::vector<bench::Figures> figures(stand_ins.size()), baseline_figures(stand_ins.size());
  std::vector<PhaseTimes> last_phases(stand_ins.size());
  for (int r = 0; r < absl::GetFlag(FLAGS_runs); ++r) {
    for (size_t i = 0; i < stand_ins.size(); ++i) {
      Run before;
      if (baseline) {
        absl::StatusOr<Run> measured = MeasureBaseline(stand_ins[i]);
        if (!measured.ok()) {
          std::fprintf(stderr, "%s: %s\n", label.c_str(), measured.status().ToString().c_str());
          return 1;
        }
        before = *measured;
        baseline_figures[i].Add("examples/s", "%.0f", before.examples_per_second);
        baseline_figures[i].Add("CPU-seconds per 1000 examples", "%.4f", before.cpu_seconds_per_1000);
        baseline_figures[i].Add("examples per CPU-second (per core)", "%.0f", 1000.0 / before.cpu_seconds_per_1000);
      }
      absl::StatusOr<Run> run = Measure(job, stand_ins[i]);
      if (!run.ok()) {
        std::fprintf(stderr, "run: %s\n", run.status().ToString().c_str());
        return 1;
      }
      figures[i].Add("examples/s", "%.0f", run->examples_per_second);
      figures[i].Add("CPU-seconds per 1000 examples", "%.4f", run->cpu_seconds_per_1000);
      figures[i].Add("examples per CPU-second (per core)", "%.0f", 1000.0 / run->cpu_seconds_per_1000);
      last_phases[i] = run->phases;
      if (baseline) {
        figures[i].Add(absl::StrCat("examples/s, this build / ", label), "%.2fx",
                       run->examples_per_second / before.examples_per_second);
        figures[i].Add(absl::StrCat("examples per CPU-second, this build / ", label), "%.2fx",
                       before.cpu_seconds_per_1000 / run->cpu_seconds_per_1000);
      }
      std::fprintf(stderr, "run %d, stand-in %s: %.0f examples/s, %.4f CPU-s per 1000\n", r + 1,
                   absl::FormatDuration(stand_ins[i]).c_str(), run->examples_per_second, run->cpu_seconds_per_1000);
    }
  }
  const bench::Machine machine =
      bench::DescribeMachine(argc, argv, absl::GetFlag(FLAGS_git_commit), absl::GetFlag(FLAGS_invocation));
  std::string md = absl::StrFormat(
      "# The worker's pipeline ceiling: realistic DeepFM with a stand-in compute\n\n"
      "Everything a worker does but the model's compute: reading and parsing %d training rows (Criteo format), "
      "key batching, pulls and pushes of embedding dim %d and an MLP %s dense tensor on %d in-process server(s), "
      "their optimizers; batch %d. The compute is a stand-in that waits (the host idle, as while a GPU computes) "
      "and pushes zero gradients. Medians of %d runs; CPU-seconds are this process's (every thread).\n\n",
      absl::GetFlag(FLAGS_train_rows), absl::GetFlag(FLAGS_embedding_dim), absl::GetFlag(FLAGS_hidden),
      absl::GetFlag(FLAGS_servers), absl::GetFlag(FLAGS_batch_size), absl::GetFlag(FLAGS_runs));
  absl::StrAppend(&md, "## Machine\n\n", bench::MachineMarkdown(machine, load_start), "\n\n",
                  bench::CommandMarkdown(machine));
  for (size_t i = 0; i < stand_ins.size(); ++i) {
    const PhaseTimes& p = last_phases[i];
    absl::StrAppend(&md, "## Stand-in compute ", absl::FormatDuration(stand_ins[i]), " per batch\n\n",
                    baseline ? "This build, and its ratios to the baseline within each round:\n\n" : "",
                    figures[i].Markdown(), "\n",
                    baseline ? absl::StrCat("The baseline (", label, ", ", absl::GetFlag(FLAGS_baseline_binary),
                                            "), run alternately with it:\n\n", baseline_figures[i].Markdown(), "\n")
                             : "",
                    absl::StrFormat("Time by phase (last run, seconds): read %.2f, batch %.2f (reader and preparer "
                                    "threads); pull %.2f, compute %.2f, push %.2f, wait %.2f.\n\n",
                                    p.read, p.batch, p.pull, p.compute, p.push, p.wait));
  }
  absl::Status published = bench::PublishReport(md, absl::GetFlag(FLAGS_output));
  if (!published.ok()) {
    std::fprintf(stderr, "%s\n", published.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  kestrel::PreferPassiveOpenMpWaiting(argv);
  kestrel::TuneMallocForLargeBuffers();  // the batches and the in-process servers' buffers stay in the heap
  absl::SetProgramUsageMessage("The worker's pipeline ceiling: its host side with a stand-in for the compute.");
  absl::ParseCommandLine(argc, argv);
  return kestrel::Main(argc, argv);
}
