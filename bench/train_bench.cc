// train_bench: training throughput (examples/s) and test AUC / logloss of the full cluster on loopback,
// 1 kestrel_scheduler + 2 kestrel_server + 2 kestrel_worker processes (BSP and ASP), against the single-process
// trainer on in-process tables (inprocess/local_trainer.h) and against PyTorch on the CPU (bench/torch_peer.py:
// 1 process x 2 threads, and DDP over gloo with 2 processes x 1 thread): the same model, data, per-table
// optimizers and global batch (the cluster's two workers and the two DDP processes take batch_size / 2 each).
//
// Each run measures every configuration of every model once, so foreign load on a shared machine spoils one
// run, not one configuration; the report gives medians over runs and the ratios to PyTorch 1x2 and to the
// in-process trainer measured within each run (their median). Figures count training time only (parsing the
// peer's data and every evaluation are excluded); the cluster's examples/s is both workers' examples over the
// slower worker's time, the DDP peer's all processes' examples over the training wall time.
//
//   bench/run_train_bench.sh [demo|realistic|all] [--models=LOGISTIC_REGRESSION,DEEPFM,DLRM] [--runs=3] ...
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "common/json.h"
#include "common/logging.h"
#include "common/process_setup.h"
#include "common/status.h"
#include "common/testing_certs.h"
#include "common/tls.h"
#include "google/protobuf/text_format.h"
#include "tests/records.h"
#include "tests/server_process.h"
#include "worker/compute/cpu_backend.h"
#include "worker/data/datagen.h"
#include "inprocess/local_trainer.h"
#include "worker/model.h"

ABSL_FLAG(std::string, models, "DEEPFM", "Comma list of model types (proto/job.proto ModelConfig.Type).");
ABSL_FLAG(int, runs, 3, "Runs; each measures every configuration once.");
ABSL_FLAG(int, embedding_dim, 8, "model.embedding_dim.");
ABSL_FLAG(std::string, hidden, "64,32", "model.hidden: the MLP widths, a comma list.");
ABSL_FLAG(int, batch_size, 512,
          "Examples per step: of the one in-process worker and of PyTorch 1x2; the cluster's two workers and "
          "the two DDP processes take batch_size / 2 each.");
ABSL_FLAG(int, epochs, 1, "Passes over the training data per measurement.");
ABSL_FLAG(int64_t, train_rows, 200000, "Generated training rows (kestrel_datagen, made once in work_dir).");
ABSL_FLAG(int64_t, test_rows, 50000, "Generated test rows.");
ABSL_FLAG(int, max_vocab, 50000, "Largest vocabulary of a generated categorical field.");
ABSL_FLAG(std::string, wide_optimizer, "",
          "Text-format OptimizerConfig of the wide table for every model, e.g. 'type: ADAGRAD learning_rate: "
          "0.1' (default: the job default, worker/model.h WithDefaults). PyTorch has no FTRL: with an FTRL wide "
          "table the peer rows are left out.");
ABSL_FLAG(int, eval_max_examples, 0, "Evaluate on the first N test examples (0: all), Kestrel and the peer.");
ABSL_FLAG(bool, peer, true, "Also measure the PyTorch peer (bench/torch_peer.py): 1 process x 2 threads, DDP 2 x 1.");
ABSL_FLAG(std::string, python, "/usr/bin/python3", "Python with Debian's python3-torch, to run the peer.");
ABSL_FLAG(std::string, torch_peer, "bench/torch_peer.py", "The peer script.");
ABSL_FLAG(bool, mtls, true,
          "Also run the cluster BSP configuration over mutual TLS (certificates of a throwaway CA) and report its "
          "examples/s against plaintext BSP within each run.");
ABSL_FLAG(std::string, size_label, "", "Names the model size in the report's title (e.g. demo, realistic).");
ABSL_FLAG(bool, append, false, "Append the report to --output instead of replacing it.");
ABSL_FLAG(std::string, configs, "in-process,bsp,asp,bsp-mtls,torch,ddp",
          "Comma list of configurations to measure: in-process, bsp, asp, bsp-mtls, torch, ddp, and ssp "
          "(SSP(--staleness), no row cache), ssp-cache (the same with the workers' row cache), bsp-bf16 and "
          "bsp-fp16 (BSP with every table's values as bf16 / fp16 on the wire), bsp-r2 (BSP with two copies of every "
          "key range, docs/replication.md), bsp-barrier and ssp-barrier (BSP, and SSP(--staleness) without the row "
          "cache, with the scheduler as every iteration's barrier, the fallback protocol: kestrel_scheduler "
          "--lease_clocks=0). Every other cluster configuration runs the default protocol, server-enforced clocks "
          "(each iteration one Step per server).");
ABSL_FLAG(int, lease_clocks, -1,
          "The lease of every cluster configuration but the *-barrier ones (-1: kestrel_scheduler's default).");
ABSL_FLAG(int, staleness, 2, "The staleness of the ssp and ssp-cache configurations.");
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

// One measurement of one configuration: training throughput and the final evaluation on the test file.
struct Figures {
  double examples_per_second = 0;
  double auc = 0;
  double logloss = 0;
  double row_cache_hit_ratio = 0;  // the cluster workers' mean (ssp-cache)
  // Cluster: worker 1's RPCs per iteration (kestrel_rpcs_sent_total, as its log reports them; worker 0's include
  // its evaluations' pulls), to the servers and to the scheduler; -1 where unknown.
  double rpcs_servers = -1;
  double rpcs_scheduler = -1;
  // Cluster: CPU-seconds (user + system) per 1000 examples trained, summed over the workers, the servers and the
  // scheduler (each process from its start to the workers' exit; the evaluation included); -1 where unknown.
  double cpu_workers = -1;
  double cpu_servers = -1;
  double cpu_scheduler = -1;
};

// The "RPCs per iteration: X to servers (...), Y to the scheduler" line of a worker's log (cmd/worker_main.cc).
void ReadRpcs(const std::string& log, Figures* f) {
  std::ifstream in(log);
  std::string line;
  const std::string key = "RPCs per iteration: ";
  while (std::getline(in, line)) {
    const size_t at = line.find(key);
    if (at == std::string::npos) continue;
    std::vector<std::string> words = absl::StrSplit(line.substr(at + key.size()), ' ', absl::SkipEmpty());
    for (size_t i = 0; i + 2 < words.size(); ++i) {
      if (words[i + 1] == "to" && words[i + 2] == "servers") (void)absl::SimpleAtod(words[i], &f->rpcs_servers);
      if (words[i + 1] == "to" && words[i + 2] == "the") (void)absl::SimpleAtod(words[i], &f->rpcs_scheduler);
    }
  }
}

// The model of the benchmark's jobs (unset fields take the job defaults, worker/model.h WithDefaults).
absl::StatusOr<ModelConfig> ModelOf(const std::string& type_name) {
  ModelConfig model;
  ModelConfig::Type type;
  if (!ModelConfig::Type_Parse(type_name, &type)) {
    return absl::InvalidArgumentError(absl::StrCat("--models: unknown model type '", type_name, "'"));
  }
  model.set_type(type);
  model.set_embedding_dim(absl::GetFlag(FLAGS_embedding_dim));
  for (absl::string_view w : absl::StrSplit(absl::GetFlag(FLAGS_hidden), ',', absl::SkipWhitespace())) {
    int width = 0;
    if (!absl::SimpleAtoi(w, &width)) return absl::InvalidArgumentError(absl::StrCat("--hidden: bad width '", w, "'"));
    model.add_hidden(width);
  }
  const std::string wide = absl::GetFlag(FLAGS_wide_optimizer);
  if (!wide.empty() && !google::protobuf::TextFormat::ParseFromString(wide, model.mutable_wide_optimizer())) {
    return absl::InvalidArgumentError(absl::StrCat("--wide_optimizer is not a text-format OptimizerConfig: ", wide));
  }
  return model;
}

// The job of one worker (batch: its examples per step).
JobConfig JobOf(const std::string& data, const ModelConfig& model, int batch) {
  JobConfig job;
  *job.mutable_model() = model;
  job.mutable_data()->set_format(DataConfig::CRITEO);
  job.mutable_data()->add_train_files(data + "/train.tsv");
  job.mutable_data()->add_test_files(data + "/test.tsv");
  job.mutable_train()->set_batch_size(batch);
  job.mutable_train()->set_epochs(absl::GetFlag(FLAGS_epochs));
  job.mutable_train()->set_log_every_steps(1000000);
  job.mutable_train()->set_eval_max_examples(absl::GetFlag(FLAGS_eval_max_examples));
  return job;
}

std::string JobText(const JobConfig& job) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(job, &text);
  return text;
}

// One in-process run (training time only).
absl::StatusOr<Figures> InProcess(const JobConfig& job) {
  std::unique_ptr<Backend> backend = NewCpuBackend();
  const double cpu_before = bench::ProcessCpuSeconds();
  KESTREL_ASSIGN_OR_RETURN(TrainResult r, TrainInProcess(job, backend.get()));
  Figures f{r.examples_per_second, r.eval.auc, r.eval.logloss};
  // One process: the trainer and its in-process servers together (the evaluation included), as the workers' column.
  if (r.examples > 0) f.cpu_workers = (bench::ProcessCpuSeconds() - cpu_before) / r.examples * 1000;
  return f;
}

// One cluster run: examples/s = both workers' examples over the slower worker's training time; worker 0's
// evaluation. Each worker gets compute_threads compute threads.
// With `ca`, every process runs over mutual TLS with a certificate of that CA for its role and rank.
absl::StatusOr<Figures> Cluster(const Binaries& bin, const JobConfig& job, const std::string& consistency,
                                int compute_threads, const std::string& dir, const TestingCa* ca,
                                std::vector<std::string> worker_flags = {}, int replicas = 1,
                                std::vector<std::string> scheduler_flags = {}) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string config = dir + "/job.pbtxt";
  std::ofstream(config) << JobText(job);
  auto with_tls = [ca](std::vector<std::string> args, const char* role,
                       int rank) -> absl::StatusOr<std::vector<std::string>> {
    if (ca == nullptr) return args;
    KESTREL_ASSIGN_OR_RETURN(TlsConfig tls, ca->Issue("bench", role, rank));
    for (std::string& flag : TestingCa::Flags(tls)) args.push_back(std::move(flag));
    return args;
  };
  KESTREL_ASSIGN_OR_RETURN(
      std::vector<std::string> scheduler_args,
      with_tls({"--job_id=bench", "--num_servers=2", "--num_workers=2", "--consistency=" + consistency,
                absl::StrCat("--staleness=", absl::GetFlag(FLAGS_staleness)), absl::StrCat("--replicas=", replicas)},
               "scheduler", 0));
  if (absl::GetFlag(FLAGS_lease_clocks) >= 0) {  // the default protocol's lease; a later flag (the barrier) wins
    scheduler_args.push_back(absl::StrCat("--lease_clocks=", absl::GetFlag(FLAGS_lease_clocks)));
  }
  scheduler_args.insert(scheduler_args.end(), scheduler_flags.begin(), scheduler_flags.end());
  KESTREL_ASSIGN_OR_RETURN(ServerProcess scheduler,
                           ServerProcess::Start(bin.scheduler, scheduler_args, dir, "scheduler"));
  std::vector<ServerProcess> servers;
  for (int s = 0; s < 2; ++s) {
    KESTREL_ASSIGN_OR_RETURN(std::vector<std::string> args,
                             with_tls({"--job_id=bench", "--num_servers=2", absl::StrCat("--rank=", s),
                                       absl::StrCat("--bsp_workers=", consistency == "bsp" ? 2 : 0),
                                       "--scheduler=" + scheduler.address(), absl::StrCat("--replicas=", replicas)},
                                      "server", s));
    KESTREL_ASSIGN_OR_RETURN(ServerProcess server,
                             ServerProcess::Start(bin.server, args, dir, absl::StrCat("server", s)));
    servers.push_back(std::move(server));
  }
  std::vector<ServerProcess> workers;
  for (int w = 0; w < 2; ++w) {
    KESTREL_ASSIGN_OR_RETURN(std::vector<std::string> args,
                             with_tls({"--job_id=bench", "--config=" + config, "--scheduler=" + scheduler.address(),
                                       absl::StrCat("--rank=", w), "--device=cpu",
                                       absl::StrCat("--compute_threads=", compute_threads),
                                       absl::StrCat("--metrics_out=", dir, "/metrics", w, ".jsonl")},
                                      "worker", w));
    args.insert(args.end(), worker_flags.begin(), worker_flags.end());
    KESTREL_ASSIGN_OR_RETURN(ServerProcess worker,
                             ServerProcess::Spawn(bin.worker, args, dir, absl::StrCat("worker", w)));
    workers.push_back(std::move(worker));
  }
  double examples = 0, seconds = 0, hit_ratio = 0;
  for (int w = 0; w < 2; ++w) {
    KESTREL_ASSIGN_OR_RETURN(int code, workers[w].Wait(absl::Minutes(10)));
    if (code != 0) return absl::InternalError(absl::StrCat("worker ", w, " exited with ", code, "; see ", dir));
    KESTREL_ASSIGN_OR_RETURN(Record done, LastRecord(absl::StrCat(dir, "/metrics", w, ".jsonl"), "done"));
    examples += done.examples();
    seconds = std::max(seconds, done.seconds());
    hit_ratio += done.row_cache_hit_ratio() / 2;
  }
  if (seconds <= 0) return absl::InternalError(absl::StrCat("no done records in ", dir));
  KESTREL_ASSIGN_OR_RETURN(Record eval, LastRecord(absl::StrCat(dir, "/metrics0.jsonl"), "eval"));
  Figures f{examples / seconds, eval.auc(), eval.logloss(), hit_ratio};
  ReadRpcs(dir + "/worker1.log", &f);
  // The processes' CPU per 1000 examples: what carries over to machines where they do not share 2 cores.
  auto per_thousand = [examples](const std::vector<const ServerProcess*>& processes) {
    double cpu = 0;
    for (const ServerProcess* p : processes) {
      absl::StatusOr<double> used = p->CpuSeconds();
      if (!used.ok()) return -1.0;
      cpu += *used;
    }
    return cpu / examples * 1000;
  };
  f.cpu_workers = per_thousand({&workers[0], &workers[1]});
  f.cpu_servers = per_thousand({&servers[0], &servers[1]});
  f.cpu_scheduler = per_thousand({&scheduler});
  return f;
}

// The peer's flags for a model (job defaults applied): sizes, embedding initializer and every table's optimizer.
// A 0 optimizer field means the server's default (common/optimizer.cc), which the peer resolves the same way.
// Empty, with *unsupported saying why, when PyTorch cannot train the same model (FTRL).
std::vector<std::string> PeerModelFlags(const ModelConfig& m, std::string* unsupported) {
  const InitializerConfig& init = m.embedding_initializer();
  if (init.type() != InitializerConfig::NORMAL || init.mean() != 0) {
    *unsupported = "the peer initializes embeddings with NORMAL(0, stddev) only";
    return {};
  }
  std::vector<std::string> flags = {
      "--model=" + absl::AsciiStrToLower(ModelConfig::Type_Name(m.type())),
      absl::StrCat("--embedding_dim=", m.embedding_dim()), "--hidden=" + absl::StrJoin(m.hidden(), ","),
      "--bottom_hidden=" + absl::StrJoin(m.bottom_hidden(), ","),
      absl::StrFormat("--emb_init_stddev=%.9g", init.stddev() == 0 ? 0.01f : init.stddev())};
  if (m.no_dense_inputs()) flags.push_back("--no_dense_inputs");
  const std::pair<const char*, const OptimizerConfig*> tables[] = {
      {"wide", &m.wide_optimizer()}, {"emb", &m.embedding_optimizer()}, {"dense", &m.dense_optimizer()}};
  for (const auto& [table, c] : tables) {
    if (c->type() == OptimizerConfig::FTRL) {
      *unsupported = absl::StrCat("PyTorch has no FTRL (the ", table, " table's optimizer)");
      return {};
    }
    flags.push_back(absl::StrCat("--", table, "_opt=", absl::AsciiStrToLower(OptimizerConfig::Type_Name(c->type()))));
    flags.push_back(absl::StrFormat("--%s_lr=%.9g", table, c->learning_rate()));
    flags.push_back(absl::StrFormat("--%s_initial_accumulator=%.9g", table, c->initial_accumulator()));
    flags.push_back(absl::StrFormat("--%s_epsilon=%.9g", table, c->epsilon()));
    flags.push_back(absl::StrFormat("--%s_beta1=%.9g", table, c->beta1()));
    flags.push_back(absl::StrFormat("--%s_beta2=%.9g", table, c->beta2()));
  }
  return flags;
}

// One run of the PyTorch peer (bench/torch_peer.py): `processes` > 1 runs DDP (gloo), `batch` examples per
// process per step. Its JSON line is parsed with protobuf's JSON parser into *result; its stderr goes to
// <dir>/peer.log.
absl::StatusOr<Figures> Peer(const std::string& data, const std::vector<std::string>& model_flags, int processes,
                             int threads, int batch, const std::string& dir, bench::TorchPeerResult* result) {
  std::filesystem::create_directories(dir);
  const std::string log = dir + "/peer.log";
  // The peer runs with libgomp's default (spinning) waits, which suit it best (DeepFM at the realistic size:
  // ~72k examples/s against ~67k with OMP_WAIT_POLICY=passive); Kestrel's own binaries choose passive waits
  // (common/process_setup.h), and this benchmark re-executed itself with them.
  std::vector<std::string> args = {"env",
                                   "-u",
                                   "OMP_WAIT_POLICY",
                                   "timeout",
                                   "3600",
                                   bench::UserPath(absl::GetFlag(FLAGS_python)),
                                   bench::UserPath(absl::GetFlag(FLAGS_torch_peer)),
                                   "--train=" + data + "/train.tsv",
                                   "--test=" + data + "/test.tsv",
                                   absl::StrCat("--batch_size=", batch),
                                   absl::StrCat("--epochs=", absl::GetFlag(FLAGS_epochs)),
                                   absl::StrCat("--eval_max_examples=", absl::GetFlag(FLAGS_eval_max_examples)),
                                   absl::StrCat("--threads=", threads),
                                   absl::StrCat("--ddp=", processes)};
  args.insert(args.end(), model_flags.begin(), model_flags.end());
  std::string command;
  for (const std::string& a : args) absl::StrAppend(&command, command.empty() ? "" : " ", bench::ShellQuote(a));
  absl::StrAppend(&command, " 2>", bench::ShellQuote(log));
  const std::string out = bench::RunCommand(command);
  const std::string line = out.substr(out.find_last_of('\n') == std::string::npos ? 0 : out.find_last_of('\n') + 1);
  if (line.empty()) {
    return absl::InternalError(absl::StrCat("the PyTorch peer printed no result (",
                                            bench::FirstLineWith(log, "torch_peer:"), "); see ", log, " and ",
                                            command));
  }
  absl::Status parsed = FromJson(line, result);
  if (!parsed.ok())
    return absl::InternalError(absl::StrCat("the PyTorch peer's line '", line, "': ", parsed.message()));
  return Figures{result->examples_per_second(), result->auc(), result->logloss()};
}

// <work>/data-<train>-<test>-<vocab>: kestrel_datagen's files, generated once (a stamp file records the
// options they were made with; other options make the directory again).
absl::StatusOr<std::string> GeneratedData(const std::string& work) {
  DatagenOptions options;
  options.train_rows = absl::GetFlag(FLAGS_train_rows);
  options.test_rows = absl::GetFlag(FLAGS_test_rows);
  options.max_vocab = absl::GetFlag(FLAGS_max_vocab);
  const std::string dir =
      absl::StrCat(work, "/data-", options.train_rows, "-", options.test_rows, "-", options.max_vocab);
  const std::string stamp = dir + "/generated.txt";
  const std::string want = absl::StrCat("seed ", options.seed, " train_rows ", options.train_rows, " test_rows ",
                                        options.test_rows, " max_vocab ", options.max_vocab);
  if (bench::FirstLineWith(stamp, "seed ") == want) return dir;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  KESTREL_RETURN_IF_ERROR(GenerateCriteoData(options, dir).status());
  KESTREL_RETURN_IF_ERROR(bench::WriteFile(stamp, want + "\n"));
  return dir;
}

using bench::Median;

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
      !find(absl::GetFlag(FLAGS_worker_binary), "cmd/kestrel_worker", "worker_binary", &bin.worker)) {
    return 2;
  }
  const std::string work = absl::GetFlag(FLAGS_work_dir);
  std::filesystem::create_directories(work);
  absl::StatusOr<std::string> generated = GeneratedData(work);
  if (!generated.ok()) {
    std::fprintf(stderr, "datagen: %s\n", generated.status().ToString().c_str());
    return 1;
  }
  const std::string data = *generated;
  const bool peer = absl::GetFlag(FLAGS_peer);
  if (peer && bench::RunCommand(bench::ShellQuote(bench::UserPath(absl::GetFlag(FLAGS_python))) +
                                " -c 'import torch; print(torch.__version__)' 2>/dev/null")
                  .empty()) {
    std::fprintf(stderr,
                 "--peer: %s cannot import torch (apt-get install -y --no-install-recommends python3-torch "
                 "libopenblas0-openmp, or pass --peer=false)\n",
                 absl::GetFlag(FLAGS_python).c_str());
    return 2;
  }
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const int nproc = ::sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 2;
  const int half_threads = std::max(1, nproc / 2);  // per cluster worker / DDP process, as `kestrel local` gives
  const int batch = absl::GetFlag(FLAGS_batch_size);
  const int half_batch = std::max(1, batch / 2);
  auto threads_text = [](int n) { return absl::StrCat(n, n == 1 ? " thread" : " threads"); };

  // Every configuration of every model, in the order measured and reported.
  struct Config {
    std::string key, name;
  };
  const std::vector<Config> configs = {
      {"in-process", absl::StrFormat("Kestrel in-process, 1 process × %s", threads_text(nproc))},
      {"bsp", absl::StrFormat("Kestrel cluster BSP, 2 servers + 2 workers × %s, %d per worker",
                              threads_text(half_threads), half_batch)},
      {"asp", absl::StrFormat("Kestrel cluster ASP, 2 servers + 2 workers × %s, %d per worker",
                              threads_text(half_threads), half_batch)},
      {"bsp-barrier", absl::StrFormat("Kestrel cluster BSP, the scheduler as every iteration's barrier, 2 servers + 2 "
                                      "workers × %s, %d per worker",
                                      threads_text(half_threads), half_batch)},
      {"ssp-barrier", absl::StrFormat("Kestrel cluster SSP(%d), the scheduler as every iteration's barrier, 2 "
                                      "servers + 2 workers × %s, %d per worker, no row cache",
                                      absl::GetFlag(FLAGS_staleness), threads_text(half_threads), half_batch)},
      {"bsp-mtls", absl::StrFormat("Kestrel cluster BSP over mutual TLS, 2 servers + 2 workers × %s, %d per worker",
                                   threads_text(half_threads), half_batch)},
      {"ssp", absl::StrFormat("Kestrel cluster SSP(%d), 2 servers + 2 workers × %s, %d per worker, no row cache",
                              absl::GetFlag(FLAGS_staleness), threads_text(half_threads), half_batch)},
      {"ssp-cache", absl::StrFormat("Kestrel cluster SSP(%d) with the workers' row cache, 2 servers + 2 workers × "
                                    "%s, %d per worker",
                                    absl::GetFlag(FLAGS_staleness), threads_text(half_threads), half_batch)},
      {"bsp-bf16", absl::StrFormat("Kestrel cluster BSP, bf16 on the wire, 2 servers + 2 workers × %s, %d per worker",
                                   threads_text(half_threads), half_batch)},
      {"bsp-fp16", absl::StrFormat("Kestrel cluster BSP, fp16 on the wire, 2 servers + 2 workers × %s, %d per worker",
                                   threads_text(half_threads), half_batch)},
      {"bsp-r2", absl::StrFormat("Kestrel cluster BSP, 2 copies of every key range, 2 servers + 2 workers × %s, %d "
                                 "per worker",
                                 threads_text(half_threads), half_batch)},
      {"torch", absl::StrFormat("PyTorch, 1 process × %s", threads_text(nproc))},
      {"ddp",
       absl::StrFormat("PyTorch DDP (gloo), 2 processes × %s, %d per process", threads_text(half_threads), half_batch)},
  };
  struct ModelRuns {
    ModelConfig model;     // as the jobs give it
    ModelConfig resolved;  // job defaults applied
    std::vector<std::string> peer_flags;
    std::string peer_unsupported;                                   // why the peer rows are left out
    std::map<std::string, std::vector<Figures>> figures;            // by config key, one per run
    std::map<std::string, std::vector<double>> vs_torch, vs_local;  // ratios within each run
    std::vector<double> mtls_vs_plaintext;                          // cluster BSP, within each run
  };
  std::vector<ModelRuns> models;
  for (absl::string_view type : absl::StrSplit(absl::GetFlag(FLAGS_models), ',', absl::SkipWhitespace())) {
    absl::StatusOr<ModelConfig> model = ModelOf(std::string(absl::StripAsciiWhitespace(type)));
    if (!model.ok()) {
      std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
      return 2;
    }
    ModelRuns m;
    m.model = *model;
    m.resolved = WithDefaults(*model);
    m.peer_flags = PeerModelFlags(m.resolved, &m.peer_unsupported);
    if (!peer) m.peer_unsupported = "--peer=false";
    models.push_back(std::move(m));
  }
  std::vector<std::string> wanted;
  for (absl::string_view key : absl::StrSplit(absl::GetFlag(FLAGS_configs), ',', absl::SkipWhitespace())) {
    wanted.emplace_back(absl::StripAsciiWhitespace(key));
  }
  if (!absl::c_linear_search(wanted, "in-process")) wanted.push_back("in-process");  // every ratio's reference
  // The mTLS cluster's certificates: a throwaway CA (the openssl command), one certificate per process.
  const bool mtls = absl::GetFlag(FLAGS_mtls);
  absl::StatusOr<TestingCa> ca = absl::FailedPreconditionError("--mtls=false");
  if (mtls) ca = TestingCa::Create(work + "/ca", "bench");
  bench::TorchPeerResult peer_info;  // of the last PyTorch 1-process run: its BLAS and version
  const std::vector<std::string> barrier = {"--lease_clocks=0"};
  for (int r = 0; r < absl::GetFlag(FLAGS_runs); ++r) {
    for (ModelRuns& m : models) {
      const std::string type = ModelConfig::Type_Name(m.model.type());
      std::map<std::string, Figures> run;
      for (const Config& c : configs) {
        const bool is_peer = c.key == "torch" || c.key == "ddp";
        if (is_peer && !m.peer_unsupported.empty()) continue;
        if (c.key == "bsp-mtls" && !mtls) continue;
        if (!absl::c_linear_search(wanted, c.key)) continue;
        const std::string dir = absl::StrCat(work, "/", c.key);
        absl::StatusOr<Figures> f =
            c.key == "in-process" ? InProcess(JobOf(data, m.model, batch))
            : c.key == "torch"    ? Peer(data, m.peer_flags, 1, nproc, batch, dir, &peer_info)
            : c.key == "ddp"      ? [&] {
                bench::TorchPeerResult unused;
                return Peer(data, m.peer_flags, 2, half_threads, half_batch, dir, &unused);
              }()
            : c.key == "bsp-mtls" ? (ca.ok() ? Cluster(bin, JobOf(data, m.model, half_batch), "bsp", half_threads,
                                                       dir, &*ca)
                                             : absl::StatusOr<Figures>(ca.status()))
            : c.key == "ssp"       ? Cluster(bin, JobOf(data, m.model, half_batch), "ssp", half_threads, dir,
                                             /*ca=*/nullptr, {"--row_cache=false"})
            : c.key == "ssp-cache" ? Cluster(bin, JobOf(data, m.model, half_batch), "ssp", half_threads, dir,
                                             /*ca=*/nullptr, {"--row_cache=true"})
            : c.key == "bsp-barrier" ? Cluster(bin, JobOf(data, m.model, half_batch), "bsp", half_threads, dir,
                                               /*ca=*/nullptr, {}, 1, barrier)
            : c.key == "ssp-barrier" ? Cluster(bin, JobOf(data, m.model, half_batch), "ssp", half_threads, dir,
                                               /*ca=*/nullptr, {"--row_cache=false"}, 1, barrier)
            : c.key == "bsp-r2"    ? Cluster(bin, JobOf(data, m.model, half_batch), "bsp", half_threads, dir,
                                             /*ca=*/nullptr, {}, /*replicas=*/2)
            : c.key == "bsp-bf16" || c.key == "bsp-fp16"
                ? [&] {
                    JobConfig job = JobOf(data, m.model, half_batch);
                    job.mutable_model()->set_wire_type(c.key == "bsp-bf16" ? VALUE_TYPE_BFLOAT16 : VALUE_TYPE_FLOAT16);
                    return Cluster(bin, job, "bsp", half_threads, dir, /*ca=*/nullptr);
                  }()
                                  : Cluster(bin, JobOf(data, m.model, half_batch), c.key, half_threads, dir,
                                            /*ca=*/nullptr);
        if (!f.ok()) {
          std::fprintf(stderr, "%s, %s failed: %s\n", type.c_str(), c.name.c_str(), f.status().ToString().c_str());
          return 1;
        }
        run[c.key] = *f;
        m.figures[c.key].push_back(*f);
        std::printf("run %d: %s, %s: %.0f examples/s, test AUC %.5f, logloss %.5f%s\n", r, type.c_str(),
                    c.name.c_str(), f->examples_per_second, f->auc, f->logloss,
                    c.key == "ssp-cache" ? absl::StrFormat(", row cache hit ratio %.3f", f->row_cache_hit_ratio).c_str()
                                         : "");
        std::fflush(stdout);
      }
      if (run.count("bsp-mtls") > 0 && run.count("bsp") > 0) {
        m.mtls_vs_plaintext.push_back(run["bsp-mtls"].examples_per_second / run["bsp"].examples_per_second);
      }
      for (const auto& [key, f] : run) {
        m.vs_local[key].push_back(f.examples_per_second / run["in-process"].examples_per_second);
        if (run.count("torch") > 0) {
          m.vs_torch[key].push_back(f.examples_per_second / run["torch"].examples_per_second);
        }
      }
    }
  }

  const bench::Machine machine =
      bench::DescribeMachine(argc, argv, absl::GetFlag(FLAGS_git_commit), absl::GetFlag(FLAGS_invocation));
  const std::string hidden = absl::StrReplaceAll(absl::GetFlag(FLAGS_hidden), {{",", "-"}, {" ", ""}});
  const std::string label = absl::GetFlag(FLAGS_size_label);
  std::string md = absl::StrFormat(
      "# Kestrel train_bench%s: dim %d, MLP %s, batch %d, %d train rows — Kestrel (in-process, 2 servers + 2 "
      "workers) vs. PyTorch\n\n",
      label.empty() ? "" : ", " + label + " size", absl::GetFlag(FLAGS_embedding_dim), hidden, batch,
      absl::GetFlag(FLAGS_train_rows));
  absl::StrAppend(&md, "## Machine\n\n", bench::MachineMarkdown(machine, load_start));
  absl::StrAppend(&md, absl::StrFormat("| Bench runtime | %.0f s |\n\n", absl::ToDoubleSeconds(absl::Now() - start)),
                  bench::CommandMarkdown(machine));
  const int64_t eval_examples =
      absl::GetFlag(FLAGS_eval_max_examples) > 0
          ? std::min<int64_t>(absl::GetFlag(FLAGS_eval_max_examples), absl::GetFlag(FLAGS_test_rows))
          : absl::GetFlag(FLAGS_test_rows);
  absl::StrAppend(
      &md, "## Setup\n\n",
      absl::StrFormat("- Data: `kestrel_datagen --train_rows %d --test_rows %d --max_vocab %d` (seed 1); %d epoch(s) "
                      "in file order; test AUC and logloss on %d test examples.\n",
                      absl::GetFlag(FLAGS_train_rows), absl::GetFlag(FLAGS_test_rows), absl::GetFlag(FLAGS_max_vocab),
                      absl::GetFlag(FLAGS_epochs), eval_examples),
      absl::StrFormat("- Models: embedding dim %d, MLP %s (DLRM: bottom MLP %s), CPU backend; %d examples per step "
                      "in every configuration (the cluster's 2 workers and the 2 DDP processes take %d each; BSP "
                      "servers apply (1/2)·Σ of the 2 workers' pushes and DDP averages the 2 processes' gradients, "
                      "so those two make the same updates, the sparse rows' steps half those of one process with the "
                      "whole batch).\n",
                      absl::GetFlag(FLAGS_embedding_dim), hidden,
                      models.empty() ? "" : absl::StrJoin(models[0].resolved.bottom_hidden(), "-"), batch, half_batch),
      "- Kestrel in-process: one Trainer on in-process Shards (inprocess/local_trainer.h), the same code path minus "
      "the network and the scheduler.\n",
      absl::StrFormat(
          "- Cluster: kestrel_scheduler, 2 kestrel_server and 2 kestrel_worker processes on 127.0.0.1, each worker "
          "training on half the lines (index mod 2) with %s "
          "(--compute_threads, as `kestrel local` gives each of 2 workers), the servers' handlers inline; plaintext "
          "gRPC, and again (BSP) over mutual TLS with certificates of a throwaway CA, as `kestrel local` runs.\n",
          threads_text(half_threads)),
      "- PyTorch (bench/torch_peer.py, CPU): the same network, initial distributions, per-table optimizers and data "
      "order; nn.Embedding(sparse=True) tables, the batch's summed loss for the sparse gradients and its mean for "
      "the dense ones. Its examples/s excludes parsing the files (cached as .npy) and the evaluation; Kestrel's "
      "includes reading and parsing them.\n",
      "- OpenMP waits: Kestrel's processes sleep (OMP_WAIT_POLICY=passive, their default: common/process_setup.h), "
      "the peer spins (libgomp's default, faster for it than passive).\n",
      peer_info.has_blas()
          ? absl::StrFormat("- PyTorch %s on %s (%d threads read back from the library; a 4096×512·512×256 matmul "
                            "ran at %.0f GFLOP/s in the last 1-process run).\n",
                            peer_info.torch(), peer_info.blas(), peer_info.blas_threads(), peer_info.matmul_gflops())
          : "",
      absl::StrFormat("- Medians of %d runs; each run measures every configuration of every model in turn. Ratios "
                      "are taken within a run (examples/s of the row / of the reference), median over runs.\n\n",
                      absl::GetFlag(FLAGS_runs)));
  auto optimizer_text = [](const OptimizerConfig& c) {
    std::string text;
    google::protobuf::TextFormat::Printer printer;
    printer.SetSingleLineMode(true);
    printer.PrintToString(c, &text);
    return std::string(absl::StripAsciiWhitespace(text));
  };
  auto runs_text = [](const std::vector<Figures>& v) {
    std::string s;
    for (const Figures& f : v) {
      absl::StrAppend(&s, s.empty() ? "" : ", ", absl::StrFormat("%.0f", f.examples_per_second));
    }
    return s;
  };
  auto median_of = [](const std::vector<Figures>& v, double Figures::*field) {
    std::vector<double> x;
    for (const Figures& f : v) x.push_back(f.*field);
    return Median(x);
  };
  for (ModelRuns& m : models) {
    absl::StrAppend(
        &md, absl::StrFormat("## %s%s\n\n", ModelConfig::Type_Name(m.model.type()), label.empty() ? "" : ", " + label),
        absl::StrFormat("Optimizers: wide `%s`; embeddings %s; dense `%s`.%s\n\n",
                        optimizer_text(m.resolved.wide_optimizer()),
                        m.resolved.type() == ModelConfig::LOGISTIC_REGRESSION
                            ? "none"
                            : "`" + optimizer_text(m.resolved.embedding_optimizer()) + "`",
                        optimizer_text(m.resolved.dense_optimizer()),
                        m.peer_unsupported.empty() ? "" : " PyTorch left out: " + m.peer_unsupported + "."),
        absl::StrFormat("| Configuration | examples/s (median) | test AUC | test logloss | vs PyTorch 1×%d "
                        "| vs Kestrel in-process | examples/s per run |\n|---|---:|---:|---:|---:|---:|---|\n",
                        nproc));
    for (const Config& c : configs) {
      const std::vector<Figures>& f = m.figures[c.key];
      if (f.empty()) continue;
      absl::StrAppend(
          &md, absl::StrFormat("| %s | %.0f | %.5f | %.5f | %s | %.2f | %s |\n", c.name,
                               median_of(f, &Figures::examples_per_second), median_of(f, &Figures::auc),
                               median_of(f, &Figures::logloss),
                               m.vs_torch[c.key].empty() ? "—" : absl::StrFormat("%.2f", Median(m.vs_torch[c.key])),
                               Median(m.vs_local[c.key]), runs_text(f)));
    }
    std::string rpcs;
    for (const Config& c : configs) {
      const std::vector<Figures>& f = m.figures[c.key];
      if (f.empty() || f.back().rpcs_servers < 0) continue;
      absl::StrAppend(&rpcs, absl::StrFormat("| %s | %.2f | %.2f |\n", c.key, median_of(f, &Figures::rpcs_servers),
                                             median_of(f, &Figures::rpcs_scheduler)));
    }
    if (!rpcs.empty()) {
      absl::StrAppend(&md, "\nRPCs per iteration of worker 1 (kestrel_rpcs_sent_total; median over runs):\n\n",
                      "| Configuration | to the servers | to the scheduler |\n|---|---:|---:|\n", rpcs);
    }
    std::string cpu;
    for (const Config& c : configs) {
      const std::vector<Figures>& f = m.figures[c.key];
      if (f.empty() || f.back().cpu_workers < 0) continue;
      auto cell = [&](double Figures::*field) {
        const double v = median_of(f, field);
        return v < 0 ? std::string("—") : absl::StrFormat("%.4f", v);
      };
      absl::StrAppend(&cpu, absl::StrFormat("| %s | %s | %s | %s |\n", c.key, cell(&Figures::cpu_workers),
                                            cell(&Figures::cpu_servers), cell(&Figures::cpu_scheduler)));
    }
    if (!cpu.empty()) {
      absl::StrAppend(&md, "\nCPU-seconds per 1000 examples (user + system, every thread, each role's processes "
                      "summed from their start to the workers' exit; in-process: the one process, its servers "
                      "included; median over runs):\n\n",
                      "| Configuration | 2 workers | 2 servers | scheduler |\n|---|---:|---:|---:|\n", cpu);
    }
    for (const auto& [leased, barrier] : {std::pair<const char*, const char*>{"bsp", "bsp-barrier"},
                                          std::pair<const char*, const char*>{"ssp", "ssp-barrier"}}) {
      if (m.vs_local[leased].empty() || m.vs_local[barrier].empty()) continue;
      absl::StrAppend(&md, absl::StrFormat("\n%s / %s (the scheduler as every iteration's barrier): %.2fx the "
                                           "examples/s (medians of the within-run ratios to in-process: %.2f / %.2f)."
                                           "%s\n",
                                           leased, barrier, Median(m.vs_local[leased]) / Median(m.vs_local[barrier]),
                                           Median(m.vs_local[leased]), Median(m.vs_local[barrier]),
                                           std::string(leased) == "bsp"
                                               ? absl::StrFormat(" Test AUC minus %s's: %+.5f (BSP: the same model).",
                                                                 barrier,
                                                                 median_of(m.figures[leased], &Figures::auc) -
                                                                     median_of(m.figures[barrier], &Figures::auc))
                                               : ""));
    }
    if (!m.figures["ssp-cache"].empty()) {
      absl::StrAppend(&md, absl::StrFormat("\nRow cache hit ratio (ssp-cache, both workers, median over runs): %.3f.",
                                           median_of(m.figures["ssp-cache"], &Figures::row_cache_hit_ratio)));
      if (!m.figures["ssp"].empty()) {
        absl::StrAppend(&md, absl::StrFormat(" Test AUC with the cache minus without: %+.4f.",
                                             median_of(m.figures["ssp-cache"], &Figures::auc) -
                                                 median_of(m.figures["ssp"], &Figures::auc)));
      }
      absl::StrAppend(&md, "\n");
    }
    if (!m.figures["bsp-r2"].empty() && !m.figures["bsp"].empty()) {
      absl::StrAppend(&md, absl::StrFormat(
                               "\nBSP with 2 copies of every range / 1 copy: %.2fx the examples/s (medians over "
                               "runs); test AUC minus 1 copy's: %+.5f (BSP is bitwise the same model).\n",
                               median_of(m.figures["bsp-r2"], &Figures::examples_per_second) /
                                   median_of(m.figures["bsp"], &Figures::examples_per_second),
                               median_of(m.figures["bsp-r2"], &Figures::auc) - median_of(m.figures["bsp"], &Figures::auc)));
    }
    for (const char* wire : {"bsp-bf16", "bsp-fp16"}) {
      if (m.figures[wire].empty() || m.figures["bsp"].empty()) continue;
      absl::StrAppend(&md, absl::StrFormat("\n%s: test AUC minus fp32 BSP's: %+.5f.\n", wire,
                                           median_of(m.figures[wire], &Figures::auc) -
                                               median_of(m.figures["bsp"], &Figures::auc)));
    }
    if (!m.mtls_vs_plaintext.empty()) {
      absl::StrAppend(&md, absl::StrFormat("\nCluster BSP over mutual TLS / plaintext (within each run): median "
                                           "%.2f (%s).\n",
                                           Median(m.mtls_vs_plaintext),
                                           absl::StrJoin(m.mtls_vs_plaintext, ", ", [](std::string* out, double x) {
                                             absl::StrAppend(out, absl::StrFormat("%.2f", x));
                                           })));
    }
    absl::StrAppend(&md, "\n");
  }
  std::printf("\n%s", md.c_str());
  const std::string output = absl::GetFlag(FLAGS_output);
  if (!output.empty()) {
    std::string previous;
    if (absl::GetFlag(FLAGS_append)) {
      std::ifstream in(bench::UserPath(output));
      previous.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      if (!previous.empty()) previous += "\n";
    }
    absl::Status written = bench::WriteFile(bench::UserPath(output), previous + md);
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
  kestrel::PreferPassiveOpenMpWaiting(argv);
  absl::SetProgramUsageMessage(
      "Kestrel training throughput and test AUC: cluster on loopback vs. in-process trainer vs. PyTorch (CPU).");
  absl::ParseCommandLine(argc, argv);
  return kestrel::Main(argc, argv);
}
