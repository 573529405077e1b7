// The serving loop in one process: a trained model's checkpoints published as a full export and deltas, served
// bit for bit as kestrel_predict scores the same export chain, swapped in while requests run, and kept when a
// newer export is damaged or out of order; the Predictor service's answers to bad requests.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "common/checkpoint_layout.h"
#include "common/partition.h"
#include "common/status.h"
#include "common/test_seed.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "export/load_export.h"
#include "export/score_export.h"
#include "inprocess/local_trainer.h"
#include "proto/serving.grpc.pb.h"
#include "server/shard.h"
#include "serving/checkpoint_testing.h"
#include "serving/model_source.h"
#include "serving/predict_client.h"
#include "serving/prediction_service.h"
#include "serving/publisher.h"
#include "serving/served_model.h"
#include "serving/serving_manifest.h"
#include "worker/compute/cpu_backend.h"
#include "worker/data/datagen.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

constexpr int kCheckpoints = 6;  // ckpt-1: the trained model; 2..: more pushes on top, one clock each

// The job, trained once for the whole suite: its checkpoints ckpt-1 .. ckpt-6 are written (LATEST at ckpt-1);
// tests move LATEST on to publish the next.
class ServingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(::testing::TempDir() + "/serving_test");
    fs::remove_all(*root_);
    fs::create_directories(*root_ + "/data");
    DatagenOptions data = SmallDatagenOptions();
    data.train_rows = 20000;
    data.test_rows = 2000;
    ASSERT_TRUE(GenerateCriteoData(data, *root_ + "/data").ok());
    job_ = new JobConfig();
    job_->mutable_model()->set_type(ModelConfig::DEEPFM);
    job_->mutable_data()->add_train_files(*root_ + "/data/train.tsv");
    job_->mutable_data()->add_test_files(*root_ + "/data/test.tsv");
    job_->mutable_train()->set_batch_size(512);
    job_->mutable_train()->set_max_steps(20);
    auto backend = NewCpuBackend();
    LocalTrainingOptions options;
    options.finish = [](const std::vector<Shard*>& servers, const TrainResult& result, const JobConfig& pinned) {
      *job_ = pinned;
      return WriteCheckpoints(servers, result.steps);
    };
    const absl::StatusOr<TrainResult> trained = TrainInProcess(*job_, backend.get(), options);
    ASSERT_TRUE(trained.ok()) << trained.status();
    std::ifstream test(*root_ + "/data/test.tsv");
    lines_ = new std::vector<std::string>();
    for (std::string line; std::getline(test, line) && lines_->size() < 600;) lines_->push_back(line);
  }
  static void TearDownTestSuite() { fs::remove_all(*root_); }

  void SetUp() override {
    serving_dir_ = absl::StrCat(*root_, "/", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(serving_dir_);
    ASSERT_TRUE(Layout().MoveLatest(CheckpointLayout::CheckpointName(1)).ok());
  }

  static CheckpointLayout Layout() { return CheckpointLayout(*root_ + "/ckpt"); }

  // Checkpoint 1 of the trained servers at `clock`, then checkpoints 2.. each after one more tool push of new
  // sparse rows and every dense block; LATEST names checkpoint 1.
  static absl::Status WriteCheckpoints(const std::vector<Shard*>& servers, int64_t clock) {
    const TestSeed seed;
    std::mt19937_64 rng(seed.value());
    for (int c = 1; c <= kCheckpoints; ++c) {
      if (c > 1) KESTREL_RETURN_IF_ERROR(PushTestRows(servers, clock + c - 1, 64, &rng));
      KESTREL_RETURN_IF_ERROR(WriteTestCheckpoint(servers, Layout(), c, clock + c - 1, /*commit=*/c == 1));
    }
    return absl::OkStatus();
  }

  // Moves LATEST to checkpoint `c` and publishes it.
  ServingEntry Publish(Publisher& publisher, int c) {
    EXPECT_TRUE(Layout().MoveLatest(CheckpointLayout::CheckpointName(c)).ok());
    absl::StatusOr<std::optional<ServingEntry>> entry = publisher.PublishLatest();
    EXPECT_TRUE(entry.ok()) << entry.status();
    EXPECT_TRUE(entry.ok() && entry->has_value());
    return entry.ok() && entry->has_value() ? **entry : ServingEntry();
  }

  std::unique_ptr<Publisher> NewPublisher(int full_every = 10) {
    PublisherOptions options;
    options.checkpoint_dir = *root_ + "/ckpt";
    options.job = *job_;
    options.serving_dir = serving_dir_;
    options.full_every = full_every;
    absl::StatusOr<std::unique_ptr<Publisher>> publisher = Publisher::Open(options);
    EXPECT_TRUE(publisher.ok()) << publisher.status();
    return publisher.ok() ? *std::move(publisher) : nullptr;
  }

  // What kestrel_predict computes for the test lines with the export in `dir` (export/score_export.h).
  static std::vector<float> PredictOf(const std::string& dir) {
    absl::StatusOr<LoadedExport> loaded = LoadExport(dir);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    if (!loaded.ok()) return {};
    auto backend = NewCpuBackend();
    std::vector<float> probs, labels;
    const absl::Status scored = ScoreExport(*loaded, backend.get(), {*root_ + "/data/test.tsv"},
                                            static_cast<int64_t>(lines_->size()), &probs, &labels);
    EXPECT_TRUE(scored.ok()) << scored;
    return probs;
  }

  // The model's scores of the test lines, `group` lines per ModelScorer pass.
  static std::vector<float> ScoresOf(std::shared_ptr<const ServedModel> model, size_t group) {
    auto backend = NewCpuBackend();
    absl::StatusOr<std::unique_ptr<ModelScorer>> scorer = ModelScorer::Create(std::move(model), backend.get());
    EXPECT_TRUE(scorer.ok()) << scorer.status();
    std::vector<float> scores;
    std::vector<absl::string_view> views(lines_->begin(), lines_->end());
    for (size_t at = 0; scorer.ok() && at < views.size(); at += group) {
      const size_t n = std::min(group, views.size() - at);
      EXPECT_TRUE((*scorer)->Add(absl::MakeConstSpan(views).subspan(at, n)).ok());
      EXPECT_TRUE((*scorer)->Score(&scores).ok());
    }
    return scores;
  }

  static bool Bitwise(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  }

  std::unique_ptr<ModelSource> Follow() {
    ModelSourceOptions options;
    options.serving_dir = serving_dir_;
    absl::StatusOr<std::unique_ptr<ModelSource>> source = ModelSource::Open(options);
    EXPECT_TRUE(source.ok()) << source.status();
    return source.ok() ? *std::move(source) : nullptr;
  }

  static std::string* root_;
  static JobConfig* job_;
  static std::vector<std::string>* lines_;
  std::string serving_dir_;
};
std::string* ServingTest::root_ = nullptr;
JobConfig* ServingTest::job_ = nullptr;
std::vector<std::string>* ServingTest::lines_ = nullptr;

TEST_F(ServingTest, ServesAChainOfDeltasBitForBitAsPredictScoresItWhateverTheBatching) {
  std::unique_ptr<Publisher> publisher = NewPublisher();
  const ServingEntry full = Publish(*publisher, 1);
  EXPECT_TRUE(full.full());
  std::unique_ptr<ModelSource> source = Follow();
  ASSERT_NE(source->current(), nullptr);
  EXPECT_EQ(source->current()->name, full.dir());
  const std::vector<float> first = PredictOf(serving_dir_ + "/" + full.dir());
  ASSERT_EQ(first.size(), lines_->size());
  for (size_t group = 1; group <= 600; group += (group < 40 ? 1 : 97)) {
    EXPECT_TRUE(Bitwise(ScoresOf(source->current(), group), first)) << group << " lines per pass";
  }
  for (int c = 2; c <= 3; ++c) {
    const ServingEntry delta = Publish(*publisher, c);
    EXPECT_FALSE(delta.full());
    ASSERT_TRUE(source->Refresh().ok());
    EXPECT_EQ(source->current()->name, delta.dir());
    EXPECT_EQ(source->current()->loaded.model.clock(), delta.clock());
    const std::vector<float> expected = PredictOf(serving_dir_ + "/" + delta.dir());
    EXPECT_FALSE(Bitwise(expected, first)) << "the pushes changed the model";
    EXPECT_TRUE(Bitwise(ScoresOf(source->current(), 13), expected)) << delta.dir();
  }
  EXPECT_EQ(source->counters().loads, 3);
  EXPECT_EQ(source->counters().failed_loads, 0);
}

TEST_F(ServingTest, PublishesAFullExportEveryFullEveryAndDropsOldChains) {
  std::unique_ptr<Publisher> publisher = NewPublisher(/*full_every=*/2);
  for (int c = 1; c <= 5; ++c) Publish(*publisher, c);
  // Chains: [1 2] [3 4] [5]: the newest two kept.
  const absl::StatusOr<ServingManifest> manifest = ReadServingManifest(serving_dir_);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  std::vector<std::string> dirs;
  for (const ServingEntry& e : manifest->entries()) dirs.push_back(e.dir());
  EXPECT_EQ(dirs, (std::vector<std::string>{"ckpt-00000003.full", "ckpt-00000004.delta", "ckpt-00000005.full"}));
  EXPECT_FALSE(fs::exists(serving_dir_ + "/ckpt-00000001.full"));
  EXPECT_FALSE(fs::exists(serving_dir_ + "/ckpt-00000002.delta"));
  // Nothing new: nothing published. A publisher reopened continues the chain.
  EXPECT_FALSE(publisher->PublishLatest()->has_value());
  publisher = NewPublisher(/*full_every=*/2);
  EXPECT_FALSE(Publish(*publisher, 6).full());
}

// The job commits on while a checkpoint is exported, and retires the one being read: the newest is published
// instead, with no partial export left. A checkpoint damaged under an unmoved LATEST is an error, as before.
TEST_F(ServingTest, PublishesTheNewestWhenTheJobRetiresTheCheckpointBeingRead) {
  const std::string two = Layout().CheckpointDir(CheckpointLayout::CheckpointName(2));
  int exports = 0;
  PublisherOptions options;
  options.checkpoint_dir = *root_ + "/ckpt";
  options.job = *job_;
  options.serving_dir = serving_dir_;
  options.before_export = [&](const std::string& checkpoint) {
    if (++exports == 1) {  // the job commits ckpt-3 and retires ckpt-2 under the export
      EXPECT_EQ(checkpoint, CheckpointLayout::CheckpointName(2));
      EXPECT_TRUE(Layout().MoveLatest(CheckpointLayout::CheckpointName(3)).ok());
      fs::rename(two, two + ".retired");
    }
  };
  absl::StatusOr<std::unique_ptr<Publisher>> publisher = Publisher::Open(options);
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  ASSERT_TRUE(Layout().MoveLatest(CheckpointLayout::CheckpointName(2)).ok());
  absl::StatusOr<std::optional<ServingEntry>> entry = (*publisher)->PublishLatest();
  fs::rename(two + ".retired", two);
  ASSERT_TRUE(entry.ok()) << entry.status();
  ASSERT_TRUE(entry->has_value());
  EXPECT_EQ((*entry)->checkpoint(), CheckpointLayout::CheckpointName(3));
  EXPECT_EQ(exports, 2);
  EXPECT_FALSE(fs::exists(serving_dir_ + "/ckpt-00000002.full")) << "a partial export was left";
  // Damage under a LATEST that stays: the error, after one attempt, and the manifest unchanged.
  ASSERT_TRUE(Layout().MoveLatest(CheckpointLayout::CheckpointName(4)).ok());
  const std::string four = Layout().CheckpointDir(CheckpointLayout::CheckpointName(4));
  fs::rename(four + "/shard-0000", four + "/shard-0000.gone");
  entry = (*publisher)->PublishLatest();
  fs::rename(four + "/shard-0000.gone", four + "/shard-0000");
  EXPECT_FALSE(entry.ok());
  EXPECT_TRUE(absl::StrContains(entry.status().message(), "shard-0000")) << entry.status();
  EXPECT_EQ(exports, 3);
  EXPECT_EQ((*publisher)->manifest().entries_size(), 1);
  EXPECT_FALSE(fs::exists(serving_dir_ + "/ckpt-00000004.delta")) << "a partial export was left";
}

TEST_F(ServingTest, KeepsTheModelWhenANewerDeltaIsDamagedOrOutOfOrder) {
  std::unique_ptr<Publisher> publisher = NewPublisher();
  Publish(*publisher, 1);
  const ServingEntry good = Publish(*publisher, 2);
  std::unique_ptr<ModelSource> source = Follow();
  ASSERT_EQ(source->current()->name, good.dir());
  std::shared_ptr<const ServedModel> served = source->current();
  std::vector<float> before = ScoresOf(served, 64);
  auto expect_kept = [&](absl::StatusCode code, absl::string_view why) {
    const absl::Status refreshed = source->Refresh();
    EXPECT_EQ(refreshed.code(), code) << refreshed;
    EXPECT_TRUE(absl::StrContains(refreshed.message(), why)) << refreshed;
    EXPECT_EQ(source->current(), served) << "the model served is unchanged";
    EXPECT_TRUE(Bitwise(ScoresOf(source->current(), 64), before));
    EXPECT_TRUE(absl::StrContains(source->counters().last_error, why)) << source->counters().last_error;
  };
  // A corrupt delta: one byte of its rows flipped.
  const ServingEntry corrupt = Publish(*publisher, 3);
  {
    const std::string rows = serving_dir_ + "/" + corrupt.dir() + "/emb.rows";
    ASSERT_GT(fs::file_size(rows), 20u);
    std::fstream f(rows, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(12);
    f.put(static_cast<char>(f.peek() ^ 0x5a));
  }
  expect_kept(absl::StatusCode::kDataLoss, "emb.rows");
  EXPECT_EQ(source->counters().failed_loads, 1);
  EXPECT_TRUE(source->Refresh().ok()) << "the same refusal is not tried again";
  EXPECT_EQ(source->counters().failed_loads, 1);
  // The publisher refuses to stack a delta on it; a new chain (a full export) loads.
  EXPECT_EQ(Layout().MoveLatest(CheckpointLayout::CheckpointName(4)).ok(), true);
  EXPECT_EQ(publisher->PublishLatest().status().code(), absl::StatusCode::kDataLoss);
  publisher = NewPublisher(/*full_every=*/1);
  EXPECT_TRUE(Publish(*publisher, 4).full());
  ASSERT_TRUE(source->Refresh().ok());
  served = source->current();
  before = ScoresOf(served, 64);
  // A truncated delta.
  publisher = NewPublisher();
  const ServingEntry truncated = Publish(*publisher, 5);
  EXPECT_FALSE(truncated.full());
  fs::resize_file(serving_dir_ + "/" + truncated.dir() + "/dense.dense", 8);
  expect_kept(absl::StatusCode::kDataLoss, "dense.dense");
  // A manifest rolled back to an older entry: out of order.
  ServingManifest older;
  older.set_job_id(publisher->manifest().job_id());
  *older.add_entries() = publisher->manifest().entries(0);
  ASSERT_TRUE(WriteServingManifest(serving_dir_, older).ok());
  expect_kept(absl::StatusCode::kFailedPrecondition, "out of order");
  // A damaged manifest.
  {
    std::ofstream f(serving_dir_ + "/MANIFEST", std::ios::app);
    f << "garbage\n";
  }
  expect_kept(absl::StatusCode::kDataLoss, "MANIFEST");
  EXPECT_EQ(source->counters().failed_loads, 4);
  EXPECT_EQ(source->counters().loads, 2);
}

// A client of the service on a loopback port.
class ServiceTest : public ServingTest {
 protected:
  void StartService(PredictionServiceOptions service = {}) {
    std::unique_ptr<Publisher> publisher = NewPublisher();
    Publish(*publisher, 1);
    publisher_ = std::move(publisher);
    source_ = Follow();
    PredictionServerOptions options;
    options.address = "127.0.0.1:0";
    options.service = service;
    options.service.compute_threads = 1;
    absl::StatusOr<std::unique_ptr<PredictionServer>> server = PredictionServer::Start(options, source_.get());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    PredictClientOptions client;
    client.address = absl::StrCat("127.0.0.1:", server_->port());
    client_ = *NewPredictClient(client);
    channel_ = grpc::CreateChannel(client.address, grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    server_.reset();
    source_.reset();
  }

  std::unique_ptr<Publisher> publisher_;
  std::unique_ptr<ModelSource> source_;
  std::unique_ptr<PredictionServer> server_;
  std::unique_ptr<PredictClient> client_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(ServiceTest, AnswersBadRequestsWithAStatusNamingTheProblemAndKeepsServing) {
  PredictionServiceOptions service;
  service.max_batch = 32;
  StartService(service);
  const std::vector<std::string> some(lines_->begin(), lines_->begin() + 10);
  absl::StatusOr<PredictResponse> good = client_->Predict(some);
  ASSERT_TRUE(good.ok()) << good.status();
  ASSERT_EQ(good->scores_size(), 10);
  const std::vector<float> expected = PredictOf(serving_dir_ + "/" + good->model());
  EXPECT_TRUE(Bitwise(std::vector<float>(good->scores().begin(), good->scores().end()),
                      std::vector<float>(expected.begin(), expected.begin() + 10)));
  auto expect = [&](absl::StatusOr<PredictResponse> r, absl::StatusCode code, absl::string_view why) {
    EXPECT_EQ(r.status().code(), code) << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), why)) << r.status();
  };
  expect(client_->Predict({}), absl::StatusCode::kInvalidArgument, "no lines");
  expect(client_->Predict(std::vector<std::string>(lines_->begin(), lines_->begin() + 33)),
         absl::StatusCode::kInvalidArgument, "at most 32");
  std::vector<std::string> malformed = some;
  malformed[3] = "1\tnot\ta criteo line";
  expect(client_->Predict(malformed), absl::StatusCode::kInvalidArgument, "line 3");
  expect(client_->Predict({std::string(kMaxPredictLineBytes + 1, '1')}), absl::StatusCode::kInvalidArgument,
         "line 0 is");
  // An unknown field (a newer client's, or a confused one's).
  PredictRequest unknown;
  unknown.add_lines(some[0]);
  unknown.GetReflection()->MutableUnknownFields(&unknown)->AddVarint(9, 1);
  PredictResponse response;
  grpc::ClientContext context;
  const grpc::Status answered = Predictor::NewStub(channel_)->Predict(&context, unknown, &response);
  EXPECT_EQ(answered.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(answered.error_message(), "number 9")) << answered.error_message();
  // Nothing changed: the same scores from the same model.
  absl::StatusOr<PredictResponse> again = client_->Predict(some);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->SerializeAsString(), good->SerializeAsString());
  absl::StatusOr<ModelStatusResponse> status = client_->ModelStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->model(), good->model());
  EXPECT_EQ(status->loads(), 1);
  EXPECT_EQ(status->failed_loads(), 0);
}

TEST_F(ServiceTest, SwapsModelsUnderLoadWithoutFailingARequest) {
  StartService();
  std::atomic<bool> stop{false};
  std::atomic<int> failed{0}, answered{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      const size_t n = 1 + t * 40;
      const std::vector<std::string> batch(lines_->begin(), lines_->begin() + n);
      while (!stop.load()) {
        absl::StatusOr<PredictResponse> r = client_->Predict(batch);
        if (!r.ok() || r->scores_size() != static_cast<int>(n)) {
          ++failed;
        } else {
          ++answered;
        }
      }
    });
  }
  for (int c = 2; c <= kCheckpoints; ++c) {
    const ServingEntry entry = Publish(*publisher_, c);
    ASSERT_TRUE(source_->Refresh().ok());
    // Wait for an answer from the new model.
    for (int i = 0; i < 1000; ++i) {
      absl::StatusOr<PredictResponse> r = client_->Predict({(*lines_)[0]});
      ASSERT_TRUE(r.ok()) << r.status();
      if (r->model() == entry.dir()) break;
    }
  }
  stop = true;
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GT(answered.load(), 0);
  EXPECT_EQ(source_->counters().loads, kCheckpoints);
}

TEST_F(ServiceTest, RefusesWhatTheQueueCannotHold) {
  PredictionServiceOptions service;
  service.max_queued = 1;
  StartService(service);
  // Many concurrent full-size requests against one queue slot: some are refused, and say why.
  std::atomic<int> exhausted{0}, ok{0};
  std::vector<std::thread> clients;
  const std::vector<std::string> batch(lines_->begin(), lines_->end());
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&] {
      for (int i = 0; i < 5; ++i) {
        absl::StatusOr<PredictResponse> r = client_->Predict(batch);
        if (r.ok()) {
          ++ok;
        } else if (absl::IsResourceExhausted(r.status()) &&
                   absl::StrContains(r.status().message(), "--max_queued")) {
          ++exhausted;
        }
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(ok.load() + exhausted.load(), 40) << "every request answered OK or RESOURCE_EXHAUSTED";
  EXPECT_GT(ok.load(), 0);
}

}  // namespace
}  // namespace kestrel
