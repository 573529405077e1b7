// train_bench: training throughput (examples/s) of the full cluster on loopback, 1 kestrel_scheduler +
// 2 kestrel_server + 2 kestrel_worker processes (BSP and ASP), against the single-process trainer on
// in-process tables (worker/local_trainer.h): the same model, data, batch size and CPU backend.
//
// Each run measures every configuration once (in-process, cluster BSP, cluster ASP), so foreign load on a
// shared machine spoils one run, not one configuration; the report gives medians over runs and the ratios
// cluster / in-process measured within each run (their median). Figures count training time only (the
// evaluation is excluded); the cluster's examples/s is both workers' examples over the slower worker's time.
//
//   bench/run_train_bench.sh [--model=DEEPFM|LOGISTIC_REGRESSION|FM|WIDE_AND_DEEP] [--runs=3]
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "common/logging.h"
#include "common/status.h"
#include "google/protobuf/text_format.h"
#include "tests/records.h"
#include "tests/server_process.h"
#include "worker/compute/cpu_backend.h"
#include "worker/data/datagen.h"
#include "worker/local_trainer.h"

ABSL_FLAG(std::string, model, "DEEPFM", "Model type (proto/job.proto ModelConfig.Type).");
ABSL_FLAG(int, runs, 3, "Runs; each measures every configuration once.");
ABSL_FLAG(int, batch_size, 256, "Examples per worker per iteration.");
ABSL_FLAG(int, epochs, 1, "Passes over the training data per measurement.");
ABSL_FLAG(std::string, work_dir, "/tmp/kestrel_train_bench", "Data, logs and records.");
ABSL_FLAG(std::string, output, "bench/results/train_bench.md", "Markdown report ('' for none).");
ABSL_FLAG(std::string, scheduler_binary, "", "kestrel_scheduler (default: found next to this binary).");
ABSL_FLAG(std::string, server_binary, "", "kestrel_server (default: found next to this binary).");
ABSL_FLAG(std::string, worker_binary, "", "kestrel_worker (default: found next to this binary).");
ABSL_FLAG(std::string, git_commit, "", "Commit to record (default: git rev-parse).");
ABSL_FLAG(std::string, invocation, "", "The command line that started the benchmark, to record.");

namespace kestrel {
namespace {

struct Binaries {
  std::string scheduler, server, worker;
};

std::string JobText(const std::string& data) {
  return absl::StrFormat(
      "model { type: %s }\n"
      "data { format: CRITEO train_files: '%s/train.tsv' test_files: '%s/test.tsv' }\n"
      "train { batch_size: %d epochs: %d log_every_steps: 1000000 eval_max_examples: 1000 }\n",
      absl::GetFlag(FLAGS_model), data, data, absl::GetFlag(FLAGS_batch_size), absl::GetFlag(FLAGS_epochs));
}

// Examples/s of one in-process run (training time only).
absl::StatusOr<double> InProcess(const std::string& data) {
  JobConfig job;
  if (!google::protobuf::TextFormat::ParseFromString(JobText(data), &job)) {
    return absl::InvalidArgumentError("bad job text");
  }
  std::unique_ptr<Backend> backend = NewCpuBackend();
  KESTREL_ASSIGN_OR_RETURN(TrainResult r, TrainInProcess(job, backend.get()));
  return r.examples_per_second;
}

// Examples/s of one cluster run: both workers' examples over the slower worker's training time.
absl::StatusOr<double> Cluster(const Binaries& bin, const std::string& data, const std::string& consistency,
                               const std::string& dir) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string config = dir + "/job.pbtxt";
  std::ofstream(config) << JobText(data);
  KESTREL_ASSIGN_OR_RETURN(
      ServerProcess scheduler,
      ServerProcess::Start(bin.scheduler,
                           {"--job_id=bench", "--num_servers=2", "--num_workers=2", "--consistency=" + consistency},
                           dir, "scheduler"));
  std::vector<ServerProcess> servers;
  for (int s = 0; s < 2; ++s) {
    KESTREL_ASSIGN_OR_RETURN(
        ServerProcess server,
        ServerProcess::Start(bin.server,
                             {"--job_id=bench", "--num_shards=2", absl::StrCat("--shard_index=", s),
                              absl::StrCat("--bsp_workers=", consistency == "bsp" ? 2 : 0),
                              "--scheduler=" + scheduler.address()},
                             dir, absl::StrCat("server", s)));
    servers.push_back(std::move(server));
  }
  std::vector<ServerProcess> workers;
  for (int w = 0; w < 2; ++w) {
    KESTREL_ASSIGN_OR_RETURN(
        ServerProcess worker,
        ServerProcess::Spawn(bin.worker,
                             {"--job_id=bench", "--config=" + config, "--scheduler=" + scheduler.address(),
                              absl::StrCat("--rank=", w), "--device=cpu",
                              absl::StrCat("--metrics_out=", dir, "/metrics", w, ".jsonl")},
                             dir, absl::StrCat("worker", w)));
    workers.push_back(std::move(worker));
  }
  double examples = 0, seconds = 0;
  for (int w = 0; w < 2; ++w) {
    KESTREL_ASSIGN_OR_RETURN(int code, workers[w].Wait(absl::Minutes(10)));
    if (code != 0) return absl::InternalError(absl::StrCat("worker ", w, " exited with ", code, "; see ", dir));
    KESTREL_ASSIGN_OR_RETURN(Record done, LastRecord(absl::StrCat(dir, "/metrics", w, ".jsonl"), "done"));
    examples += done.examples();
    seconds = std::max(seconds, done.seconds());
  }
  if (seconds <= 0) return absl::InternalError(absl::StrCat("no done records in ", dir));
  return examples / seconds;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : (v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2);
}

int Main(int argc, char** argv) {
  SetLogIdentity("train_bench");
  const absl::Time start = absl::Now();
  const std::string load_start = bench::LoadAverage();
  Binaries bin;
  auto find = [&](const std::string& flag, const std::string& rel, const std::string& flag_name, std::string* out) {
    absl::StatusOr<std::string> path = bench::FindBinary(flag, rel, argv[0], flag_name);
    if (!path.ok()) {
      std::fprintf(stderr, "%s\n", path.status().ToString().c_str());
      return false;
    }
    *out = *path;
    return true;
  };
  if (!find(absl::GetFlag(FLAGS_scheduler_binary), "scheduler/kestrel_scheduler", "scheduler_binary", &bin.scheduler) ||
      !find(absl::GetFlag(FLAGS_server_binary), "server/kestrel_server", "server_binary", &bin.server) ||
      !find(absl::GetFlag(FLAGS_worker_binary), "worker/kestrel_worker", "worker_binary", &bin.worker)) {
    return 2;
  }
  const std::string work = absl::GetFlag(FLAGS_work_dir);
  const std::string data = work + "/data";
  std::filesystem::create_directories(data);
  absl::StatusOr<DatagenTruth> truth = GenerateCriteoData(SmallDatagenOptions(), data);
  if (!truth.ok()) {
    std::fprintf(stderr, "datagen: %s\n", truth.status().ToString().c_str());
    return 1;
  }
  std::map<std::string, std::vector<double>> rate, ratio;
  for (int r = 0; r < absl::GetFlag(FLAGS_runs); ++r) {
    absl::StatusOr<double> local = InProcess(data);
    if (!local.ok()) {
      std::fprintf(stderr, "in-process run failed: %s\n", local.status().ToString().c_str());
      return 1;
    }
    rate["in-process"].push_back(*local);
    std::printf("run %d: in-process %.0f examples/s\n", r, *local);
    for (const std::string consistency : {"bsp", "asp"}) {
      absl::StatusOr<double> cluster = Cluster(bin, data, consistency, absl::StrCat(work, "/", consistency));
      if (!cluster.ok()) {
        std::fprintf(stderr, "cluster run failed: %s\n", cluster.status().ToString().c_str());
        return 1;
      }
      rate[consistency].push_back(*cluster);
      ratio[consistency].push_back(*cluster / *local);
      std::printf("run %d: cluster %s %.0f examples/s (%.2fx in-process)\n", r, consistency.c_str(), *cluster,
                  *cluster / *local);
    }
    std::fflush(stdout);
  }

  const bench::Machine machine =
      bench::DescribeMachine(argc, argv, absl::GetFlag(FLAGS_git_commit), absl::GetFlag(FLAGS_invocation));
  std::string md = "# Kestrel train_bench: training throughput, 2 servers + 2 workers vs. in-process\n\n";
  absl::StrAppend(&md, "## Machine\n\n", bench::MachineMarkdown(machine, load_start));
  absl::StrAppend(&md, absl::StrFormat("| Bench runtime | %.0f s |\n\n", absl::ToDoubleSeconds(absl::Now() - start)),
                  bench::CommandMarkdown(machine));
  absl::StrAppend(
      &md, "## Setup\n\n",
      absl::StrFormat("- Model %s, CPU backend, batch %d examples per worker, %d epoch(s) of the small generated "
                      "set (%d train rows; kestrel_datagen --small).\n",
                      absl::GetFlag(FLAGS_model), absl::GetFlag(FLAGS_batch_size), absl::GetFlag(FLAGS_epochs),
                      SmallDatagenOptions().train_rows),
      "- In-process: one Trainer on in-process Shards (worker/local_trainer.h), the same code path minus the "
      "network and the scheduler.\n",
      "- Cluster: kestrel_scheduler, 2 kestrel_server and 2 kestrel_worker processes on 127.0.0.1; each worker "
      "trains on half the data, so the cluster does the same total work.\n",
      absl::StrFormat("- Medians of %d runs; each run measures the three configurations in turn. Ratio = cluster / "
                      "in-process within a run, median over runs. Training time only (evaluation excluded).\n\n",
                      absl::GetFlag(FLAGS_runs)),
      "## Results\n\n| Configuration | examples/s (median) | ratio to in-process (median) | runs |\n|---|---|---|---|\n");
  auto runs_text = [](const std::vector<double>& v) {
    std::string s;
    for (double x : v) absl::StrAppend(&s, s.empty() ? "" : ", ", absl::StrFormat("%.0f", x));
    return s;
  };
  absl::StrAppend(&md, absl::StrFormat("| in-process, 1 worker | %.0f | 1.00 | %s |\n", Median(rate["in-process"]),
                                       runs_text(rate["in-process"])));
  for (const std::string consistency : {"bsp", "asp"}) {
    absl::StrAppend(&md, absl::StrFormat("| cluster %s, 2 servers + 2 workers | %.0f | %.2f | %s |\n", consistency,
                                         Median(rate[consistency]), Median(ratio[consistency]),
                                         runs_text(rate[consistency])));
  }
  std::printf("\n%s", md.c_str());
  const std::string output = absl::GetFlag(FLAGS_output);
  if (!output.empty()) {
    absl::Status written = bench::WriteFile(bench::UserPath(output), md);
    if (!written.ok()) {
      std::fprintf(stderr, "%s\n", written.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Kestrel training throughput: cluster on loopback vs. in-process trainer.");
  absl::ParseCommandLine(argc, argv);
  return kestrel::Main(argc, argv);
}
