// Every model type on the CPU backend: gradients against finite differences on single-valued and jagged
// (pooled, weighted) batches, a hand-computed reference of the pooled forward and backward pass, the compact
// layout against the same batch with explicit one-entry bags (bitwise), empty batches and bags, and the table
// layout.
#include "worker/model.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "gtest/gtest.h"
#include "worker/compute/cpu_backend.h"
#include "worker/data/preset_examples.h"
#include "worker/synthetic_batch.h"

namespace kestrel {
namespace {

constexpr int kFields = 3;
constexpr int kDenseDim = 2;
constexpr int kExamples = 6;

const ModelConfig::Type kAllTypes[] = {ModelConfig::LOGISTIC_REGRESSION, ModelConfig::FM, ModelConfig::DEEPFM,
                                       ModelConfig::WIDE_AND_DEEP, ModelConfig::DLRM};

// Single-valued: one entry per field, field 2 real-valued.
PreparedBatch MakeBatch() {
  PreparedBatch p;
  p.batch.Reset(kFields, kDenseDim);
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> key(0, 4);  // few keys: duplicates within and across examples
  std::uniform_real_distribution<float> u(0.0f, 2.0f);
  for (int n = 0; n < kExamples; ++n) {
    for (int f = 0; f < kFields; ++f) {
      p.batch.keys.push_back(Partition::FieldFeatureKey(f % 2, key(rng)));
      p.batch.values.push_back(f == 2 ? u(rng) : 1.0f);  // one real-valued slot
    }
    for (int d = 0; d < kDenseDim; ++d) p.batch.dense.push_back(u(rng));
    p.batch.labels.push_back(n % 3 == 0 ? 1.0f : 0.0f);
    ++p.batch.size;
  }
  p.Prepare(*Partition::Uniform(2));
  return p;
}

// Jagged and weighted: field 0 pooled SUM (0 to 3 entries), field 1 MEAN (1 to 4 real-valued entries), field 2
// SQRT_N (0 to 3); example 1's field 0 and example 2's field 2 are empty, example 4 weighs 0. Keys repeat within
// bags, across bags and across fields (fields 0 and 2 share a vocabulary).
PreparedBatch MakeJaggedBatch() {
  PreparedBatch p;
  p.batch.Reset(kFields, kDenseDim);
  std::mt19937 rng(17);
  std::uniform_int_distribution<int> key(0, 3);
  std::uniform_int_distribution<int> length(0, 3);
  std::uniform_real_distribution<float> u(0.0f, 2.0f);
  const Pooling pooling[kFields] = {POOLING_SUM, POOLING_MEAN, POOLING_SQRT_N};
  const float weights[kExamples] = {1.0f, 0.5f, 2.0f, 1.0f, 0.0f, 1.5f};
  for (int n = 0; n < kExamples; ++n) {
    for (int f = 0; f < kFields; ++f) {
      int entries = f == 1 ? 1 + length(rng) : length(rng);
      if ((n == 1 && f == 0) || (n == 2 && f == 2)) entries = 0;
      if (n == 0 && f != 1) entries = 3;
      for (int e = 0; e < entries; ++e) {
        p.batch.AddEntry(Partition::FieldFeatureKey(f % 2, key(rng)), f == 1 ? u(rng) : 1.0f);
      }
      p.batch.CloseBag(pooling[f]);
    }
    for (int d = 0; d < kDenseDim; ++d) p.batch.dense.push_back(u(rng));
    p.batch.CloseExample(n % 3 == 0 ? 1.0f : 0.0f, weights[n]);
  }
  p.Prepare(*Partition::Uniform(2));
  return p;
}

struct Params {
  std::vector<float> wide, emb, dense;
  ModelParams view() const { return {wide.data(), emb.data(), dense.data()}; }
};

// Random parameters in [-scale, scale] for `model` and `batch`.
Params RandomParams(const Model& model, const PreparedBatch& batch, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  const size_t unique = batch.keys.num_unique();
  Params params;
  params.wide.resize(unique);
  params.emb.resize(unique * model.embedding_dim());
  params.dense.resize(model.dense_size());
  for (auto* v : {&params.wide, &params.emb, &params.dense}) {
    for (float& x : *v) x = u(rng);
  }
  return params;
}

std::unique_ptr<Model> MakeModel(ModelConfig::Type type, int dense_dim, Backend* backend) {
  ModelConfig config;
  config.set_type(type);
  config.set_embedding_dim(4);
  config.add_hidden(5);
  config.add_hidden(3);
  config.add_bottom_hidden(4);
  auto model = Model::Create(config, kFields, dense_dim, backend);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

// Checks every gradient of a `type` model taking `dense_dim` dense inputs against central differences.
void CheckGradients(ModelConfig::Type type, int dense_dim, const PreparedBatch& batch) {
  auto backend = NewCpuBackend();
  std::unique_ptr<Model> model = MakeModel(type, dense_dim, backend.get());
  ASSERT_NE(model, nullptr);
  Model& m = *model;
  const size_t unique = batch.keys.num_unique();
  ASSERT_LT(unique, batch.batch.num_entries()) << "the batch should repeat keys";
  const int64_t n = batch.batch.size;

  Params params = RandomParams(m, batch, 0.5f, 11);
  Params grads = params;
  ModelGrads g{grads.wide.data(), grads.emb.data(), grads.dense.data()};
  std::vector<float> probs(n);
  auto loss = m.Step(batch, params.view(), &g, probs.data());
  ASSERT_TRUE(loss.ok()) << loss.status();
  for (float p : probs) EXPECT_TRUE(p > 0 && p < 1);

  // Inference gives the same probabilities and loss.
  std::vector<float> probs2(n);
  auto loss2 = m.Step(batch, params.view(), nullptr, probs2.data());
  ASSERT_TRUE(loss2.ok());
  EXPECT_EQ(*loss, *loss2);
  EXPECT_EQ(probs, probs2);

  // Central differences of the loss (Step returns the weighted sum over the batch).
  const float eps = 1e-3f;
  int checked = 0;
  // Sparse rows take the summed loss's gradient, the dense tensor the mean over examples.
  auto check = [&](std::vector<float>* param, const std::vector<float>& grad, const char* what, double scale) {
    for (size_t i = 0; i < param->size(); ++i) {
      const float saved = (*param)[i];
      (*param)[i] = saved + eps;
      const double up = *m.Step(batch, params.view(), nullptr, nullptr);
      (*param)[i] = saved - eps;
      const double down = *m.Step(batch, params.view(), nullptr, nullptr);
      (*param)[i] = saved;
      const double fd = (up - down) / (2 * eps) * scale;
      EXPECT_NEAR(grad[i], fd, 2e-3 + 2e-2 * std::fabs(fd)) << what << "[" << i << "]";
      ++checked;
    }
  };
  check(&params.wide, grads.wide, "wide", 1.0);
  if (m.has_embedding()) check(&params.emb, grads.emb, "embedding", 1.0);
  check(&params.dense, grads.dense, "dense", 1.0 / n);
  EXPECT_GT(checked, 0);
}

std::string TypeName(const ::testing::TestParamInfo<ModelConfig::Type>& info) {
  return ModelConfig::Type_Name(info.param);
}

class ModelGradientTest : public ::testing::TestWithParam<ModelConfig::Type> {};

TEST_P(ModelGradientTest, GradientsMatchFiniteDifferences) { CheckGradients(GetParam(), kDenseDim, MakeBatch()); }

TEST_P(ModelGradientTest, JaggedWeightedGradientsMatchFiniteDifferences) {
  const PreparedBatch batch = MakeJaggedBatch();
  ASSERT_FALSE(batch.batch.single_valued());
  ASSERT_FALSE(batch.batch.weights.empty());
  CheckGradients(GetParam(), kDenseDim, batch);
}

INSTANTIATE_TEST_SUITE_P(AllModels, ModelGradientTest, ::testing::ValuesIn(kAllTypes), TypeName);

TEST(ModelTest, DlrmWithoutDenseInputsInteractsTheFieldsAlone) {
  CheckGradients(ModelConfig::DLRM, 0, MakeBatch());
  CheckGradients(ModelConfig::DLRM, 0, MakeJaggedBatch());
}

// FM's forward and backward pass over pooled, weighted bags, computed here in double from the batch itself.
TEST(ModelTest, PooledFmMatchesAHandComputedReference) {
  auto backend = NewCpuBackend();
  std::unique_ptr<Model> model = MakeModel(ModelConfig::FM, 0, backend.get());
  ASSERT_NE(model, nullptr);
  const PreparedBatch batch = MakeJaggedBatch();
  const Batch& b = batch.batch;
  const int dim = model->embedding_dim();
  const size_t unique = batch.keys.num_unique();
  const Params params = RandomParams(*model, batch, 0.5f, 23);
  Params grads = params;
  ModelGrads g{grads.wide.data(), grads.emb.data(), grads.dense.data()};
  std::vector<float> probs(b.size);
  absl::StatusOr<double> loss = model->Step(batch, params.view(), &g, probs.data());
  ASSERT_TRUE(loss.ok()) << loss.status();

  const absl::Span<const uint32_t> row = batch.keys.inverse();
  std::vector<double> want_wide(unique, 0.0), want_emb(unique * dim, 0.0);
  double want_loss = 0, want_bias = 0;
  for (int64_t n = 0; n < b.size; ++n) {
    // Pooled field vectors e[f] and wide terms.
    std::vector<std::vector<double>> e(kFields, std::vector<double>(dim, 0.0));
    std::vector<double> sum(dim, 0.0);
    double z = params.dense[0];
    for (int f = 0; f < kFields; ++f) {
      const int64_t bag = n * kFields + f;
      for (uint32_t p = b.bag_begin(bag); p < b.bag_end(bag); ++p) {
        z += double{b.values[p]} * params.wide[row[p]];
        for (int d = 0; d < dim; ++d) e[f][d] += double{b.values[p]} * params.emb[row[p] * dim + d];
      }
      for (int d = 0; d < dim; ++d) sum[d] += e[f][d];
    }
    for (int f = 0; f < kFields; ++f) {
      for (int h = f + 1; h < kFields; ++h) {
        for (int d = 0; d < dim; ++d) z += e[f][d] * e[h][d];
      }
    }
    const double p = 1 / (1 + std::exp(-z));
    const double y = b.labels[n], w = b.weights[n];
    EXPECT_NEAR(probs[n], p, 1e-6) << "example " << n;
    want_loss += w * -(y * std::log(p) + (1 - y) * std::log(1 - p));
    const double dz = w * (p - y);
    want_bias += dz;
    for (int f = 0; f < kFields; ++f) {
      const int64_t bag = n * kFields + f;
      for (uint32_t q = b.bag_begin(bag); q < b.bag_end(bag); ++q) {
        want_wide[row[q]] += dz * b.values[q];
        for (int d = 0; d < dim; ++d) want_emb[row[q] * dim + d] += dz * b.values[q] * (sum[d] - e[f][d]);
      }
    }
  }
  EXPECT_NEAR(*loss, want_loss, 1e-5 * (1 + want_loss));
  EXPECT_NEAR(grads.dense[0], want_bias / b.size, 1e-6);
  for (size_t i = 0; i < unique; ++i) {
    EXPECT_NEAR(grads.wide[i], want_wide[i], 1e-5 * (1 + std::fabs(want_wide[i]))) << "wide[" << i << "]";
  }
  for (size_t i = 0; i < unique * dim; ++i) {
    EXPECT_NEAR(grads.emb[i], want_emb[i], 1e-5 * (1 + std::fabs(want_emb[i]))) << "emb[" << i << "]";
  }
}

// The batch with bag_offsets 0, 1, ..., bags (every bag one entry, stated explicitly) and entry_bags.
PreparedBatch WithExplicitBags(const PreparedBatch& compact) {
  PreparedBatch p;
  p.batch = compact.batch;
  p.batch.bag_offsets.resize(p.batch.num_bags() + 1);
  std::iota(p.batch.bag_offsets.begin(), p.batch.bag_offsets.end(), 0u);
  p.Prepare(*Partition::Uniform(2));
  return p;
}

struct StepOutput {
  std::vector<float> probs, wide, emb, dense;
  double loss = 0;
};

StepOutput RunStep(Model& model, const PreparedBatch& batch, const Params& params) {
  StepOutput out;
  out.probs.resize(batch.batch.size);
  out.wide.resize(batch.keys.num_unique());
  out.emb.resize(batch.keys.num_unique() * model.embedding_dim());
  out.dense.resize(model.dense_size());
  ModelGrads g{out.wide.data(), out.emb.data(), out.dense.data()};
  absl::StatusOr<double> loss = model.Step(batch, params.view(), &g, out.probs.data());
  EXPECT_TRUE(loss.ok()) << loss.status();
  out.loss = loss.value_or(std::numeric_limits<double>::quiet_NaN());
  return out;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void ExpectSameBits(const StepOutput& a, const StepOutput& b) {
  EXPECT_EQ(std::memcmp(&a.loss, &b.loss, sizeof(double)), 0) << a.loss << " vs " << b.loss;
  EXPECT_TRUE(SameBits(a.probs, b.probs)) << "probabilities";
  EXPECT_TRUE(SameBits(a.wide, b.wide)) << "wide gradient";
  EXPECT_TRUE(SameBits(a.emb, b.emb)) << "embedding gradient";
  EXPECT_TRUE(SameBits(a.dense, b.dense)) << "dense gradient";
}

// A `type` model of the default configuration over Criteo's fields and dense inputs.
std::unique_ptr<Model> CriteoModel(ModelConfig::Type type, Backend* backend) {
  ModelConfig config;
  config.set_type(type);
  return *Model::Create(config, kCriteoFields, kCriteoIntegerFields, backend);
}

class ModelLayoutTest : public ::testing::TestWithParam<ModelConfig::Type> {};

// A single-valued batch computes the same bits in the compact layout and with explicit one-entry bags; also
// with real values, zeros among them (a zero times a negative row is -0 in both), and explicit weights of 1.
TEST_P(ModelLayoutTest, ExplicitOneEntryBagsGiveTheCompactLayoutsBits) {
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    PreparedBatch compact = SyntheticCriteoBatch(200, 300.0, 5 + variant);
    if (variant > 0) {
      std::mt19937 rng(variant);
      std::uniform_real_distribution<float> u(-1.0f, 2.0f);
      for (float& v : compact.batch.values) v = std::max(0.0f, u(rng));
    }
    const PreparedBatch explicit_bags = WithExplicitBags(compact);
    ASSERT_FALSE(explicit_bags.batch.single_valued());
    ASSERT_EQ(explicit_bags.entry_bags.size(), compact.batch.num_entries());
    auto backend = NewCpuBackend();
    std::unique_ptr<Model> model = CriteoModel(GetParam(), backend.get());
    const Params params = RandomParams(*model, compact, 0.3f, 9);
    const StepOutput a = RunStep(*model, compact, params);
    ExpectSameBits(a, RunStep(*model, explicit_bags, params));
    if (variant == 2) {
      PreparedBatch weighted = compact;
      weighted.batch.weights.assign(weighted.batch.size, 1.0f);
      ExpectSameBits(a, RunStep(*model, weighted, params));
    }
  }
}

// A Criteo-shaped jagged batch (empty bags, every pooling, weights) runs in every model, repeatably.
TEST_P(ModelLayoutTest, MultiValuedCriteoBatchRunsRepeatably) {
  const PreparedBatch batch = SyntheticMultiValuedBatch(100, 300.0);
  auto backend = NewCpuBackend();
  std::unique_ptr<Model> model = CriteoModel(GetParam(), backend.get());
  const Params params = RandomParams(*model, batch, 0.3f, 9);
  const StepOutput a = RunStep(*model, batch, params);
  EXPECT_TRUE(std::isfinite(a.loss));
  for (const auto* v : {&a.probs, &a.wide, &a.emb, &a.dense}) {
    for (float x : *v) ASSERT_TRUE(std::isfinite(x));
  }
  ExpectSameBits(a, RunStep(*model, batch, params));
}

// A batch without examples (the last of an epoch may be) returns 0 and zero gradients, touching nothing else;
// a batch of empty bags pools zeros.
TEST_P(ModelLayoutTest, EmptyBatchesAndEmptyBags) {
  auto backend = NewCpuBackend();
  std::unique_ptr<Model> model = MakeModel(GetParam(), kDenseDim, backend.get());
  ASSERT_NE(model, nullptr);
  std::vector<float> dense(model->dense_size(), 0.1f);
  for (bool shaped : {true, false}) {
    PreparedBatch empty;  // unshaped: a default Batch (0 fields)
    if (shaped) {
      empty.batch.Reset(kFields, kDenseDim);
      empty.Prepare(*Partition::Uniform(2));
    }
    std::vector<float> grad_dense(model->dense_size(), std::numeric_limits<float>::quiet_NaN());
    ModelGrads g{nullptr, nullptr, grad_dense.data()};
    float untouched = 7.0f;
    absl::StatusOr<double> loss = model->Step(empty, {nullptr, nullptr, dense.data()}, &g, &untouched);
    ASSERT_TRUE(loss.ok()) << loss.status();
    EXPECT_EQ(*loss, 0.0);
    EXPECT_EQ(untouched, 7.0f);
    for (float x : grad_dense) ASSERT_EQ(x, 0.0f);
  }

  // Examples whose every bag is empty: no keys, so no sparse parameters either.
  PreparedBatch bare;
  bare.batch.Reset(kFields, kDenseDim);
  for (int n = 0; n < 4; ++n) {
    for (int f = 0; f < kFields; ++f) bare.batch.CloseBag();
    for (int d = 0; d < kDenseDim; ++d) bare.batch.dense.push_back(0.5f * d + n);
    bare.batch.CloseExample(n % 2 == 0 ? 1.0f : 0.0f);
  }
  bare.Prepare(*Partition::Uniform(2));
  ASSERT_EQ(bare.keys.num_unique(), 0u);
  std::vector<float> grad_dense(model->dense_size());
  ModelGrads g{nullptr, nullptr, grad_dense.data()};
  std::vector<float> probs(4);
  absl::StatusOr<double> loss = model->Step(bare, {nullptr, nullptr, dense.data()}, &g, probs.data());
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_TRUE(std::isfinite(*loss));
  for (float x : grad_dense) ASSERT_TRUE(std::isfinite(x));
  if (GetParam() == ModelConfig::LOGISTIC_REGRESSION || GetParam() == ModelConfig::FM) {
    for (float p : probs) EXPECT_FLOAT_EQ(p, 1 / (1 + std::exp(-dense[0])));  // the bias alone
  }
}

INSTANTIATE_TEST_SUITE_P(AllModels, ModelLayoutTest, ::testing::ValuesIn(kAllTypes), TypeName);

TEST(ModelTest, TablesFollowTheModelType) {
  auto backend = NewCpuBackend();
  ModelConfig config;
  config.set_type(ModelConfig::LOGISTIC_REGRESSION);
  auto lr = *Model::Create(config, kCriteoFields, 13, backend.get());
  ASSERT_EQ(lr->Tables().size(), 2u);  // wide + the bias
  EXPECT_EQ(lr->dense_size(), 1);
  EXPECT_EQ(lr->Tables()[0].optimizer().type(), OptimizerConfig::FTRL);

  config.set_type(ModelConfig::DEEPFM);
  config.set_embedding_checkpoint_codec(CHECKPOINT_Q8);
  auto deepfm = *Model::Create(config, kCriteoFields, 13, backend.get());
  const auto tables = deepfm->Tables();
  ASSERT_EQ(tables.size(), 3u);
  EXPECT_EQ(tables[1].name(), kEmbeddingTable);
  EXPECT_EQ(tables[1].dim(), 8);
  // Only the embeddings take the compact checkpoint codec.
  EXPECT_EQ(tables[0].checkpoint_codec(), CHECKPOINT_FP32);
  EXPECT_EQ(tables[1].checkpoint_codec(), CHECKPOINT_Q8);
  EXPECT_EQ(tables[2].checkpoint_codec(), CHECKPOINT_FP32);
  // bias + (39 * 8 + 13) x 64 + 64 + 64 x 32 + 32 + 32 x 1 + 1
  EXPECT_EQ(deepfm->dense_size(), 1 + 325 * 64 + 64 + 64 * 32 + 32 + 32 + 1);
  EXPECT_EQ(tables[2].dense_size(), static_cast<uint64_t>(deepfm->dense_size()));

  config.set_type(ModelConfig::DLRM);
  auto dlrm = *Model::Create(config, kCriteoFields, 13, backend.get());
  EXPECT_TRUE(dlrm->has_dot_interaction());
  // Top: [bottom vector (8), 40 * 39 / 2 dots] -> 64 -> 32 -> 1; bottom: 13 -> 32 -> 8; plus the bias.
  const int64_t top = (8 + 780) * 64 + 64 + 64 * 32 + 32 + 32 + 1;
  const int64_t bottom = 13 * 32 + 32 + 32 * 8 + 8;
  EXPECT_EQ(dlrm->dense_size(), 1 + top + bottom);

  config.set_embedding_dim(5000);
  EXPECT_EQ(Model::Create(config, kCriteoFields, 13, backend.get()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ModelTest, WrongBatchShapeIsRefused) {
  auto backend = NewCpuBackend();
  ModelConfig config;
  config.set_type(ModelConfig::FM);
  auto model = *Model::Create(config, kFields + 1, 0, backend.get());
  const PreparedBatch batch = MakeBatch();
  std::vector<float> w(100), e(1000), d(10);
  EXPECT_EQ(model->Step(batch, {w.data(), e.data(), d.data()}, nullptr, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Arrays that disagree are refused before any of them is read.
TEST(ModelTest, InconsistentBatchIsRefused) {
  auto backend = NewCpuBackend();
  std::unique_ptr<Model> model = MakeModel(ModelConfig::DEEPFM, kDenseDim, backend.get());
  ASSERT_NE(model, nullptr);
  const PreparedBatch good = MakeJaggedBatch();
  const Params params = RandomParams(*model, good, 0.1f, 1);
  std::vector<std::pair<std::string, PreparedBatch>> bad;
  bad.emplace_back("bag offsets not re-prepared", WithExplicitBags(MakeBatch()));
  bad.back().second.entry_bags.clear();
  bad.emplace_back("short bag offsets", good);
  bad.back().second.batch.bag_offsets.pop_back();
  bad.emplace_back("missing weights", good);
  bad.back().second.batch.weights.pop_back();
  bad.emplace_back("missing values", good);
  bad.back().second.batch.values.pop_back();
  bad.emplace_back("missing labels", good);
  bad.back().second.batch.labels.pop_back();
  for (const auto& [what, batch] : bad) {
    absl::StatusOr<double> loss = model->Step(batch, params.view(), nullptr, nullptr);
    EXPECT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument) << what << ": " << loss.status();
  }
  EXPECT_TRUE(model->Step(good, params.view(), nullptr, nullptr).ok());
}

}  // namespace
}  // namespace kestrel
