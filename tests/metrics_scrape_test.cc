// Prometheus metrics of real processes on loopback, scraped over HTTP (--metrics_port=0, --metrics_port_file):
//   - a kestrel_server counts Pull/Push/CreateTable calls by status code, keys, rejections and table sizes;
//   - a small ASP job (kestrel_scheduler, kestrel_server, one kestrel_worker and a stand-in second worker that
//     registers and heartbeats but never advances, so the real worker trains to the end and then waits) exports
//     the scheduler's membership, job state and clocks and the worker's examples, loss, AUC and clock.
// Every scrape also passes `promtool check metrics` when Debian's prometheus package is installed.
// The processes' gRPC runs over mutual TLS (tests/test_cluster_tls.h; each presents its own role and rank, the
// test's clients a worker's); the metrics endpoints are plain HTTP, as Prometheus scrapes them.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/metrics_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "client/grpc_scheduler_client.h"
#include "client/heartbeater.h"
#include "client/scheduler_client.h"
#include "tests/server_process.h"
#include "tests/test_cluster_tls.h"
#include "worker/data/datagen.h"
#include "worker/grpc_ps_client.h"

namespace kestrel {
namespace {

using ::testing::Optional;

constexpr char kJob[] = "metrics";

std::string TmpDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

// Scrapes 127.0.0.1:port/metrics, checks the text with promtool (when installed), and parses it.
absl::StatusOr<Exposition> Scrape(int port) {
  absl::StatusOr<std::string> body = HttpGet("127.0.0.1", port, "/metrics");
  if (!body.ok()) return body.status();
  if (absl::Status checked = PromtoolCheckMetrics(*body); !checked.ok() && !absl::IsNotFound(checked)) {
    return absl::Status(checked.code(), absl::StrCat(checked.message(), "\n", *body));
  }
  return ParseExposition(*body);
}

// Scrapes until `done` holds (up to `timeout`); returns the last scrape.
absl::StatusOr<Exposition> ScrapeUntil(int port, const std::function<bool(const Exposition&)>& done,
                                       absl::Duration timeout = absl::Seconds(60)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<Exposition> e = Scrape(port);
    if (!e.ok() || done(*e) || absl::Now() > deadline) return e;
    absl::SleepFor(absl::Milliseconds(100));
  }
}

double ValueOr0(const Exposition& e, const std::string& name, const std::map<std::string, std::string>& labels = {}) {
  return e.Value(name, labels).value_or(0);
}

TEST(MetricsScrapeTest, ServerCountsRequestsByMethodAndCode) {
  if (access(kPromtoolPath, X_OK) != 0) {
    std::printf("%s is missing (Debian package prometheus): scrapes are parsed but not linted\n", kPromtoolPath);
  }
  const std::string dir = TmpDir() + "/server_only";
  std::filesystem::create_directories(dir);
  const std::string metrics_port_file = dir + "/server.metrics_port";
  auto server_args = TestClusterTls::Get().WithFlags(
      {"--job_id=metrics", "--metrics_port=0", "--metrics_port_file=" + metrics_port_file}, kJob, "server", 0);
  ASSERT_TRUE(server_args.ok()) << server_args.status();
  auto server = ServerProcess::Start(RunfilePath("server/kestrel_server"), *server_args, dir, "server");
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<int> metrics_port = ReadPortFile(metrics_port_file);
  ASSERT_TRUE(metrics_port.ok()) << metrics_port.status();
  ASSERT_NE(*metrics_port, server->port());

  absl::StatusOr<Exposition> before = Scrape(*metrics_port);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->type.at("kestrel_server_requests_total"), "counter");
  EXPECT_EQ(before->type.at("kestrel_server_request_duration_seconds"), "histogram");
  EXPECT_EQ(before->type.at("kestrel_server_checkpoint_duration_seconds"), "histogram");
  EXPECT_THAT(before->Value("kestrel_server_requests_total", {{"method", "Pull"}, {"code", "OK"}}), Optional(0.0));
  EXPECT_THAT(before->Value("kestrel_server_keys_pulled_total"), Optional(0.0));

  auto worker_credentials = TestClusterTls::Get().Credentials(kJob, "worker", 0);
  ASSERT_TRUE(worker_credentials.ok()) << worker_credentials.status();
  PsClientOptions options;
  options.job_id = "metrics";
  options.worker_rank = 0;  // its certificate's rank
  auto client = NewGrpcPsClient(options, *Partition::Uniform(1), {server->address()}, *worker_credentials);
  ASSERT_TRUE(client.ok()) << client.status();
  TableConfig config;
  config.set_name("emb");
  config.set_dim(8);
  config.mutable_initializer()->set_type(InitializerConfig::UNIFORM);
  config.mutable_optimizer()->set_type(OptimizerConfig::SGD);
  config.mutable_optimizer()->set_learning_rate(0.1f);
  ASSERT_TRUE((*client)->CreateTable(config).ok());
  std::vector<uint64_t> keys;
  for (uint64_t f = 0; f < 1000; ++f) keys.push_back(Partition::FeatureKey(f));
  std::vector<float> rows(keys.size() * 8), grads(keys.size() * 8, 0.5f);
  ASSERT_TRUE((*client)->Pull("emb", keys, 8, rows.data()).ok());
  ASSERT_TRUE((*client)->Push("emb", keys, 8, grads.data()).ok());
  ASSERT_TRUE((*client)->Pull("emb", keys, 8, rows.data()).ok());
  EXPECT_FALSE((*client)->Pull("no_such_table", keys, 8, rows.data()).ok());

  absl::StatusOr<Exposition> after = Scrape(*metrics_port);
  ASSERT_TRUE(after.ok()) << after.status();
  auto requests = [&](const std::string& method, const std::string& code) {
    return ValueOr0(*after, "kestrel_server_requests_total", {{"method", method}, {"code", code}});
  };
  EXPECT_GE(requests("Pull", "OK"), 2);
  EXPECT_GE(requests("Push", "OK"), 1);
  EXPECT_GE(requests("CreateTable", "OK"), 1);
  EXPECT_GE(requests("Pull", "NOT_FOUND"), 1);
  EXPECT_GE(ValueOr0(*after, "kestrel_server_request_duration_seconds_count", {{"method", "Pull"}}),
            requests("Pull", "OK") + requests("Pull", "NOT_FOUND"));
  EXPECT_GT(ValueOr0(*after, "kestrel_server_request_duration_seconds_sum", {{"method", "Pull"}}), 0);
  EXPECT_THAT(after->Value("kestrel_server_keys_pulled_total"), Optional(2000.0));
  EXPECT_THAT(after->Value("kestrel_server_keys_pushed_total"), Optional(1000.0));
  EXPECT_GE(ValueOr0(*after, "kestrel_server_rejected_requests_total"), 1);
  EXPECT_EQ(after->type.at("kestrel_server_table_rows"), "gauge");  // no table, no series: absent before
  EXPECT_THAT(after->Value("kestrel_server_table_rows", {{"table", "emb"}}), Optional(1000.0));
  EXPECT_GT(ValueOr0(*after, "kestrel_server_table_memory_bytes", {{"table", "emb"}}), 1000 * 8 * sizeof(float));

  // Metrics do not slow a clean shutdown down.
  const absl::Time stop = absl::Now();
  absl::StatusOr<int> code = server->Stop(SIGTERM);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << "see " << server->log_path();
  EXPECT_LT(absl::Now() - stop, absl::Seconds(3));
}

TEST(MetricsScrapeTest, SchedulerAndWorkerExportTheJobsProgress) {
  const std::string dir = TmpDir() + "/cluster";
  std::filesystem::create_directories(dir);
  DatagenOptions data = SmallDatagenOptions();
  data.train_rows = 4000;
  data.test_rows = 1000;
  ASSERT_TRUE(GenerateCriteoData(data, dir).ok());
  const std::string config = dir + "/job.pbtxt";
  std::ofstream(config) << "model { type: LOGISTIC_REGRESSION }\n"
                        << "data { format: CRITEO train_files: '" << dir << "/train.tsv' test_files: '" << dir
                        << "/test.tsv' }\n"
                        << "train { batch_size: 64 max_steps: 10 log_every_steps: 5 eval_every_steps: 5 "
                           "eval_max_examples: 500 }\n";

  const std::string scheduler_port_file = dir + "/scheduler.metrics_port";
  auto scheduler_args = TestClusterTls::Get().WithFlags(
      {"--job_id=metrics", "--num_servers=1", "--num_workers=2", "--consistency=asp", "--heartbeat_interval=500ms",
       "--metrics_port=0", "--metrics_port_file=" + scheduler_port_file},
      kJob, "scheduler", 0);
  ASSERT_TRUE(scheduler_args.ok()) << scheduler_args.status();
  auto scheduler =
      ServerProcess::Start(RunfilePath("scheduler/kestrel_scheduler"), *scheduler_args, dir, "scheduler");
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  absl::StatusOr<int> scheduler_metrics = ReadPortFile(scheduler_port_file);
  ASSERT_TRUE(scheduler_metrics.ok()) << scheduler_metrics.status();

  absl::StatusOr<Exposition> forming = Scrape(*scheduler_metrics);
  ASSERT_TRUE(forming.ok()) << forming.status();
  EXPECT_THAT(forming->Value("kestrel_scheduler_job_state", {{"state", "forming"}}), Optional(1.0));
  EXPECT_THAT(forming->Value("kestrel_scheduler_job_state", {{"state", "running"}}), Optional(0.0));
  EXPECT_THAT(forming->Value("kestrel_scheduler_members_alive", {{"role", "server"}}), Optional(0.0));
  EXPECT_THAT(forming->Value("kestrel_scheduler_members_required", {{"role", "worker"}}), Optional(2.0));
  EXPECT_THAT(forming->Value("kestrel_scheduler_job_generation"), Optional(1.0));
  EXPECT_THAT(forming->Value("kestrel_scheduler_latest_checkpoint_clock"), Optional(-1.0));

  const std::string server_port_file = dir + "/server.metrics_port";
  auto server_args = TestClusterTls::Get().WithFlags({"--job_id=metrics", "--scheduler=" + scheduler->address(),
                                                     "--metrics_port=0", "--metrics_port_file=" + server_port_file},
                                                    kJob, "server", 0);
  ASSERT_TRUE(server_args.ok()) << server_args.status();
  auto server = ServerProcess::Start(RunfilePath("server/kestrel_server"), *server_args, dir, "server");
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<int> server_metrics = ReadPortFile(server_port_file);
  ASSERT_TRUE(server_metrics.ok()) << server_metrics.status();

  // Worker 1 stands in: registered and alive, it never starts an iteration, so the job never finishes.
  auto stand_in_credentials = TestClusterTls::Get().Credentials(kJob, "worker", 1);
  ASSERT_TRUE(stand_in_credentials.ok()) << stand_in_credentials.status();
  SchedulerClientOptions client_options;
  client_options.job_id = "metrics";
  std::unique_ptr<SchedulerClient> stand_in = NewGrpcSchedulerClient(scheduler->address(), client_options, *stand_in_credentials);
  absl::StatusOr<RegisterResponse> registered = stand_in->Register(ROLE_WORKER, "", 1);
  ASSERT_TRUE(registered.ok()) << registered.status();
  Heartbeater heartbeater(stand_in.get(), ROLE_WORKER, 1, registered->incarnation(), absl::Milliseconds(200),
                          [](absl::Status) {});

  const std::string worker_port_file = dir + "/worker.metrics_port";
  auto worker_args = TestClusterTls::Get().WithFlags(
      {"--job_id=metrics", "--config=" + config, "--scheduler=" + scheduler->address(), "--rank=0", "--device=cpu",
       "--metrics_port=0", "--metrics_port_file=" + worker_port_file},
      kJob, "worker", 0);
  ASSERT_TRUE(worker_args.ok()) << worker_args.status();
  auto worker = ServerProcess::Spawn(RunfilePath("cmd/kestrel_worker"), *worker_args, dir, "worker0");
  ASSERT_TRUE(worker.ok()) << worker.status();
  absl::StatusOr<int> worker_metrics = ReadPortFile(worker_port_file);
  ASSERT_TRUE(worker_metrics.ok()) << worker_metrics.status() << "; see " << worker->log_path();

  // The worker trains its 10 iterations (ASP never waits), then waits for worker 1 to finish.
  absl::StatusOr<Exposition> w = ScrapeUntil(*worker_metrics, [](const Exposition& e) {
    return e.Value("kestrel_worker_clock") == 10.0 && e.Value("kestrel_worker_examples_total") == 640.0;
  });
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_THAT(w->Value("kestrel_worker_clock"), Optional(10.0)) << "see " << worker->log_path();
  EXPECT_THAT(w->Value("kestrel_worker_examples_total"), Optional(640.0));
  EXPECT_EQ(w->type.at("kestrel_worker_examples_total"), "counter");
  EXPECT_GT(ValueOr0(*w, "kestrel_worker_examples_per_second"), 0);
  EXPECT_GT(ValueOr0(*w, "kestrel_worker_train_logloss"), 0.1);
  EXPECT_LT(ValueOr0(*w, "kestrel_worker_train_logloss"), 1.5);
  // The evaluation at step 5.
  EXPECT_GT(ValueOr0(*w, "kestrel_worker_eval_auc"), 0.5);
  EXPECT_GT(ValueOr0(*w, "kestrel_worker_eval_logloss"), 0.1);
  EXPECT_THAT(w->Value("kestrel_worker_rejoins_total"), Optional(0.0));

  absl::StatusOr<Exposition> s = Scrape(*scheduler_metrics);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(s->Value("kestrel_scheduler_job_state", {{"state", "running"}}), Optional(1.0));
  EXPECT_THAT(s->Value("kestrel_scheduler_job_state", {{"state", "forming"}}), Optional(0.0));
  EXPECT_THAT(s->Value("kestrel_scheduler_members_alive", {{"role", "server"}}), Optional(1.0));
  EXPECT_THAT(s->Value("kestrel_scheduler_members_alive", {{"role", "worker"}}), Optional(2.0));
  EXPECT_THAT(s->Value("kestrel_scheduler_min_worker_clock"), Optional(0.0));
  EXPECT_THAT(s->Value("kestrel_scheduler_max_worker_clock"), Optional(10.0));
  EXPECT_THAT(s->Value("kestrel_scheduler_clock_staleness"), Optional(10.0));
  EXPECT_GE(ValueOr0(*s, "kestrel_scheduler_requests_total", {{"method", "Register"}, {"code", "OK"}}), 3);
  // Server-enforced clocks (the default): a worker reports once per lease of 8 iterations, not every one.
  EXPECT_GE(ValueOr0(*s, "kestrel_scheduler_requests_total", {{"method", "Advance"}, {"code", "OK"}}), 1);
  EXPECT_GE(ValueOr0(*s, "kestrel_scheduler_requests_total", {{"method", "Heartbeat"}, {"code", "OK"}}), 1);
  EXPECT_THAT(s->Value("kestrel_scheduler_checkpoints_committed_total"), Optional(0.0));
  EXPECT_THAT(s->Value("kestrel_scheduler_rollbacks_total"), Optional(0.0));

  absl::StatusOr<Exposition> p = Scrape(*server_metrics);
  ASSERT_TRUE(p.ok()) << p.status();
  // Each iteration's push travels in a Step (with the next iteration's read) or, the last one, a Push.
  EXPECT_GE(ValueOr0(*p, "kestrel_server_requests_total", {{"method", "Push"}, {"code", "OK"}}) +
                ValueOr0(*p, "kestrel_server_requests_total", {{"method", "Step"}, {"code", "OK"}}),
            10);
  EXPECT_GT(ValueOr0(*p, "kestrel_server_keys_pushed_total"), 0);
  double rows = 0;
  for (const auto& [key, value] : p->samples) {
    if (key.rfind("kestrel_server_table_rows{", 0) == 0) rows += value;
  }
  EXPECT_GT(rows, 0);

  ASSERT_TRUE(worker->Stop(SIGKILL).ok());
  for (ServerProcess* process : {&*server, &*scheduler}) {
    absl::StatusOr<int> code = process->Stop(SIGTERM);
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0) << "see " << process->log_path();
  }
}

}  // namespace
}  // namespace kestrel
