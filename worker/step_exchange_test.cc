// StepExchange against a PsClient that records its calls: a pull reads the wide, embedding and dense tables at
// the step's read clock into the step's buffers; a push sends the gradients at the iteration's clock, an empty
// batch an empty dense part; a fused step sends one Step of the three tables, pushing one batch's keys and
// pulling the next one's.
#include "worker/step_exchange.h"

#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/partition.h"
#include "common/status.h"
#include "gtest/gtest.h"
#include "worker/batch_pipeline.h"
#include "worker/compute/cpu_backend.h"
#include "worker/embedding_tables.h"
#include "worker/model.h"
#include "worker/ps_client.h"
#include "worker/synthetic_batch.h"

namespace kestrel {
namespace {

// One call the fake client saw.
struct Call {
  std::string method;
  std::string table;
  int dim = 0;
  size_t floats = 0;  // the values sent or read
  int64_t clock = 0;
  const KeyBatch* keys = nullptr;
};

// Records every call (from any thread); pulls fill the rows with 0.5.
class RecordingPsClient final : public PsClient {
 public:
  const Partition& partition() const override { return partition_; }
  absl::Status CreateTable(const TableConfig&) override { return absl::OkStatus(); }
  absl::Status Pull(absl::string_view table, const KeyBatch& keys, int dim, float* rows,
                    const CallClock& clock) override {
    std::fill(rows, rows + keys.num_unique() * dim, 0.5f);
    Record({"Pull", std::string(table), dim, keys.num_unique() * dim, clock.clock, &keys});
    return absl::OkStatus();
  }
  absl::Status Push(absl::string_view table, const KeyBatch& keys, int dim, const float*,
                    const CallClock& clock) override {
    Record({"Push", std::string(table), dim, keys.num_unique() * dim, clock.clock, &keys});
    return absl::OkStatus();
  }
  absl::Status PullDense(absl::string_view table, absl::Span<float> out, const CallClock& clock) override {
    std::fill(out.begin(), out.end(), 0.5f);
    Record({"PullDense", std::string(table), 0, out.size(), clock.clock, nullptr});
    return absl::OkStatus();
  }
  absl::Status PushDense(absl::string_view table, absl::Span<const float> grads, const CallClock& clock) override {
    Record({"PushDense", std::string(table), 0, grads.size(), clock.clock, nullptr});
    return absl::OkStatus();
  }
  absl::Status Step(absl::Span<const StepPart> parts, const CallClock& push, const CallClock& pull) override {
    absl::MutexLock lock(&mu_);
    step_parts_.assign(parts.begin(), parts.end());
    step_push_clock_ = push.clock;
    step_pull_clock_ = pull.clock;
    ++steps_;
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<StatsResponse>> Stats() override { return std::vector<StatsResponse>(); }
  void SetGeneration(uint64_t) override {}

  // The calls so far by method and table ("Push emb").
  std::map<std::string, Call> calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  std::vector<StepPart> step_parts() {
    absl::MutexLock lock(&mu_);
    return step_parts_;
  }
  int steps() {
    absl::MutexLock lock(&mu_);
    return steps_;
  }
  int64_t step_push_clock() {
    absl::MutexLock lock(&mu_);
    return step_push_clock_;
  }
  int64_t step_pull_clock() {
    absl::MutexLock lock(&mu_);
    return step_pull_clock_;
  }

 private:
  void Record(const Call& call) {
    absl::MutexLock lock(&mu_);
    calls_[call.method + " " + call.table] = call;
  }

  const Partition partition_ = *Partition::Uniform(2);
  absl::Mutex mu_;
  std::map<std::string, Call> calls_ ABSL_GUARDED_BY(mu_);
  std::vector<StepPart> step_parts_ ABSL_GUARDED_BY(mu_);
  int steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t step_push_clock_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t step_pull_clock_ ABSL_GUARDED_BY(mu_) = -1;
};

class StepExchangeTest : public ::testing::Test {
 protected:
  StepExchangeTest()
      : backend_(NewCpuBackend()),
        model_(*Model::Create(DeepFm(), kCriteoFields, kCriteoIntegerFields, backend_.get())),
        tables_(&client_, {"emb"}, model_->embedding_dim()),
        exchange_(&client_, &tables_, model_.get()) {}

  static ModelConfig DeepFm() {
    ModelConfig config;
    config.set_type(ModelConfig::DEEPFM);
    return WithDefaults(config);
  }

  // A step of `examples` synthetic Criteo examples (none: an empty batch), read at `read_clock`.
  std::unique_ptr<StepData> Step(int examples, int64_t read_clock) {
    auto step = std::make_unique<StepData>(backend_.get());
    if (examples > 0) {
      step->batch = SyntheticCriteoBatch(examples, 1000, /*seed=*/examples);
    } else {
      step->batch.batch.Reset(kCriteoFields, kCriteoIntegerFields);
      step->batch.Prepare(client_.partition());
    }
    step->read = CallClock{read_clock};
    return step;
  }

  // Pushes (zero) gradients of `step`'s batch at `clock`.
  absl::Status PushGradients(const StepData& step, int64_t clock) {
    GradBuffers g(backend_.get());
    KESTREL_RETURN_IF_ERROR(exchange_.ReserveGrads(step.batch, &g));
    return exchange_.Push(step, g, clock);
  }

  RecordingPsClient client_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  EmbeddingTables tables_;
  StepExchange exchange_;
};

TEST_F(StepExchangeTest, APullReadsEveryTableAtTheStepsReadClock) {
  std::unique_ptr<StepData> step = Step(32, /*read_clock=*/7);
  ASSERT_TRUE(exchange_.Pull(step.get()).ok());
  const size_t unique = step->batch.keys.num_unique();
  const int dim = model_->embedding_dim();
  std::map<std::string, Call> calls = client_.calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls["Pull wide"].dim, 1);
  EXPECT_EQ(calls["Pull wide"].floats, unique);
  EXPECT_EQ(calls["Pull wide"].clock, 7);
  EXPECT_EQ(calls["Pull wide"].keys, &step->batch.keys);
  EXPECT_EQ(calls["Pull emb"].dim, dim);
  EXPECT_EQ(calls["Pull emb"].clock, 7);
  EXPECT_EQ(calls["PullDense dense"].floats, static_cast<size_t>(model_->dense_size()));
  EXPECT_EQ(calls["PullDense dense"].clock, 7);
  // The rows landed in the step's buffers, sized for its batch.
  EXPECT_EQ(step->wide.data()[unique - 1], 0.5f);
  EXPECT_EQ(step->emb.data()[unique * dim - 1], 0.5f);
  EXPECT_EQ(step->dense.data()[model_->dense_size() - 1], 0.5f);
}

TEST_F(StepExchangeTest, APushSendsTheGradientsAtTheIterationsClock) {
  std::unique_ptr<StepData> step = Step(32, 0);
  ASSERT_TRUE(PushGradients(*step, /*clock=*/4).ok());
  std::map<std::string, Call> calls = client_.calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls["Push wide"].clock, 4);
  EXPECT_EQ(calls["Push emb"].clock, 4);
  EXPECT_EQ(calls["Push emb"].keys, &step->batch.keys);
  EXPECT_EQ(calls["PushDense dense"].floats, static_cast<size_t>(model_->dense_size()));
  EXPECT_EQ(calls["PushDense dense"].clock, 4);
}

TEST_F(StepExchangeTest, AnEmptyBatchPushesAnEmptyDensePart) {
  std::unique_ptr<StepData> step = Step(0, 0);
  ASSERT_TRUE(PushGradients(*step, /*clock=*/9).ok());
  std::map<std::string, Call> calls = client_.calls();
  ASSERT_EQ(calls.count("PushDense dense"), 1u);
  EXPECT_EQ(calls["PushDense dense"].floats, 0u);
  EXPECT_EQ(calls["PushDense dense"].clock, 9);
}

TEST_F(StepExchangeTest, AFusedStepPushesOneBatchAndPullsTheNext) {
  std::unique_ptr<StepData> step = Step(32, 0);
  std::unique_ptr<StepData> next = Step(16, /*read_clock=*/6);
  GradBuffers g(backend_.get());
  ASSERT_TRUE(exchange_.ReserveGrads(step->batch, &g).ok());
  ASSERT_TRUE(exchange_.ReserveRows(next.get()).ok());
  ASSERT_TRUE(exchange_.Fused(*step, g, /*clock=*/5, next.get()).ok());
  EXPECT_TRUE(client_.calls().empty());  // no separate call
  ASSERT_EQ(client_.steps(), 1);
  EXPECT_EQ(client_.step_push_clock(), 5);
  EXPECT_EQ(client_.step_pull_clock(), 6);
  const std::vector<StepPart> parts = client_.step_parts();
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].table, "wide");
  EXPECT_EQ(parts[0].dim, 1);
  EXPECT_EQ(parts[1].table, "emb");
  EXPECT_EQ(parts[1].dim, model_->embedding_dim());
  for (int i = 0; i < 2; ++i) {
    EXPECT_FALSE(parts[i].dense);
    EXPECT_TRUE(parts[i].push && parts[i].pull);
    EXPECT_EQ(parts[i].push_keys, &step->batch.keys);
    EXPECT_EQ(parts[i].pull_keys, &next->batch.keys);
  }
  EXPECT_EQ(parts[0].grads, g.wide.data());
  EXPECT_EQ(parts[0].rows, next->wide.data());
  EXPECT_EQ(parts[1].grads, g.emb.data());
  EXPECT_EQ(parts[1].rows, next->emb.data());
  EXPECT_EQ(parts[2].table, "dense");
  EXPECT_TRUE(parts[2].dense && parts[2].push && parts[2].pull);
  EXPECT_EQ(parts[2].push_floats, static_cast<size_t>(model_->dense_size()));
  EXPECT_EQ(parts[2].pull_floats, static_cast<size_t>(model_->dense_size()));
  EXPECT_EQ(parts[2].rows, next->dense.data());
}

}  // namespace
}  // namespace kestrel
