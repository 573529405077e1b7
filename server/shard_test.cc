#include "server/shard.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/packed.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

using ::testing::HasSubstr;

RequestContext Ctx(absl::string_view job = "job") {
  RequestContext ctx;
  ctx.job_id = job;
  return ctx;
}

TableConfig Sparse(const std::string& name, int dim, OptimizerConfig::Type opt = OptimizerConfig::SGD,
                   float lr = 1.0f) {
  TableConfig c;
  c.set_name(name);
  c.set_dim(dim);
  c.set_seed(7);
  c.mutable_initializer()->set_type(InitializerConfig::NORMAL);
  c.mutable_optimizer()->set_type(opt);
  c.mutable_optimizer()->set_learning_rate(lr);
  return c;
}

std::unique_ptr<Shard> MakeShard(int index, int num_servers) {
  ShardOptions options;
  options.job_id = "job";
  options.owner = index;
  options.max_keys_per_request = 1000;
  auto shard = Shard::Create(options, *Partition::Uniform(num_servers));
  EXPECT_TRUE(shard.ok()) << shard.status();
  return std::move(shard).value();
}

std::vector<float> Floats(const std::string& packed) {
  std::vector<float> out(packed.size() / sizeof(float));
  std::memcpy(out.data(), packed.data(), packed.size());
  return out;
}

// Keys owned by `shard` of a uniform partition, strictly increasing.
std::vector<uint64_t> OwnedKeys(const Shard& shard, int n) {
  std::vector<uint64_t> keys;
  const KeyRange range = shard.ranges().front();
  for (int i = 0; i < n; ++i) keys.push_back(range.first + 1000 * static_cast<uint64_t>(i) + 3);
  return keys;
}

class ShardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shard_ = MakeShard(/*index=*/1, /*num_servers=*/2);
    ASSERT_TRUE(shard_->CreateTable(Ctx(), Sparse("emb", 4)).ok());
    keys_ = OwnedKeys(*shard_, 10);
    grads_.assign(keys_.size() * 4, 0.5f);
    ASSERT_TRUE(shard_->Push(Ctx(), "emb", keys_, grads_, 4).ok());
    before_ = shard_->Fingerprint();
  }

  // Expects `status` to have `code` and mention `text`, and the shard to be unchanged.
  void ExpectRejected(const absl::Status& status, absl::StatusCode code, absl::string_view text) {
    EXPECT_EQ(status.code(), code) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(std::string(text)));
    EXPECT_EQ(shard_->Fingerprint(), before_) << "a rejected request changed the shard";
  }

  std::unique_ptr<Shard> shard_;
  std::vector<uint64_t> keys_;
  std::vector<float> grads_;
  uint64_t before_ = 0;
};

TEST_F(ShardTest, PushThenPullAppliesSgd) {
  std::string values;
  ASSERT_TRUE(shard_->Pull(Ctx(), "emb", keys_, 4, &values).ok());
  std::vector<float> got = Floats(values);
  ASSERT_EQ(got.size(), keys_.size() * 4);
  // Initial value minus lr * grad: compare against the initializer directly.
  auto init = Initializer::Create(Sparse("emb", 4).initializer(), 7);
  ASSERT_TRUE(init.ok());
  for (size_t i = 0; i < keys_.size(); ++i) {
    float expected[4];
    init->Fill(keys_[i], expected, 4);
    for (int j = 0; j < 4; ++j) EXPECT_FLOAT_EQ(got[i * 4 + j], expected[j] - 0.5f);
  }
  const ShardStats stats = shard_->Stats();
  EXPECT_EQ(stats.push_requests, 1u);
  EXPECT_EQ(stats.pull_requests, 1u);
  EXPECT_EQ(stats.keys_pushed, keys_.size());
  ASSERT_EQ(stats.tables.size(), 1u);
  EXPECT_EQ(stats.tables[0].rows, keys_.size());
}

TEST_F(ShardTest, RejectsUnknownTable) {
  std::string values;
  ExpectRejected(shard_->Pull(Ctx(), "nope", keys_, 0, &values), absl::StatusCode::kNotFound, "'nope'");
  ExpectRejected(shard_->Push(Ctx(), "nope", keys_, grads_, 0), absl::StatusCode::kNotFound, "does not exist");
}

TEST_F(ShardTest, RejectsWrongJobWithoutEchoingAnyJobId) {
  const absl::Status pushed = shard_->Push(Ctx("other"), "emb", keys_, grads_, 0);
  ExpectRejected(pushed, absl::StatusCode::kFailedPrecondition, "job id is not the one shard 1 serves");
  const absl::Status created = shard_->CreateTable(Ctx("other"), Sparse("t2", 2)).status();
  ExpectRejected(created, absl::StatusCode::kFailedPrecondition, "job id is not the one shard 1 serves");
  for (const absl::Status& s : {pushed, created}) {
    EXPECT_EQ(s.message().find("other"), std::string::npos) << s;
    EXPECT_EQ(s.message().find("'job'"), std::string::npos) << s;
  }
}

TEST_F(ShardTest, RejectsWrongDimension) {
  ExpectRejected(shard_->Push(Ctx(), "emb", keys_, grads_, 8), absl::StatusCode::kInvalidArgument, "has dim 4");
  std::vector<float> short_grads(grads_.begin(), grads_.end() - 1);
  ExpectRejected(shard_->Push(Ctx(), "emb", keys_, short_grads, 0), absl::StatusCode::kInvalidArgument,
                 "need 40 gradient values, got 39");
}

TEST_F(ShardTest, RejectsUnsortedAndDuplicateKeys) {
  std::vector<uint64_t> swapped = keys_;
  std::swap(swapped[3], swapped[4]);
  ExpectRejected(shard_->Push(Ctx(), "emb", swapped, grads_, 0), absl::StatusCode::kInvalidArgument,
                 "strictly increasing");
  std::vector<uint64_t> dup = keys_;
  dup[5] = dup[4];
  std::string values;
  ExpectRejected(shard_->Pull(Ctx(), "emb", dup, 0, &values), absl::StatusCode::kInvalidArgument,
                 "strictly increasing");
}

TEST_F(ShardTest, RejectsKeysOutsideRanges) {
  std::vector<uint64_t> keys = keys_;
  keys.insert(keys.begin(), 5);  // owned by shard 0
  std::vector<float> grads(keys.size() * 4, 1.0f);
  ExpectRejected(shard_->Push(Ctx(), "emb", keys, grads, 0), absl::StatusCode::kInvalidArgument,
                 "key 0x0000000000000005 (keys[0]) is outside shard 1's key ranges "
                 "[0x8000000000000000, 0xffffffffffffffff]; it belongs to shard 0");
}

TEST_F(ShardTest, RejectsNonFiniteGradients) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<float> grads = grads_;
    grads[grads.size() - 2] = bad;  // the last key, element 2: everything before it is valid
    ExpectRejected(shard_->Push(Ctx(), "emb", keys_, grads, 0), absl::StatusCode::kInvalidArgument,
                   absl::StrCat("element 2 of table 'emb'"));
  }
}

TEST_F(ShardTest, RejectsTooManyKeys) {
  std::vector<uint64_t> keys = OwnedKeys(*shard_, 1001);
  std::vector<float> grads(keys.size() * 4, 1.0f);
  ExpectRejected(shard_->Push(Ctx(), "emb", keys, grads, 0), absl::StatusCode::kInvalidArgument,
                 "exceed the limit of 1000");
}

TEST_F(ShardTest, RejectsSparseCallsOnDenseTables) {
  TableConfig dense = Sparse("mlp", 8);
  dense.set_kind(TableConfig::DENSE);
  dense.set_dense_size(100);
  ASSERT_TRUE(shard_->CreateTable(Ctx(), dense).ok());
  before_ = shard_->Fingerprint();
  ExpectRejected(shard_->Push(Ctx(), "mlp", keys_, std::vector<float>(keys_.size() * 8, 1.0f), 0),
                 absl::StatusCode::kInvalidArgument, "use PullDense/PushDense");
}

TEST_F(ShardTest, CreateTableIsIdempotentAndRejectsConflicts) {
  auto again = shard_->CreateTable(Ctx(), Sparse("emb", 4));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  ExpectRejected(shard_->CreateTable(Ctx(), Sparse("emb", 8)).status(), absl::StatusCode::kAlreadyExists,
                 "different config");
  ExpectRejected(shard_->CreateTable(Ctx(), Sparse("bad name", 4)).status(), absl::StatusCode::kInvalidArgument,
                 "table name");
  TableConfig bad_lr = Sparse("t", 4);
  bad_lr.mutable_optimizer()->set_learning_rate(-1);
  ExpectRejected(shard_->CreateTable(Ctx(), bad_lr).status(), absl::StatusCode::kInvalidArgument,
                 "learning_rate");
  EXPECT_EQ(shard_->DescribeTables().size(), 1u);
  EXPECT_GE(shard_->Stats().rejected_requests, 3u);
}

TEST_F(ShardTest, RejectsTooLargeGradients) {
  std::vector<float> grads = grads_;
  grads[0] = -2e15f;  // finite, but would overflow optimizer state
  ExpectRejected(shard_->Push(Ctx(), "emb", keys_, grads, 0), absl::StatusCode::kInvalidArgument,
                 "gradients must be finite with |g| <= 1e+15");
}

TEST_F(ShardTest, ClipsHugeNamesInErrors) {
  const std::string name(100000, 'x');
  std::string values;
  absl::Status status = shard_->Pull(Ctx(), name, keys_, 0, &values);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_LT(status.message().size(), 200u);
}

TEST(ShardLimitsTest, RefusesAnswersAboveTheResponseLimitBeforeAllocating) {
  ShardOptions options;
  options.job_id = "job";
  options.max_response_bytes = 1000;  // 250 floats
  auto shard = *Shard::Create(options, *Partition::Uniform(1));
  ASSERT_TRUE(shard->CreateTable(Ctx(), Sparse("emb", 16)).ok());
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; k <= 16; ++k) keys.push_back(k);  // 16 x 16 floats = 1024 bytes
  bool allocated = false;
  absl::Status status = shard->Pull(Ctx(), "emb", keys, 16, [&](size_t) -> float* {
    allocated = true;
    return nullptr;
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("split the request"));
  EXPECT_FALSE(allocated);
  keys.pop_back();  // 15 x 16 floats fit
  std::string values;
  EXPECT_TRUE(shard->Pull(Ctx(), "emb", keys, 16, &values).ok());
  EXPECT_EQ(values.size(), 15u * 16 * sizeof(float));
  EXPECT_EQ(shard->Stats().rejected_requests, 1u);
}

TEST(ShardLimitsTest, LimitsTheNumberOfTables) {
  ShardOptions options;
  options.job_id = "job";
  options.max_tables = 3;
  auto shard = *Shard::Create(options, *Partition::Uniform(1));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(shard->CreateTable(Ctx(), Sparse("t" + std::to_string(i), 2)).ok());
  EXPECT_EQ(shard->CreateTable(Ctx(), Sparse("t3", 2)).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(shard->DescribeTables().size(), 3u);
}

TEST(ShardLimitsTest, DenseSizeIsBoundedAndBlocksCountedWithoutOverflow) {
  auto shard = MakeShard(0, 1);
  TableConfig huge = Sparse("mlp", 4096);
  huge.set_kind(TableConfig::DENSE);
  huge.set_dense_size(~uint64_t{0});  // (size + dim - 1) / dim would wrap to 0 blocks
  EXPECT_EQ(shard->CreateTable(Ctx(), huge).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Partition::DenseBlockCount(~uint64_t{0}, 4096), (~uint64_t{0}) / 4096 + 1);
  EXPECT_EQ(Partition::DenseBlockCount(8192, 4096), 2u);
  EXPECT_EQ(Partition::DenseBlockCount(8193, 4096), 3u);
}

TEST_F(ShardTest, RefusesSupersededWorkers) {
  // Worker 0 registered at generation 1; worker 1 was replaced and registered again at generation 5.
  shard_->SetJobView(5, {1, 5});
  RequestContext ctx = Ctx();
  ctx.worker_rank = 1;
  ctx.generation = 4;  // the old incarnation of rank 1: a revived zombie
  ExpectRejected(shard_->Push(ctx, "emb", keys_, grads_, 0), absl::StatusCode::kFailedPrecondition,
                 "worker rank 1 reached shard 1, but that rank's requests carry generation 5");
  ctx.generation = 0;  // a worker that does not stamp its generation
  ExpectRejected(shard_->Push(ctx, "emb", keys_, grads_, 0), absl::StatusCode::kFailedPrecondition,
                 "superseded");
  ctx.generation = 5;
  EXPECT_TRUE(shard_->Push(ctx, "emb", keys_, grads_, 0).ok());
  ctx.worker_rank = 0;  // rank 1's replacement does not disturb worker 0
  ctx.generation = 1;
  EXPECT_TRUE(shard_->Push(ctx, "emb", keys_, grads_, 0).ok());
  ctx.worker_rank = -1;  // tools are not workers
  ctx.generation = 0;
  std::string values;
  EXPECT_TRUE(shard_->Pull(ctx, "emb", keys_, 0, &values).ok());
}

TEST_F(ShardTest, GenerationsMustMatchExactly) {
  shard_->SetJobView(5, {1, 5});
  int asked = 0;
  shard_->SetGenerationListener([&asked] { ++asked; });
  RequestContext ctx = Ctx();
  ctx.worker_rank = 1;
  // A generation far ahead used to skip the zombie check. Now it is one the shard has not heard of: refused
  // (retry), and the shard asks the scheduler at once.
  for (uint64_t ahead : {uint64_t{6}, ~uint64_t{0}}) {
    ctx.generation = ahead;
    ExpectRejected(shard_->Push(ctx, "emb", keys_, grads_, 0), absl::StatusCode::kUnavailable,
                   "has not heard of the newer one");
    std::string values;
    EXPECT_EQ(shard_->Pull(ctx, "emb", keys_, 0, &values).code(), absl::StatusCode::kUnavailable);
  }
  EXPECT_EQ(asked, 4);
  // A rank the job does not have (yet: a rescale may have added it): refused, and the shard asks the scheduler.
  ctx.worker_rank = 2;
  ExpectRejected(shard_->Push(ctx, "emb", keys_, grads_, 0), absl::StatusCode::kUnavailable,
                 "worker rank 2 is not one of the job's 2 workers");
  EXPECT_EQ(asked, 5);
  // Once the scheduler says rank 1 registered again at 6, that generation works and 5 is a zombie's.
  shard_->SetJobView(6, {1, 6});
  ctx.worker_rank = 1;
  ctx.generation = 6;
  EXPECT_TRUE(shard_->Push(ctx, "emb", keys_, grads_, 0).ok());
  ctx.generation = 5;
  EXPECT_EQ(shard_->Push(ctx, "emb", keys_, grads_, 0).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ShardTest, RestoreGenerationCannotRunAheadOfTheJob) {
  // Without a scheduler, a restore may only take 0: anything else would lock every worker out.
  EXPECT_TRUE(shard_->CheckRestoreGeneration(0, absl::ZeroDuration()).ok());
  absl::Status status = shard_->CheckRestoreGeneration(~uint64_t{0}, absl::Milliseconds(10));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "runs without one")) << status;
  // With one: up to the job's generation; a newer one waits for the scheduler's word, asking for it.
  std::atomic<int> asked{0};
  shard_->SetGenerationListener([&asked] { ++asked; });
  shard_->SetJobView(7, {7, 7});
  EXPECT_TRUE(shard_->CheckRestoreGeneration(7, absl::ZeroDuration()).ok());
  EXPECT_EQ(shard_->CheckRestoreGeneration(1000, absl::Milliseconds(10)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_GE(asked.load(), 1);
  // The scheduler's word arrives only once the restore is waiting for it (it asked again).
  const int asked_before = asked.load();
  std::thread heard([this, &asked, asked_before] {
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (asked.load() == asked_before && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
    shard_->SetJobView(8, {8, 8});  // the heartbeat answer after the scheduler's rollback
  });
  EXPECT_TRUE(shard_->CheckRestoreGeneration(8, absl::Seconds(30)).ok());
  EXPECT_EQ(asked.load(), asked_before + 1);
  heard.join();
}

TEST(ShardIdempotenceTest, RetriedPushIsAppliedOnce) {
  auto shard = MakeShard(0, 1);
  TableConfig c = Sparse("emb", 2);
  c.mutable_initializer()->set_type(InitializerConfig::ZEROS);
  ASSERT_TRUE(shard->CreateTable(Ctx(), c).ok());
  RequestContext ctx = Ctx();
  ctx.worker_rank = 3;
  ctx.request_id = 77;
  const std::vector<uint64_t> keys = {10, 20};
  const std::vector<float> grads(4, 1.0f);
  ASSERT_TRUE(shard->Push(ctx, "emb", keys, grads, 2).ok());
  const uint64_t once = shard->Fingerprint();
  ASSERT_TRUE(shard->Push(ctx, "emb", keys, grads, 2).ok()) << "a retry is acknowledged";
  EXPECT_EQ(shard->Fingerprint(), once) << "and not applied again";
  ctx.request_id = 78;
  ASSERT_TRUE(shard->Push(ctx, "emb", keys, grads, 2).ok());
  EXPECT_NE(shard->Fingerprint(), once);
  // A rejected request does not consume its id.
  ctx.request_id = 79;
  EXPECT_FALSE(shard->Push(ctx, "emb", keys, std::vector<float>(3, 1.0f), 2).ok());
  const uint64_t before = shard->Fingerprint();
  ASSERT_TRUE(shard->Push(ctx, "emb", keys, grads, 2).ok());
  EXPECT_NE(shard->Fingerprint(), before);
}

TEST(ShardIdempotenceTest, RememberedWorkersAreBounded) {
  ShardOptions options;
  options.job_id = "job";
  options.max_push_workers = 2;
  auto shard = *Shard::Create(options, *Partition::Uniform(1));
  TableConfig c = Sparse("emb", 2);
  ASSERT_TRUE(shard->CreateTable(Ctx(), c).ok());
  const std::vector<uint64_t> keys = {10};
  const std::vector<float> grads(2, 1.0f);
  RequestContext ctx = Ctx();
  ctx.request_id = 5;
  for (int rank : {0, 1}) {
    ctx.worker_rank = rank;
    ASSERT_TRUE(shard->Push(ctx, "emb", keys, grads, 2).ok());
  }
  const uint64_t before = shard->Fingerprint();
  ctx.worker_rank = 2;  // one more sender than the shard remembers: refused, nothing applied
  const absl::Status refused = shard->Push(ctx, "emb", keys, grads, 2);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_EQ(shard->Fingerprint(), before);
  shard->SetJobView(1, {1, 1, 1});  // the scheduler: the job has 3 workers
  ctx.generation = 1;
  EXPECT_TRUE(shard->Push(ctx, "emb", keys, grads, 2).ok());
}

TEST(ShardPlacementTest, InitialValueDoesNotDependOnOwner) {
  // The same key pulled from a 1-server and from a 3-server layout has the same initial value.
  auto solo = MakeShard(0, 1);
  ASSERT_TRUE(solo->CreateTable(Ctx(), Sparse("emb", 16)).ok());
  auto partition = *Partition::Uniform(3);
  for (uint64_t key : {uint64_t{12345}, uint64_t{0x9000000000000000}, uint64_t{0xfffffffffffffff0}}) {
    auto owner = MakeShard(partition.OwnerOf(key), 3);
    ASSERT_TRUE(owner->CreateTable(Ctx(), Sparse("emb", 16)).ok());
    std::string a, b;
    ASSERT_TRUE(solo->Pull(Ctx(), "emb", {key}, 16, &a).ok());
    ASSERT_TRUE(owner->Pull(Ctx(), "emb", {key}, 16, &b).ok());
    EXPECT_EQ(a, b);
    // Pulling does not create rows.
    EXPECT_EQ(owner->Stats().tables[0].rows, 0u);
  }
}

TEST(ShardConcurrencyTest, ConcurrentPushesSumExactly) {
  // 8 threads push integer gradients to overlapping keys; SGD with lr = 1 from zeros gives exact sums.
  auto shard = MakeShard(0, 1);
  TableConfig c = Sparse("emb", 8);
  c.mutable_initializer()->set_type(InitializerConfig::ZEROS);
  ASSERT_TRUE(shard->CreateTable(Ctx(), c).ok());
  constexpr int kThreads = 8, kRounds = 200, kKeys = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint64_t> keys;
      // Thread t touches every key k with k % (t + 1) == 0: overlaps differ per key.
      for (int k = 0; k < kKeys; ++k) {
        if (k % (t + 1) == 0) keys.push_back(Partition::FeatureKey(k) / 2 * 2);  // any order: sorted below
      }
      std::sort(keys.begin(), keys.end());
      std::vector<float> grads(keys.size() * 8, static_cast<float>(t + 1));
      for (int r = 0; r < kRounds; ++r) {
        ASSERT_TRUE(shard->Push(Ctx(), "emb", keys, grads, 8).ok());
        std::string values;
        ASSERT_TRUE(shard->Pull(Ctx(), "emb", keys, 8, &values).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < kKeys; ++k) {
    float expected = 0;
    for (int t = 0; t < kThreads; ++t) {
      if (k % (t + 1) == 0) expected -= static_cast<float>((t + 1) * kRounds);
    }
    std::string values;
    ASSERT_TRUE(shard->Pull(Ctx(), "emb", {Partition::FeatureKey(k) / 2 * 2}, 8, &values).ok());
    for (float v : Floats(values)) ASSERT_EQ(v, expected) << "key " << k;
  }
  EXPECT_EQ(shard->Stats().tables[0].rows, static_cast<uint64_t>(kKeys));
}

TEST(ShardDenseTest, BlocksAreRoutedAndValidated) {
  auto partition = *Partition::Uniform(2);
  TableConfig c = Sparse("mlp", 4);
  c.set_kind(TableConfig::DENSE);
  c.set_dense_size(30);  // 8 blocks, the last one half used
  std::unique_ptr<Shard> shards[2] = {MakeShard(0, 2), MakeShard(1, 2)};
  std::vector<uint64_t> blocks[2];
  for (uint64_t b = 0; b < 8; ++b) blocks[partition.OwnerOf(Partition::DenseBlockKey("mlp", b))].push_back(b);
  ASSERT_FALSE(blocks[0].empty());
  ASSERT_FALSE(blocks[1].empty());
  for (int s = 0; s < 2; ++s) {
    Shard& shard = *shards[s];
    ASSERT_TRUE(shard.CreateTable(Ctx(), c).ok());
    std::string before;
    ASSERT_TRUE(shard.PullDense(Ctx(), "mlp", blocks[s], 4, &before).ok());
    std::vector<float> grads(blocks[s].size() * 4, 2.0f);
    ASSERT_TRUE(shard.PushDense(Ctx(), "mlp", blocks[s], grads, 4).ok());
    std::string after;
    ASSERT_TRUE(shard.PullDense(Ctx(), "mlp", blocks[s], 4, &after).ok());
    std::vector<float> b = Floats(before), a = Floats(after);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_FLOAT_EQ(a[i], b[i] - 2.0f);

    const uint64_t fingerprint = shard.Fingerprint();
    std::string values;
    absl::Status wrong_owner = shard.PullDense(Ctx(), "mlp", blocks[1 - s], 4, &values);
    EXPECT_EQ(wrong_owner.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(wrong_owner.message()), HasSubstr("outside shard"));
    absl::Status too_far = shard.PushDense(Ctx(), "mlp", {8}, std::vector<float>(4, 1.0f), 4);
    EXPECT_THAT(std::string(too_far.message()), HasSubstr("has 8 blocks; block 8 does not exist"));
    EXPECT_EQ(shard.Fingerprint(), fingerprint);
  }
}

TEST(ShardBspTest, PullForAnAppliedClockSeesTheWeightsFromBeforeIt) {
  ShardOptions options;
  options.job_id = "job";
  options.bsp_workers = 2;
  auto shard = std::move(Shard::Create(options, *Partition::Uniform(1))).value();
  ASSERT_TRUE(shard->CreateTable(Ctx(), Sparse("emb", 2)).ok());
  const std::vector<uint64_t> keys = {3, 9, 27};
  const auto worker = [](int rank, int64_t clock) {
    RequestContext ctx = Ctx();
    ctx.worker_rank = rank;
    ctx.clock = clock;
    return ctx;
  };
  std::string before, after, replayed, current;
  ASSERT_TRUE(shard->Pull(worker(0, 0), "emb", keys, 2, &before).ok());
  const std::vector<float> grads(keys.size() * 2, 1.0f);
  ASSERT_TRUE(shard->Push(worker(0, 0), "emb", keys, grads, 2).ok());
  ASSERT_TRUE(shard->Push(worker(1, 0), "emb", {keys[0]}, {2.0f, 2.0f}, 2).ok());  // completes clock 0
  ASSERT_TRUE(shard->Pull(worker(0, 1), "emb", keys, 2, &after).ok());
  EXPECT_NE(after, before);
  // Worker 0 died after pushing clock 0; its replacement pulls for iteration 0 again and sees what it saw then.
  ASSERT_TRUE(shard->Pull(worker(0, 0), "emb", keys, 2, &replayed).ok());
  EXPECT_EQ(replayed, before);
  // Its identical push is recognized as a repeat and not applied again.
  ASSERT_TRUE(shard->Push(worker(0, 0), "emb", keys, grads, 2).ok());
  ASSERT_TRUE(shard->Pull(worker(0, 1), "emb", keys, 2, &current).ok());
  EXPECT_EQ(current, after);
  // Tools (rank -1) always read the current weights.
  RequestContext tool = Ctx();
  ASSERT_TRUE(shard->Pull(tool, "emb", keys, 2, &current).ok());
  EXPECT_EQ(current, after);
}

TableConfig DenseAssign(const std::string& name, int dim, uint64_t size) {
  TableConfig c = Sparse(name, dim, OptimizerConfig::ASSIGN, /*lr=*/0.0f);
  c.set_kind(TableConfig::DENSE);
  c.set_dense_size(size);
  return c;
}

bool SameBits(const std::string& packed, const std::vector<float>& floats) {
  return packed.size() == floats.size() * sizeof(float) &&
         std::memcmp(packed.data(), floats.data(), packed.size()) == 0;
}

TEST(ShardAssignTest, DenseTableHoldsTheLastPushBitForBit) {
  std::unique_ptr<Shard> shard = MakeShard(0, 1);
  ASSERT_TRUE(shard->CreateTable(Ctx(), DenseAssign("state", 4, 10)).ok());  // 3 blocks, the last half used
  const std::vector<uint64_t> all = {0, 1, 2};
  const std::vector<float> first = {-0.0f, 1e-40f, 1e15f, -1e15f, 0.1f, 3.14159274f, 2.0f, -3.0f,
                                    4.0f,  5.0f,   0.0f,  0.0f};
  std::vector<float> second(12);
  for (size_t i = 0; i < second.size(); ++i) second[i] = 0.3f * static_cast<float>(i) - 1.0f;
  ASSERT_TRUE(shard->PushDense(Ctx(), "state", all, first, 4).ok());
  std::string values;
  ASSERT_TRUE(shard->PullDense(Ctx(), "state", all, 4, &values).ok());
  EXPECT_TRUE(SameBits(values, first));
  ASSERT_TRUE(shard->PushDense(Ctx(), "state", all, second, 4).ok());
  ASSERT_TRUE(shard->PullDense(Ctx(), "state", all, 4, &values).ok());
  EXPECT_TRUE(SameBits(values, second));

  // A push of some blocks replaces those only; an empty push changes nothing.
  const std::vector<float> block1 = {9.0f, 8.0f, 7.0f, 6.0f};
  ASSERT_TRUE(shard->PushDense(Ctx(), "state", {1}, block1, 4).ok());
  ASSERT_TRUE(shard->PushDense(Ctx(), "state", {}, {}, 4).ok());
  std::vector<float> expected = second;
  std::copy(block1.begin(), block1.end(), expected.begin() + 4);
  ASSERT_TRUE(shard->PullDense(Ctx(), "state", all, 4, &values).ok());
  EXPECT_TRUE(SameBits(values, expected));

  // Values are checked as gradients are, and a refused push changes nothing.
  const uint64_t fingerprint = shard->Fingerprint();
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), 2e15f}) {
    const absl::Status refused = shard->PushDense(Ctx(), "state", {0}, {1.0f, bad, 1.0f, 1.0f}, 4);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(refused.message()), HasSubstr("bad gradient")) << bad;
  }
  EXPECT_EQ(shard->Fingerprint(), fingerprint);
}

TEST(ShardBspTest, AssignTableTakesTheValuesOfAClocksOneWriter) {
  ShardOptions options;
  options.job_id = "job";
  options.bsp_workers = 3;
  auto shard = std::move(Shard::Create(options, *Partition::Uniform(1))).value();
  ASSERT_TRUE(shard->CreateTable(Ctx(), DenseAssign("state", 4, 8)).ok());
  const auto worker = [](int rank, int64_t clock) {
    RequestContext ctx = Ctx();
    ctx.worker_rank = rank;
    ctx.clock = clock;
    return ctx;
  };
  const std::vector<uint64_t> all = {0, 1};
  for (int64_t clock = 0; clock < 2; ++clock) {
    // Worker 0 writes the whole tensor; the others push empty parts (PsClient::PushDense of nothing).
    std::vector<float> pushed(8);
    for (size_t i = 0; i < pushed.size(); ++i) pushed[i] = 0.1f * static_cast<float>(i + 1) + clock;
    pushed[3] = -0.0f;
    ASSERT_TRUE(shard->PushDense(worker(1, clock), "state", {}, {}, 0).ok());
    ASSERT_TRUE(shard->PushDense(worker(0, clock), "state", all, pushed, 4).ok());
    std::string values;
    ASSERT_TRUE(shard->PullDense(Ctx(), "state", all, 4, &values).ok());
    EXPECT_FALSE(SameBits(values, pushed)) << "clock " << clock << " applied before worker 2 pushed";
    ASSERT_TRUE(shard->PushDense(worker(2, clock), "state", {}, {}, 0).ok());
    ASSERT_TRUE(shard->PullDense(Ctx(), "state", all, 4, &values).ok());
    EXPECT_TRUE(SameBits(values, pushed)) << "clock " << clock;
  }
}

}  // namespace
}  // namespace kestrel
