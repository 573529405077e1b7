// Single-process training on generated data: every model learns the planted ground truth to within 0.02 of its
// Bayes-optimal AUC; the loop's iteration count, records and evaluation.
#include "worker/trainer.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/status.h"
#include "gtest/gtest.h"
#include "worker/compute/cpu_backend.h"
#include "worker/data/datagen.h"
#include "server/shard.h"
#include "server/table.h"
#include "inprocess/local_ps_client.h"
#include "inprocess/local_trainer.h"
#include "common/evaluation.h"
#include "worker/records.h"

namespace kestrel {
namespace {

std::string TmpDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

class TrainerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(TmpDir() + "/trainer_data");
    std::filesystem::create_directories(*dir_);
    truth_ = new DatagenTruth(*GenerateCriteoData(SmallDatagenOptions(), *dir_));
  }
  static JobConfig Job(ModelConfig::Type type) {
    JobConfig job;
    job.mutable_model()->set_type(type);
    job.mutable_data()->add_train_files(*dir_ + "/train.tsv");
    job.mutable_data()->add_test_files(*dir_ + "/test.tsv");
    job.mutable_train()->set_batch_size(256);
    job.mutable_train()->set_epochs(2);
    return job;
  }
  static std::string* dir_;
  static DatagenTruth* truth_;
};
std::string* TrainerTest::dir_ = nullptr;
DatagenTruth* TrainerTest::truth_ = nullptr;

TEST_F(TrainerTest, EveryModelComesWithin002OfTheBayesOptimalAuc) {
  for (ModelConfig::Type type : {ModelConfig::LOGISTIC_REGRESSION, ModelConfig::FM, ModelConfig::DEEPFM,
                                 ModelConfig::WIDE_AND_DEEP, ModelConfig::DLRM}) {
    auto backend = NewCpuBackend();
    auto result = TrainInProcess(Job(type), backend.get());
    std::printf("%-20s test AUC %.5f (Bayes %.5f), %.0f examples/s\n", ModelConfig::Type_Name(type).c_str(),
                result.ok() ? result->eval.auc : 0.0, truth_->bayes_auc, result.ok() ? result->examples_per_second : 0.0);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->steps, 2 * ((SmallDatagenOptions().train_rows + 255) / 256));  // the last batch short
    EXPECT_EQ(result->examples, 2 * SmallDatagenOptions().train_rows);
    EXPECT_EQ(result->eval.examples, 10000);
    const std::string name = ModelConfig::Type_Name(type);
    RecordProperty(name + "_auc", absl::StrCat(result->eval.auc));
    EXPECT_GT(result->eval.auc, truth_->bayes_auc - 0.02) << name;
    EXPECT_LT(result->eval.logloss, truth_->bayes_logloss + 0.05) << name;
  }
}

// Records what the trainer tells its gate.
class RecordingGate final : public ClockGate {
 public:
  absl::Status WaitToStart(int64_t) override { return absl::OkStatus(); }
  absl::Status Advance(int64_t finished, bool done, const WorkerState& state) override {
    absl::MutexLock lock(&mu_);
    finished_.push_back(finished);
    done_.push_back(done);
    state_clocks_.push_back(state.clock());
    return absl::OkStatus();
  }
  absl::Status WaitAllFinished(int64_t) override { return absl::OkStatus(); }

  absl::Mutex mu_;
  std::vector<int64_t> finished_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> done_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> state_clocks_ ABSL_GUARDED_BY(mu_);
};

// Trains DeepFM on two fresh in-process shards with prefetched pulls and, with `overlap`, overlapped pushes;
// returns the result and the shards' summed push requests and pushed keys.
struct AspRun {
  TrainResult result;
  uint64_t push_requests = 0;
  uint64_t keys_pushed = 0;
};
absl::StatusOr<AspRun> TrainAsp(const JobConfig& job, bool overlap, ClockGate* gate) {
  const Partition partition = *Partition::Uniform(2);
  std::vector<std::unique_ptr<Shard>> shards;
  std::vector<Shard*> views;
  for (int s = 0; s < 2; ++s) {
    ShardOptions shard_options;
    shard_options.owner = s;
    shards.push_back(*Shard::Create(shard_options, partition));
    views.push_back(shards.back().get());
  }
  std::unique_ptr<PsClient> client = NewLocalPsClient(PsClientOptions(), views);
  auto backend = NewCpuBackend();
  TrainerOptions options;
  options.job = job;
  options.partition = partition;
  options.prefetch_pulls = true;
  options.overlap_pushes = overlap;
  Trainer trainer(options, client.get(), gate, backend.get());
  AspRun run;
  KESTREL_ASSIGN_OR_RETURN(run.result, trainer.Run());
  KESTREL_ASSIGN_OR_RETURN(std::vector<StatsResponse> stats, client->Stats());
  for (const StatsResponse& shard : stats) {
    run.push_requests += shard.push_requests();
    run.keys_pushed += shard.keys_pushed();
  }
  return run;
}

// ASP's overlapped pushes (each push and its Advance during the next iteration's compute): every iteration is
// acknowledged once, in order, the last one as done; the shards receive exactly the pushes of a run without
// overlap (none lost or doubled); the model learns.
TEST_F(TrainerTest, OverlappedPushesAreAllAcknowledgedInOrderAndTheModelLearns) {
  const JobConfig job = Job(ModelConfig::DEEPFM);
  RecordingGate gate;
  absl::StatusOr<AspRun> overlapped = TrainAsp(job, /*overlap=*/true, &gate);
  ASSERT_TRUE(overlapped.ok()) << overlapped.status();
  std::unique_ptr<ClockGate> plain_gate = NewSingleWorkerGate();
  absl::StatusOr<AspRun> plain = TrainAsp(job, /*overlap=*/false, plain_gate.get());
  ASSERT_TRUE(plain.ok()) << plain.status();

  const int64_t steps = 2 * ((SmallDatagenOptions().train_rows + 255) / 256);
  EXPECT_EQ(overlapped->result.steps, steps);
  {
    absl::MutexLock lock(&gate.mu_);
    ASSERT_EQ(gate.finished_.size(), static_cast<size_t>(steps));
    for (int64_t i = 0; i < steps; ++i) {
      EXPECT_EQ(gate.finished_[i], i + 1);
      EXPECT_EQ(gate.state_clocks_[i], i + 1);
      EXPECT_EQ(gate.done_[i], i + 1 == steps);
    }
  }
  EXPECT_GT(overlapped->push_requests, 0u);
  EXPECT_EQ(overlapped->push_requests, plain->push_requests);
  EXPECT_EQ(overlapped->keys_pushed, plain->keys_pushed);
  EXPECT_GT(overlapped->result.eval.auc, truth_->bayes_auc - 0.02);
}

// The host side on threads (data.parse_threads, LocalTrainingOptions::server_threads spreading the in-process
// servers' large requests over stripes) and split pulls (the next batch's rows this one does not push pulled while
// it computes) train the same model bit for bit as one thread pulling after each push, with and without
// embeddings and with an evaluation between steps.
TEST_F(TrainerTest, ThreadsAndSplitPullsTrainTheSameModel) {
  // Vocabularies large enough that a batch's requests hold more than Table::kSpreadKeys unique keys, and
  // consecutive batches share some keys but not all.
  DatagenOptions data = SmallDatagenOptions();
  data.train_rows = 24000;
  data.test_rows = 2000;
  data.max_vocab = 100000;
  const std::string dir = TmpDir() + "/large_vocab";
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(GenerateCriteoData(data, dir).ok());
  for (const ModelConfig::Type type : {ModelConfig::DEEPFM, ModelConfig::LOGISTIC_REGRESSION}) {
    SCOPED_TRACE(ModelConfig::Type_Name(type));
    JobConfig job = Job(type);
    job.mutable_data()->set_train_files(0, dir + "/train.tsv");
    job.mutable_data()->set_test_files(0, dir + "/test.tsv");
    job.mutable_train()->set_batch_size(4096);
    job.mutable_train()->set_epochs(1);
    job.mutable_train()->set_eval_every_steps(3);
    job.mutable_train()->set_eval_max_examples(2000);
    auto backend = NewCpuBackend();
    LocalTrainingOptions alone;
    alone.num_servers = 2;
    alone.server_threads = 0;
    alone.split_pulls = 0;
    job.mutable_data()->set_parse_threads(1);
    auto one = TrainInProcess(job, backend.get(), alone);
    ASSERT_TRUE(one.ok()) << one.status();
    LocalTrainingOptions threaded = alone;
    threaded.server_threads = 2;
    threaded.split_pulls = 1;
    job.mutable_data()->set_parse_threads(3);
    auto many = TrainInProcess(job, backend.get(), threaded);
    ASSERT_TRUE(many.ok()) << many.status();
    EXPECT_EQ(many->examples, one->examples);
    EXPECT_EQ(many->eval.fingerprint, one->eval.fingerprint);
    EXPECT_EQ(many->eval.logloss, one->eval.logloss);
  }
}

TEST_F(TrainerTest, ServerThreadsOutsideTheirRangeAreRefused) {
  auto backend = NewCpuBackend();
  for (const int threads : {-2, kMaxServerThreads + 1}) {
    LocalTrainingOptions options;
    options.server_threads = threads;
    auto result = TrainInProcess(Job(ModelConfig::LOGISTIC_REGRESSION), backend.get(), options);
    ASSERT_FALSE(result.ok()) << threads;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(result.status().message().find("--local_server_threads is"), std::string::npos) << result.status();
  }
}

// TrainerOptions::stand_in_compute (bench/pipeline_ceiling_bench): the host side runs every step, pushing zero
// gradients: whatever the stand-in's duration the servers' optimizers see the same (zero) gradients, so the
// predictions are the same, and a real step's differ.
TEST_F(TrainerTest, StandInComputeRunsTheHostSideWithZeroGradients) {
  JobConfig job = Job(ModelConfig::FM);
  job.mutable_train()->set_max_steps(6);
  job.mutable_train()->set_eval_max_examples(500);
  auto backend = NewCpuBackend();
  LocalTrainingOptions options;
  options.stand_in_compute = absl::ZeroDuration();
  auto zero = TrainInProcess(job, backend.get(), options);
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ(zero->steps, 6);
  EXPECT_EQ(zero->examples, 6 * 256);
  options.stand_in_compute = absl::Milliseconds(2);
  auto waiting = TrainInProcess(job, backend.get(), options);
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  EXPECT_EQ(waiting->eval.fingerprint, zero->eval.fingerprint);
  EXPECT_GE(waiting->phases.compute, 6 * 0.002);
  // A real step moves the model away from where zero gradients leave it.
  job.mutable_train()->set_max_steps(6);
  auto trained = TrainInProcess(job, backend.get());
  ASSERT_TRUE(trained.ok()) << trained.status();
  EXPECT_NE(trained->eval.fingerprint, zero->eval.fingerprint);
}

TEST_F(TrainerTest, ValidatesAfterEveryEpochWithoutChangingTheTraining) {
  // The test split doubles as a validation split here: the validation after the last epoch scores the same model
  // on the same examples as the final test evaluation.
  JobConfig job = Job(ModelConfig::FM);
  job.mutable_train()->set_epochs(3);
  job.mutable_train()->set_early_stopping_patience(-1);  // the last model, whatever the validations say
  auto backend = NewCpuBackend();
  absl::StatusOr<TrainResult> plain = TrainInProcess(job, backend.get());
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE(plain->validations.empty());
  job.mutable_data()->add_validation_files(*dir_ + "/test.tsv");
  absl::StatusOr<TrainResult> validated = TrainInProcess(job, backend.get());
  ASSERT_TRUE(validated.ok()) << validated.status();
  ASSERT_EQ(validated->validations.size(), 3u);
  const int64_t per_epoch = validated->steps / 3;
  for (int e = 0; e < 3; ++e) EXPECT_EQ(validated->validations[e].step, (e + 1) * per_epoch) << "epoch " << e;
  EXPECT_EQ(validated->eval.fingerprint, plain->eval.fingerprint) << "validating never trains";
  EXPECT_EQ(validated->validations.back().fingerprint, validated->eval.fingerprint);
  EXPECT_GT(validated->validations.back().auc, validated->validations.front().auc - 0.01);

  // Every third of an epoch besides the epochs' ends (rounded: per_epoch / 3 steps), each step validated once.
  const int64_t every = per_epoch / 3;
  job.mutable_train()->set_validation_every_steps(every);
  absl::StatusOr<TrainResult> often = TrainInProcess(job, backend.get());
  ASSERT_TRUE(often.ok()) << often.status();
  std::vector<int64_t> expected;
  for (int64_t step = 1; step <= often->steps; ++step) {
    if (step % every == 0 || step % per_epoch == 0) expected.push_back(step);
  }
  std::vector<int64_t> steps;
  for (const EvalResult& v : often->validations) steps.push_back(v.step);
  EXPECT_EQ(steps, expected);
  EXPECT_EQ(often->eval.fingerprint, plain->eval.fingerprint) << "validating never trains";
}

TEST_F(TrainerTest, AValidationSplitHeldOutOfTheTrainingFilesIsNeverTrainedOn) {
  JobConfig job = Job(ModelConfig::FM);
  job.mutable_data()->set_validation_every(10);
  job.mutable_train()->set_early_stopping_patience(-1);
  auto backend = NewCpuBackend();
  absl::StatusOr<TrainResult> result = TrainInProcess(job, backend.get());
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->validations.size(), 2u);
  const int64_t rows = SmallDatagenOptions().train_rows;
  const int64_t held = result->validations[0].examples;
  EXPECT_GT(held, rows / 20);
  EXPECT_LT(held, rows / 5);
  EXPECT_EQ(result->examples, 2 * (rows - held)) << "every other line, twice";
  EXPECT_GT(result->validations.back().auc, truth_->bayes_auc - 0.03);
}

TEST_F(TrainerTest, AValidationSplitByATimeColumnIsTheLinesFromItsFirstValue) {
  // 2000 lines in time order (ts 0..1999), stored late first: the lines from ts 1800 on validate, wherever they
  // stand in the file.
  const std::string file = *dir_ + "/by_time.csv";
  {
    std::ofstream out(file);
    out << "label,ts,item\n";
    std::mt19937 rng(7);
    for (int i = 1999; i >= 0; --i) {
      const int item = static_cast<int>(rng() % 20);
      out << ((rng() % 20) < static_cast<unsigned>(item) ? 1 : 0) << "," << i << ",i" << item << "\n";
    }
  }
  JobConfig job;
  job.mutable_model()->set_type(ModelConfig::LOGISTIC_REGRESSION);
  DataConfig* data = job.mutable_data();
  data->set_format(DataConfig::DELIMITED);
  data->add_train_files(file);
  data->add_test_files(file);
  data->set_validation_column("ts");
  data->set_validation_from("1800");
  FeatureSchema* schema = data->mutable_schema();
  schema->set_header(true);
  schema->set_label("label");
  FeatureConfig* item = schema->add_features();
  item->set_name("item");
  item->set_column("item");
  job.mutable_train()->set_batch_size(100);
  job.mutable_train()->set_epochs(2);
  job.mutable_train()->set_early_stopping_patience(-1);
  auto backend = NewCpuBackend();
  absl::StatusOr<TrainResult> result = TrainInProcess(job, backend.get());
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->validations.size(), 2u);
  EXPECT_EQ(result->validations[0].examples, 200);
  EXPECT_EQ(result->examples, 2 * 1800);
  EXPECT_GT(result->validations.back().auc, 0.7) << "the item predicts the label";
}

// Every table's rows (values and optimizer state) of in-process shards, as one number.
uint64_t ModelFingerprint(const std::vector<Shard*>& shards) {
  uint64_t sum = 0;
  for (Shard* shard : shards) {
    for (const TableConfig& config : shard->DescribeTables()) sum += shard->FindTable(config.name())->RowsFingerprint();
  }
  return sum;
}

TEST_F(TrainerTest, EarlyStoppingEndsWithTheBestEpochsModelBitwise) {
  // A validation split whose labels are the test split's flipped: the better the model learns, the worse it
  // validates, so the first epoch is the best and training stops two epochs later.
  const std::string flipped = *dir_ + "/flipped_validation.tsv";
  {
    std::ifstream in(*dir_ + "/test.tsv");
    std::ofstream out(flipped);
    for (std::string line; std::getline(in, line);) out << (line[0] == '1' ? '0' : '1') << line.substr(1) << "\n";
  }
  JobConfig job = Job(ModelConfig::FM);
  job.mutable_train()->set_epochs(6);
  job.mutable_data()->add_validation_files(flipped);
  auto backend = NewCpuBackend();
  LocalTrainingOptions options;
  uint64_t stopped_model = 0;
  options.inspect = [&](const std::vector<Shard*>& shards) { stopped_model = ModelFingerprint(shards); };
  options.predictions_path = TmpDir() + "/early_stopped_predictions.txt";
  absl::StatusOr<TrainResult> stopped = TrainInProcess(job, backend.get(), options);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  const int64_t per_epoch = (SmallDatagenOptions().train_rows + 255) / 256;
  ASSERT_EQ(stopped->validations.size(), 3u);
  EXPECT_GT(stopped->validations[1].logloss, stopped->validations[0].logloss);
  EXPECT_TRUE(stopped->stopped_early);
  EXPECT_EQ(stopped->steps, 3 * per_epoch);
  EXPECT_EQ(stopped->best_step, per_epoch);
  EXPECT_EQ(stopped->eval.step, per_epoch);

  // The same job stopped after its first epoch by hand: the same model, predictions and test evaluation, bit for bit.
  JobConfig by_hand = Job(ModelConfig::FM);
  by_hand.mutable_train()->set_epochs(1);
  uint64_t by_hand_model = 0;
  options.inspect = [&](const std::vector<Shard*>& shards) { by_hand_model = ModelFingerprint(shards); };
  options.predictions_path = TmpDir() + "/by_hand_predictions.txt";
  absl::StatusOr<TrainResult> first = TrainInProcess(by_hand, backend.get(), options);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(stopped_model, by_hand_model);
  EXPECT_EQ(stopped->eval.fingerprint, first->eval.fingerprint);
  EXPECT_EQ(stopped->eval.auc, first->eval.auc);
  std::ifstream a(TmpDir() + "/early_stopped_predictions.txt"), b(TmpDir() + "/by_hand_predictions.txt");
  const std::string pa((std::istreambuf_iterator<char>(a)), {}), pb((std::istreambuf_iterator<char>(b)), {});
  EXPECT_FALSE(pa.empty());
  EXPECT_EQ(pa, pb);

  // Validating every 5 steps, training stops within the first epoch, two validations after the best one, and
  // keeps its model: that of the same job stopped at that step by hand (max_steps).
  JobConfig often = job;
  often.mutable_train()->set_validation_every_steps(5);
  options.inspect = [&](const std::vector<Shard*>& shards) { stopped_model = ModelFingerprint(shards); };
  options.predictions_path.clear();
  absl::StatusOr<TrainResult> within = TrainInProcess(often, backend.get(), options);
  ASSERT_TRUE(within.ok()) << within.status();
  EXPECT_TRUE(within->stopped_early);
  EXPECT_EQ(within->best_step % 5, 0);
  EXPECT_EQ(within->steps, within->best_step + 10);
  EXPECT_LT(within->steps, per_epoch) << "within the first epoch";
  JobConfig to_step = Job(ModelConfig::FM);
  to_step.mutable_train()->set_max_steps(within->best_step);
  options.inspect = [&](const std::vector<Shard*>& shards) { by_hand_model = ModelFingerprint(shards); };
  absl::StatusOr<TrainResult> at_best = TrainInProcess(to_step, backend.get(), options);
  ASSERT_TRUE(at_best.ok()) << at_best.status();
  EXPECT_EQ(stopped_model, by_hand_model);
  EXPECT_EQ(within->eval.fingerprint, at_best->eval.fingerprint);

  // Patience -1: every epoch trains and the last model stays.
  job.mutable_train()->set_early_stopping_patience(-1);
  options.inspect = nullptr;
  options.predictions_path.clear();
  absl::StatusOr<TrainResult> all = TrainInProcess(job, backend.get(), options);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_FALSE(all->stopped_early);
  EXPECT_EQ(all->steps, 6 * per_epoch);
  EXPECT_EQ(all->eval.step, 6 * per_epoch);
}

TEST_F(TrainerTest, WritesRecordsAndStopsAtMaxSteps) {
  JobConfig job = Job(ModelConfig::FM);
  job.mutable_train()->set_max_steps(20);
  job.mutable_train()->set_eval_every_steps(10);
  job.mutable_train()->set_eval_max_examples(1000);
  job.mutable_train()->set_log_every_steps(5);
  const std::string records = TmpDir() + "/records.jsonl";
  auto backend = NewCpuBackend();
  LocalTrainingOptions options;
  options.metrics_path = records;
  options.num_servers = 2;
  auto result = TrainInProcess(job, backend.get(), options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps, 20);
  EXPECT_EQ(result->examples, 20 * 256);
  EXPECT_EQ(result->eval.examples, 1000);
  std::ifstream in(records);
  std::string line;
  std::vector<Record> train, eval, done;
  while (std::getline(in, line)) {
    absl::StatusOr<Record> record = ParseRecord(line);
    ASSERT_TRUE(record.ok()) << record.status();
    if (record->kind() == "train") train.push_back(*record);
    if (record->kind() == "eval") eval.push_back(*record);
    if (record->kind() == "done") done.push_back(*record);
  }
  ASSERT_EQ(train.size(), 4u);  // steps 5, 10, 15, 20
  EXPECT_EQ(train[3].step(), 20);
  EXPECT_EQ(train[3].steps(), 20);
  EXPECT_TRUE(train[3].has_worker() && train[3].has_logloss() && train[3].has_examples_per_second());
  ASSERT_EQ(eval.size(), 2u);  // step 10 and the final one
  EXPECT_EQ(eval[0].step(), 10);
  EXPECT_EQ(eval[1].examples(), result->eval.examples);
  EXPECT_EQ(eval[1].auc(), result->eval.auc);
  EXPECT_EQ(eval[1].fingerprint(), FingerprintHex(result->eval.fingerprint));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].steps(), result->steps);
  EXPECT_EQ(done[0].examples(), result->examples);
  EXPECT_EQ(done[0].seconds(), result->seconds);
  // The per-phase training times, every one present (0 when a phase took no time).
  const PhaseSeconds& phases = done[0].phases();
  EXPECT_TRUE(phases.has_read() && phases.has_batch() && phases.has_pull() && phases.has_compute() &&
              phases.has_push() && phases.has_wait());
  EXPECT_EQ(phases.compute(), result->phases.compute);
  EXPECT_EQ(phases.wait(), result->phases.wait);
}

TEST_F(TrainerTest, TooLittleDataOrMalformedLinesAreClearErrors) {
  JobConfig job = Job(ModelConfig::LOGISTIC_REGRESSION);
  job.mutable_train()->set_batch_size(100000);
  EXPECT_EQ(*IterationsOf(job, 1), 2) << "one short batch per epoch";
  job.mutable_train()->set_drop_last(true);
  EXPECT_EQ(IterationsOf(job, 1).status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string empty = TmpDir() + "/empty.tsv";
  std::ofstream(empty) << "\n\n";
  job.mutable_data()->set_train_files(0, empty);
  job.mutable_train()->set_drop_last(false);
  EXPECT_EQ(IterationsOf(job, 1).status().code(), absl::StatusCode::kFailedPrecondition);

  const std::string bad = TmpDir() + "/bad.tsv";
  {
    std::ofstream out(bad);
    std::ifstream good(*dir_ + "/train.tsv");
    std::string line;
    for (int i = 0; i < 300 && std::getline(good, line); ++i) out << (i == 150 ? "not a criteo line" : line) << "\n";
  }
  job = Job(ModelConfig::LOGISTIC_REGRESSION);
  job.mutable_data()->set_train_files(0, bad);
  job.mutable_train()->set_batch_size(100);
  auto backend = NewCpuBackend();
  auto failed = TrainInProcess(job, backend.get());
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(failed.status().message().find("bad.tsv:151"), std::string::npos) << failed.status();
  // Skipping malformed lines trains on the rest, once per epoch: the last batch is one example short.
  job.mutable_data()->set_skip_malformed(true);
  auto skipped = TrainInProcess(job, backend.get());
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_EQ(skipped->steps, 2 * 3);
  EXPECT_EQ(skipped->examples, 2 * 299);
}

// libsvm data from a planted linear model over real-valued features: LR and FM learn it to near its Bayes AUC.
TEST(TrainerLibsvmTest, LearnsAPlantedLinearModelFromLibsvmFiles) {
  std::mt19937 rng(17);
  std::uniform_int_distribution<int> feature(0, 299), count(3, 12);
  std::uniform_real_distribution<double> value(0.5, 1.5), u01(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 0.6);
  std::vector<double> weight(300);
  for (double& w : weight) w = normal(rng);
  std::vector<float> test_p, test_y;
  auto write = [&](const std::string& path, int rows, bool test) {
    std::ofstream out(path);
    for (int r = 0; r < rows; ++r) {
      const int n = count(rng);
      double logit = -0.8;
      std::string line;
      for (int i = 0; i < n; ++i) {
        const int f = feature(rng);
        const double v = value(rng);
        logit += v * weight[f];
        line += absl::StrFormat(" %d:%.4f", f, v);
      }
      const double p = 1 / (1 + std::exp(-logit));
      const int y = u01(rng) < p ? 1 : 0;
      out << (y == 1 ? "+1" : "-1") << line << "\n";
      if (test) {
        test_p.push_back(static_cast<float>(p));
        test_y.push_back(static_cast<float>(y));
      }
    }
  };
  const std::string dir = TmpDir();
  write(dir + "/svm_train.txt", 40000, false);
  write(dir + "/svm_test.txt", 10000, true);
  const double bayes = ExactAuc(test_p, test_y);
  for (ModelConfig::Type type : {ModelConfig::LOGISTIC_REGRESSION, ModelConfig::FM}) {
    JobConfig job;
    job.mutable_model()->set_type(type);
    job.mutable_data()->set_format(DataConfig::LIBSVM);
    job.mutable_data()->set_libsvm_slots(12);
    job.mutable_data()->add_train_files(dir + "/svm_train.txt");
    job.mutable_data()->add_test_files(dir + "/svm_test.txt");
    job.mutable_train()->set_batch_size(256);
    job.mutable_train()->set_epochs(2);
    auto backend = NewCpuBackend();
    auto result = TrainInProcess(job, backend.get());
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_GT(result->eval.auc, bayes - 0.02) << ModelConfig::Type_Name(type) << " (Bayes " << bayes << ")";
  }
  // An example with more features than slots is an error naming the file and line.
  JobConfig job;
  job.mutable_data()->set_format(DataConfig::LIBSVM);
  job.mutable_data()->set_libsvm_slots(4);
  job.mutable_data()->add_train_files(dir + "/svm_train.txt");
  job.mutable_data()->add_test_files(dir + "/svm_test.txt");
  job.mutable_train()->set_batch_size(256);
  auto backend = NewCpuBackend();
  auto refused = TrainInProcess(job, backend.get());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("svm_train.txt:"), std::string::npos) << refused.status();
  EXPECT_NE(refused.status().message().find("libsvm_slots"), std::string::npos) << refused.status();
}

}  // namespace
}  // namespace kestrel
