// serve_bench: the prediction service under load while training publishes deltas. In one process: a DeepFM (dim 16, MLP
// 256-128) trained briefly on in-process servers, then given --table_rows more rows per table; a "training" thread that
// keeps pushing new rows into those servers and commits a checkpoint every --delta_interval; a publisher
// (serving/publisher.h) turning each checkpoint into a delta export; kestrel_serve's service
// (serving/prediction_service.h) following the serving directory on a loopback port; and 1..N concurrent gRPC clients
// at batch sizes 1..256.
//
// Reported, in one run: kestrel_predict's in-process rate on the same model (export/score_export.h, the job's batch;
// runs before and after the load phase) and the ratio of the served rate at batch 256 to it; examples/s and p50/p99
// latency per (batch, clients); p99 at batch 1 at half the maximum load (paced clients); failed requests across every
// model swap; and freshness: for every push, the time until a served answer came from a model holding it (the
// checkpoint cadence plus publishing plus loading), against twice the delta interval. The machine's cores are shared by
// the clients, the service, the trainer and the publisher: CPU-seconds per 1000 examples are reported with the rates.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "bench/bench_util.h"
#include "common/checkpoint_layout.h"
#include "common/status.h"
#include "export/load_export.h"
#include "export/score_export.h"
#include "inprocess/local_trainer.h"
#include "serving/checkpoint_testing.h"
#include "serving/model_source.h"
#include "serving/predict_client.h"
#include "serving/prediction_service.h"
#include "serving/publisher.h"
#include "worker/compute/cpu_backend.h"
#include "worker/data/datagen.h"

ABSL_FLAG(int64_t, train_rows, 100000, "Generated training rows (the model trains --train_steps on them).");
ABSL_FLAG(int64_t, test_rows, 20000, "Generated test rows: the examples clients send and kestrel_predict scores.");
ABSL_FLAG(int, train_steps, 10, "Iterations trained before serving.");
ABSL_FLAG(int64_t, table_rows, 1000000,
          "Rows added to every sparse table after training, before the first export: the served model's size (each "
          "new model is loaded with its whole chain, so the size shows in swaps and freshness).");
ABSL_FLAG(std::string, clients, "1,2,4,8,16", "Concurrent client counts.");
ABSL_FLAG(std::string, batches, "1,16,256", "Examples per request.");
ABSL_FLAG(double, seconds, 3, "Seconds per (batch, clients) load point.");
ABSL_FLAG(double, delta_interval, 2, "Seconds between checkpoints (each published as a delta).");
ABSL_FLAG(double, push_interval, 0.2, "Seconds between the training thread's pushes.");
ABSL_FLAG(int, predict_runs, 3,
          "Runs of the in-process kestrel_predict rate before the load phase, and as many after it (the median of "
          "all).");
ABSL_FLAG(std::string, dir, "/tmp", "Where the data, checkpoints and serving directory go (a fresh directory).");
ABSL_FLAG(std::string, output, "bench/results/serve_bench.md", "Markdown report path ('' to skip).");
ABSL_FLAG(std::string, git_commit, "", "Commit being measured (default: git rev-parse --short HEAD, if any).");
ABSL_FLAG(std::string, invocation, "", "The command that reproduces this run (the wrapper script's).");

namespace kestrel {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

// Every answer's model clock and when it arrived: freshness reads the first arrival of each clock.
class Arrivals {
 public:
  void Saw(int64_t clock) {
    std::lock_guard<std::mutex> lock(mu_);
    first_.emplace(clock, Clock::now());
  }
  // When an answer first came from a model at `clock` or later; nullopt if none did.
  std::optional<Clock::time_point> FirstAtOrAfter(int64_t clock) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::optional<Clock::time_point> first;
    for (auto it = first_.lower_bound(clock); it != first_.end(); ++it) {
      if (!first.has_value() || it->second < *first) first = it->second;
    }
    return first;
  }

 private:
  mutable std::mutex mu_;
  std::map<int64_t, Clock::time_point> first_;
};

struct LoadPoint {
  int batch = 0, clients = 0;
  double examples_per_second = 0, p50_ms = 0, p99_ms = 0, cpu_per_1k = 0;
  int64_t requests = 0, failed = 0;
  bool paced = false;
};

// `clients` threads sending `batch` lines each for `seconds` (closed loop, or paced: each thread one request per
// `interval`).
LoadPoint Drive(PredictClient& client, const std::vector<std::string>& lines, int batch, int clients, double seconds,
                double interval, Arrivals* arrivals, std::string* first_error) {
  std::atomic<int64_t> requests{0}, failed{0};
  std::vector<std::vector<double>> latencies(clients);
  std::mutex error_mu;
  const double cpu0 = bench::ProcessCpuSeconds();
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      size_t at = (c * 7919) % lines.size();
      auto next = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval * c / clients));
      while (Clock::now() < end) {
        if (interval > 0) {
          std::this_thread::sleep_until(next);
          next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval));
        }
        std::vector<std::string> request;
        for (int i = 0; i < batch; ++i) request.push_back(lines[(at + i) % lines.size()]);
        at = (at + batch) % lines.size();
        const auto sent = Clock::now();
        absl::StatusOr<PredictResponse> r = client.Predict(request);
        latencies[c].push_back(std::chrono::duration<double, std::milli>(Clock::now() - sent).count());
        ++requests;
        if (!r.ok() || r->scores_size() != batch) {
          ++failed;
          std::lock_guard<std::mutex> lock(error_mu);
          if (first_error->empty()) *first_error = r.ok() ? "a short answer" : r.status().ToString();
        } else {
          arrivals->Saw(r->clock());
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const double wall = bench::SecondsSince(start);
  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  LoadPoint p;
  p.batch = batch;
  p.clients = clients;
  p.requests = requests.load();
  p.failed = failed.load();
  p.examples_per_second = (p.requests - p.failed) * batch / wall;
  p.p50_ms = Percentile(all, 0.5);
  p.p99_ms = Percentile(all, 0.99);
  p.cpu_per_1k = (bench::ProcessCpuSeconds() - cpu0) / std::max<double>(1, (p.requests - p.failed) * batch) * 1000;
  p.paced = interval > 0;
  return p;
}

std::vector<int> IntList(const std::string& text) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) out.push_back(std::stoi(std::string(part)));
  return out;
}

absl::Status Serve(const std::string& root, const JobConfig& job, const std::vector<Shard*>& servers, int64_t clock,
                   int argc, char** argv, const std::string& load_start) {
  const CheckpointLayout layout(root + "/ckpt");
  {
    std::mt19937_64 rng(1);
    constexpr int64_t kChunk = 250000;  // rows per push (their gradients held at once)
    for (int64_t added = 0; added < absl::GetFlag(FLAGS_table_rows); added += kChunk) {
      const int rows = static_cast<int>(std::min(kChunk, absl::GetFlag(FLAGS_table_rows) - added));
      KESTREL_RETURN_IF_ERROR(PushTestRows(servers, clock, rows, &rng));
    }
  }
  KESTREL_RETURN_IF_ERROR(WriteTestCheckpoint(servers, layout, 1, clock, /*commit=*/true));
  PublisherOptions publish;
  publish.checkpoint_dir = layout.root();
  publish.job = job;
  publish.serving_dir = root + "/serving";
  KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<Publisher> publisher, Publisher::Open(publish));
  KESTREL_ASSIGN_OR_RETURN(const std::optional<ServingEntry> full, publisher->PublishLatest());
  std::vector<std::string> lines;
  {
    std::ifstream in(root + "/data/test.tsv");
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  // kestrel_predict's rate on the same model, in this process: runs before the load phase and as many after it
  // (the machine's other work drifts), the median of all.
  std::vector<double> predict_rates, predict_cpu;
  int64_t table_rows = 0;  // the first export's "emb" rows
  KESTREL_ASSIGN_OR_RETURN(const LoadedExport predict_model, LoadExport(publish.serving_dir + "/" + full->dir()));
  for (const ExportedTable& t : predict_model.model.tables()) {
    if (t.config().name() == "emb") table_rows = static_cast<int64_t>(t.rows());
  }
  auto predict_backend = NewCpuBackend();
  auto measure_predict = [&]() -> absl::Status {
    for (int run = 0; run < absl::GetFlag(FLAGS_predict_runs); ++run) {
      std::vector<float> probs, labels;
      const double cpu0 = bench::ProcessCpuSeconds();
      const auto t0 = Clock::now();
      KESTREL_RETURN_IF_ERROR(
          ScoreExport(predict_model, predict_backend.get(), {root + "/data/test.tsv"}, 0, &probs, &labels));
      predict_rates.push_back(probs.size() / bench::SecondsSince(t0));
      predict_cpu.push_back((bench::ProcessCpuSeconds() - cpu0) / probs.size() * 1000);
    }
    return absl::OkStatus();
  };
  KESTREL_RETURN_IF_ERROR(measure_predict());
  ModelSourceOptions source_options;
  source_options.serving_dir = publish.serving_dir;
  KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<ModelSource> source, ModelSource::Open(source_options));
  PredictionServerOptions server_options;
  server_options.address = "127.0.0.1:0";
  KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<PredictionServer> server, PredictionServer::Start(server_options, source.get()));
  PredictClientOptions client_options;
  client_options.address = absl::StrCat("127.0.0.1:", server->port());
  KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<PredictClient> client, NewPredictClient(client_options));

  // Training goes on: pushes every push_interval, a checkpoint every delta_interval, published and followed.
  absl::Notification stop;
  std::mutex pushes_mu;
  std::vector<std::pair<int64_t, Clock::time_point>> pushes;  // (clock, when)
  std::atomic<int64_t> published{0}, publish_failures{0};
  std::string train_error;
  std::thread trainer([&] {
    std::mt19937_64 rng(7);
    int64_t c = clock;
    uint64_t sequence = 1;
    auto next_checkpoint = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(absl::GetFlag(FLAGS_delta_interval)));
    const absl::Duration push_every = absl::Seconds(absl::GetFlag(FLAGS_push_interval));
    while (!stop.WaitForNotificationWithTimeout(push_every)) {
      if (absl::Status s = PushTestRows(servers, ++c, 256, &rng); !s.ok()) {
        train_error = s.ToString();
        return;
      }
      {
        std::lock_guard<std::mutex> lock(pushes_mu);
        pushes.emplace_back(c, Clock::now());
      }
      if (Clock::now() >= next_checkpoint) {
        if (absl::Status s = WriteTestCheckpoint(servers, layout, ++sequence, c, /*commit=*/true); !s.ok()) {
          train_error = s.ToString();
          return;
        }
        next_checkpoint += std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(absl::GetFlag(FLAGS_delta_interval)));
      }
    }
  });
  std::thread publishing([&] {
    while (!stop.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
      absl::StatusOr<std::optional<ServingEntry>> entry = publisher->PublishLatest();
      if (!entry.ok()) {
        ++publish_failures;
      } else if (entry->has_value()) {
        ++published;
      }
    }
  });
  std::thread polling([&] {
    while (!stop.WaitForNotificationWithTimeout(absl::Milliseconds(100))) source->Refresh().IgnoreError();
  });

  Arrivals arrivals;
  std::vector<LoadPoint> points;
  std::string first_error;
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const auto load_start_time = Clock::now();
  for (int batch : IntList(absl::GetFlag(FLAGS_batches))) {
    for (int clients : IntList(absl::GetFlag(FLAGS_clients))) {
      points.push_back(Drive(*client, lines, batch, clients, seconds, 0, &arrivals, &first_error));
      std::fprintf(stderr, "batch %d, %d clients: %.0f examples/s, p99 %.2f ms\n", batch, clients,
                   points.back().examples_per_second, points.back().p99_ms);
    }
  }
  // Half the maximum load at batch 1, paced.
  double max_batch1 = 0;
  int max_clients = 1;
  for (const LoadPoint& p : points) {
    if (p.batch == 1 && p.examples_per_second > max_batch1) {
      max_batch1 = p.examples_per_second;
      max_clients = p.clients;
    }
  }
  if (max_batch1 > 0) {
    const double interval = max_clients / (max_batch1 / 2);
    points.push_back(Drive(*client, lines, 1, max_clients, seconds, interval, &arrivals, &first_error));
  }
  const double load_seconds = bench::SecondsSince(load_start_time);
  stop.Notify();
  trainer.join();
  publishing.join();
  polling.join();
  // Freshness of every push made while clients were asking, that a later model answered for.
  std::vector<double> freshness;
  int64_t unreflected = 0;
  for (const auto& [c, when] : pushes) {
    if (when < load_start_time) continue;
    const std::optional<Clock::time_point> seen = arrivals.FirstAtOrAfter(c);
    if (seen.has_value() && *seen >= when) {
      freshness.push_back(std::chrono::duration<double>(*seen - when).count());
    } else {
      ++unreflected;
    }
  }
  const ModelSource::Counters counters = source->counters();
  server.reset();
  KESTREL_RETURN_IF_ERROR(measure_predict());

  // The report.
  const bench::Machine machine = bench::DescribeMachine(argc, argv, absl::GetFlag(FLAGS_git_commit),
                                                        absl::GetFlag(FLAGS_invocation));
  int64_t failed = 0, requests = 0;
  double best256 = 0;
  for (const LoadPoint& p : points) {
    failed += p.failed;
    requests += p.requests;
    if (p.batch == 256 && !p.paced) best256 = std::max(best256, p.examples_per_second);
  }
  const double predict_rate = bench::Median(predict_rates);
  const double delta = absl::GetFlag(FLAGS_delta_interval);
  std::string md = absl::StrCat(
      "# Online prediction under load, while training publishes deltas\n\n", bench::MachineMarkdown(machine, load_start),
      "\n\n", bench::CommandMarkdown(machine),
      absl::StrFormat("DeepFM, embedding dim 16, MLP 256-128, %lld rows per sparse table (%lld pushed after "
                      "training), %d test lines; the service: 1 scoring thread, "
                      "CPU backend (all cores); clients, service, trainer and publisher share the machine's %d "
                      "cores. A checkpoint every %.1f s (each published as a delta), a push of 256 new rows per "
                      "table every %.1f s.\n\n",
                      static_cast<long long>(table_rows), static_cast<long long>(absl::GetFlag(FLAGS_table_rows)),
                      static_cast<int>(lines.size()), machine.nproc, delta, absl::GetFlag(FLAGS_push_interval)));
  absl::StrAppend(&md, "| Figure | value |\n|---|---:|\n",
                  absl::StrFormat("| kestrel_predict in process, examples/s (median of %d; runs: %s) | %.0f |\n",
                                  static_cast<int>(predict_rates.size()),
                                  absl::StrJoin(predict_rates, ", ", [](std::string* out, double r) {
                                    absl::StrAppend(out, absl::StrFormat("%.0f", r));
                                  }),
                                  predict_rate),
                  absl::StrFormat("| kestrel_predict CPU-seconds per 1000 examples | %.4f |\n", bench::Median(predict_cpu)),
                  absl::StrFormat("| served at batch 256, examples/s (best client count) | %.0f |\n", best256),
                  absl::StrFormat("| **served at batch 256 / kestrel_predict in process** | **%.2f** |\n",
                                  predict_rate > 0 ? best256 / predict_rate : 0),
                  absl::StrFormat("| requests, failed (across %lld model swaps) | %lld, **%lld** |\n",
                                  static_cast<long long>(counters.loads - 1), static_cast<long long>(requests),
                                  static_cast<long long>(failed)),
                  absl::StrFormat("| exports published, publish failures, refused loads | %lld, %lld, %lld |\n",
                                  static_cast<long long>(published.load()), static_cast<long long>(publish_failures.load()),
                                  static_cast<long long>(counters.failed_loads)),
                  absl::StrFormat("| freshness, push to a served answer holding it: median / p99 / max s (%d pushes; %lld "
                                  "not yet reflected at the end) | %.2f / %.2f / %.2f |\n",
                                  static_cast<int>(freshness.size()), static_cast<long long>(unreflected),
                                  Percentile(freshness, 0.5), Percentile(freshness, 0.99), Percentile(freshness, 1.0)),
                  absl::StrFormat("| **max freshness / (2 x delta interval)** | **%.2f** |\n",
                                  Percentile(freshness, 1.0) / (2 * delta)),
                  absl::StrFormat("| load phase, s | %.1f |\n\n", load_seconds));
  absl::StrAppend(&md, "| batch | clients | examples/s | p50 ms | p99 ms | CPU-s / 1000 examples | requests | failed |\n",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const LoadPoint& p : points) {
    absl::StrAppend(&md, absl::StrFormat("| %d | %d%s | %.0f | %.2f | %.2f | %.4f | %lld | %lld |\n", p.batch, p.clients,
                                         p.paced ? " (paced at half the maximum load)" : "", p.examples_per_second,
                                         p.p50_ms, p.p99_ms, p.cpu_per_1k, static_cast<long long>(p.requests),
                                         static_cast<long long>(p.failed)));
  }
  if (!first_error.empty()) absl::StrAppend(&md, "\nFirst failed request: ", first_error, "\n");
  if (!train_error.empty()) absl::StrAppend(&md, "\nThe training thread stopped: ", train_error, "\n");
  return bench::PublishReport(md, absl::GetFlag(FLAGS_output));
}

absl::Status RunBench(int argc, char** argv) {
  const std::string load_start = bench::LoadAverage();
  const std::string root = absl::GetFlag(FLAGS_dir) + "/serve_bench_" + std::to_string(::getpid());
  fs::remove_all(root);
  fs::create_directories(root + "/data");
  DatagenOptions data = SmallDatagenOptions();
  data.train_rows = absl::GetFlag(FLAGS_train_rows);
  data.test_rows = absl::GetFlag(FLAGS_test_rows);
  KESTREL_RETURN_IF_ERROR(GenerateCriteoData(data, root + "/data").status());
  JobConfig job;
  job.mutable_model()->set_type(ModelConfig::DEEPFM);
  job.mutable_model()->set_embedding_dim(16);
  job.mutable_model()->add_hidden(256);
  job.mutable_model()->add_hidden(128);
  job.mutable_data()->add_train_files(root + "/data/train.tsv");
  job.mutable_data()->add_test_files(root + "/data/test.tsv");
  job.mutable_train()->set_batch_size(4096);
  job.mutable_train()->set_max_steps(absl::GetFlag(FLAGS_train_steps));
  auto backend = NewCpuBackend();
  LocalTrainingOptions options;
  options.finish = [&](const std::vector<Shard*>& servers, const TrainResult& result, const JobConfig& pinned) {
    return Serve(root, pinned, servers, result.steps, argc, argv, load_start);
  };
  const absl::Status ran = TrainInProcess(job, backend.get(), options).status();
  fs::remove_all(root);
  return ran;
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Kestrel serve_bench: the prediction service under load while deltas arrive. Usually run through "
      "bench/run_serve_bench.sh.");
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = kestrel::RunBench(argc, argv);
  if (!status.ok()) {
    std::fflush(stdout);
    std::fprintf(stderr, "serve_bench FAILED: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
