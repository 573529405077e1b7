// End to end on loopback: a real kestrel_scheduler, 2 kestrel_server and 2 kestrel_worker processes (CPU
// backend) train LR and DeepFM on the small generated set in BSP, SSP(2), SSP(2) under leases (server-enforced
// clocks: one Step per server per iteration, fused ahead) and ASP. Each run's final test AUC is
// within 0.02 of the planted Bayes-optimal AUC, and two BSP runs produce bitwise-identical predictions, also at
// a realistic model size with multi-threaded compute. Every process runs over mutual TLS with the certificate of
// its role and rank (tests/test_cluster_tls.h).
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/records.h"
#include "tests/server_process.h"
#include "tests/test_cluster_tls.h"
#include "worker/data/datagen.h"

namespace kestrel {
namespace {

std::string TmpDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

class TrainClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new std::string(TmpDir() + "/cluster_data");
    std::filesystem::create_directories(*data_);
    truth_ = new DatagenTruth(*GenerateCriteoData(SmallDatagenOptions(), *data_));
  }

  // Runs one job on a fresh cluster and returns worker 0's final evaluation.
  // `model_fields`: more ModelConfig fields (text format); `batch_size`: per worker; `compute_threads`: each
  // worker's --compute_threads.
  // `lease_clocks`: the scheduler's --lease_clocks (0: the scheduler is every iteration's barrier).
  absl::StatusOr<Record> RunJob(const std::string& name, const std::string& model, const std::string& consistency,
                                int staleness, const std::string& model_fields = "", int batch_size = 256,
                                int compute_threads = 1, int lease_clocks = 0) {
    const std::string dir = absl::StrCat(TmpDir(), "/", name);
    std::filesystem::create_directories(dir);
    const std::string config = dir + "/job.pbtxt";
    std::ofstream(config) << "model { type: " << model << " " << model_fields << " }\n"
                          << "data { format: CRITEO train_files: '" << *data_ << "/train.tsv' test_files: '"
                          << *data_ << "/test.tsv' }\n"
                          << "train { batch_size: " << batch_size << " epochs: 2 log_every_steps: 100 }\n";
    TestClusterTls& tls = TestClusterTls::Get();
    absl::StatusOr<std::vector<std::string>> args =
        tls.WithFlags({"--job_id=e2e", "--num_servers=2", "--num_workers=2", "--consistency=" + consistency,
                       absl::StrCat("--staleness=", staleness), "--heartbeat_interval=1s",
                       absl::StrCat("--lease_clocks=", lease_clocks)},
                      "e2e", "scheduler", 0);
    if (!args.ok()) return args.status();
    auto scheduler = ServerProcess::Start(RunfilePath("scheduler/kestrel_scheduler"), *args, dir, "scheduler");
    if (!scheduler.ok()) return scheduler.status();
    std::vector<ServerProcess> servers;
    for (int s = 0; s < 2; ++s) {
      args = tls.WithFlags({"--job_id=e2e", "--num_servers=2", absl::StrCat("--rank=", s),
                            absl::StrCat("--bsp_workers=", consistency == "bsp" ? 2 : 0),
                            "--scheduler=" + scheduler->address()},
                           "e2e", "server", s);
      if (!args.ok()) return args.status();
      auto server = ServerProcess::Start(RunfilePath("server/kestrel_server"), *args, dir, absl::StrCat("server", s));
      if (!server.ok()) return server.status();
      servers.push_back(std::move(server).value());
    }
    std::vector<ServerProcess> workers;
    for (int w = 0; w < 2; ++w) {
      args = tls.WithFlags({"--job_id=e2e", "--config=" + config, "--scheduler=" + scheduler->address(),
                            absl::StrCat("--rank=", w), "--device=cpu",
                            absl::StrCat("--compute_threads=", compute_threads),
                            "--metrics_out=" + dir + "/metrics.jsonl", "--metrics_append"},
                           "e2e", "worker", w);
      if (!args.ok()) return args.status();
      auto worker = ServerProcess::Spawn(RunfilePath("cmd/kestrel_worker"), *args, dir, absl::StrCat("worker", w));
      if (!worker.ok()) return worker.status();
      workers.push_back(std::move(worker).value());
    }
    for (int w = 0; w < 2; ++w) {
      absl::StatusOr<int> code = workers[w].Wait(absl::Minutes(4));
      if (!code.ok() || *code != 0) {
        return absl::InternalError(absl::StrCat(name, ": worker ", w, " ended with ",
                                                code.ok() ? absl::StrCat("exit code ", *code) : code.status().ToString(),
                                                "; see ", workers[w].log_path()));
      }
    }
    return LastRecord(dir + "/metrics.jsonl", "eval");
  }

  static std::string* data_;
  static DatagenTruth* truth_;
};
std::string* TrainClusterTest::data_ = nullptr;
DatagenTruth* TrainClusterTest::truth_ = nullptr;

TEST_F(TrainClusterTest, LrAndDeepFmReachTheBayesAucInEveryModeAndBspIsBitwiseRepeatable) {
  struct Mode {
    std::string consistency;
    int staleness;
    int lease_clocks = 0;
  };
  const std::vector<Mode> modes = {{"bsp", 0}, {"ssp", 2}, {"ssp", 2, 8}, {"asp", 0}};
  std::map<std::string, Record> bsp;
  for (const std::string model : {"LOGISTIC_REGRESSION", "DEEPFM"}) {
    for (const Mode& mode : modes) {
      const std::string name = absl::StrCat(model, "_", mode.consistency, mode.staleness,
                                            mode.lease_clocks > 0 ? "_leased" : "");
      absl::StatusOr<Record> eval = RunJob(name, model, mode.consistency, mode.staleness, "", 256, 1, mode.lease_clocks);
      ASSERT_TRUE(eval.ok()) << eval.status();
      RecordProperty(name + "_auc", absl::StrCat(eval->auc()));
      std::printf("%-26s AUC %.5f (Bayes %.5f)  logloss %.5f (Bayes %.5f)\n", name.c_str(), eval->auc(),
                  truth_->bayes_auc, eval->logloss(), truth_->bayes_logloss);
      EXPECT_GT(eval->auc(), truth_->bayes_auc - 0.02) << name;
      if (mode.consistency == "bsp" && mode.lease_clocks == 0) bsp[model] = *eval;
    }
  }
  // BSP again: bitwise the same predictions on all 10000 test examples.
  for (const std::string model : {"LOGISTIC_REGRESSION", "DEEPFM"}) {
    absl::StatusOr<Record> again = RunJob(model + "_bsp_again", model, "bsp", 0);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->fingerprint(), bsp[model].fingerprint()) << model;
    EXPECT_EQ(again->logloss(), bsp[model].logloss()) << model;
  }
}

// The realistic size (embedding dim 16, MLP 256-128, 4096 examples per worker per step) on the oneDNN
// backend with 2 compute threads per worker: two BSP runs still give bitwise-identical predictions.
TEST_F(TrainClusterTest, DeepFmAtARealisticSizeIsBitwiseRepeatableInBsp) {
  const std::string fields = "embedding_dim: 16 hidden: [256, 128]";
  absl::StatusOr<Record> first = RunJob("deepfm_real_bsp", "DEEPFM", "bsp", 0, fields, 4096, 2);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<Record> again = RunJob("deepfm_real_bsp_again", "DEEPFM", "bsp", 0, fields, 4096, 2);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(first->fingerprint().empty());
  EXPECT_EQ(again->fingerprint(), first->fingerprint());
  EXPECT_EQ(again->logloss(), first->logloss());
  EXPECT_GT(first->auc(), truth_->bayes_auc - 0.05);
}

}  // namespace
}  // namespace kestrel
