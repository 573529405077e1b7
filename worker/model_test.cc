// Finite-difference gradient checks of every model type on the CPU backend, and the model's table layout.
#include "worker/model.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"
#include "worker/compute/cpu_backend.h"

namespace kestrel {
namespace {

constexpr int kFields = 3;
constexpr int kDenseDim = 2;
constexpr int kExamples = 6;

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

struct Params {
  std::vector<float> wide, emb, dense;
  ModelParams view() const { return {wide.data(), emb.data(), dense.data()}; }
};

// Checks every gradient of a `type` model taking `dense_dim` dense inputs against central differences.
void CheckGradients(ModelConfig::Type type, int dense_dim) {
  auto backend = NewCpuBackend();
  ModelConfig config;
  config.set_type(type);
  config.set_embedding_dim(4);
  config.add_hidden(5);
  config.add_hidden(3);
  config.add_bottom_hidden(4);
  auto model = Model::Create(config, kFields, dense_dim, backend.get());
  ASSERT_TRUE(model.ok()) << model.status();
  Model& m = **model;
  const PreparedBatch batch = MakeBatch();
  const size_t unique = batch.keys.num_unique();
  ASSERT_LT(unique, static_cast<size_t>(kExamples * kFields)) << "the batch should repeat keys";

  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  Params params;
  params.wide.resize(unique);
  params.emb.resize(unique * m.embedding_dim());
  params.dense.resize(m.dense_size());
  for (auto* v : {&params.wide, &params.emb, &params.dense}) {
    for (float& x : *v) x = u(rng);
  }
  Params grads = params;
  ModelGrads g{grads.wide.data(), grads.emb.data(), grads.dense.data()};
  std::vector<float> probs(kExamples);
  auto loss = m.Step(batch, params.view(), &g, probs.data());
  ASSERT_TRUE(loss.ok()) << loss.status();
  for (float p : probs) EXPECT_TRUE(p > 0 && p < 1);

  // Inference gives the same probabilities and loss.
  std::vector<float> probs2(kExamples);
  auto loss2 = m.Step(batch, params.view(), nullptr, probs2.data());
  ASSERT_TRUE(loss2.ok());
  EXPECT_EQ(*loss, *loss2);
  EXPECT_EQ(probs, probs2);

  // Central differences of the loss (Step returns the sum over the batch).
  const float eps = 1e-3f;
  int checked = 0;
  // Sparse rows take the summed loss's gradient, the dense tensor the mean loss's.
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
  check(&params.dense, grads.dense, "dense", 1.0 / kExamples);
  EXPECT_GT(checked, 0);
}

class ModelGradientTest : public ::testing::TestWithParam<ModelConfig::Type> {};

TEST_P(ModelGradientTest, GradientsMatchFiniteDifferences) { CheckGradients(GetParam(), kDenseDim); }

TEST(ModelTest, DlrmWithoutDenseInputsInteractsTheFieldsAlone) { CheckGradients(ModelConfig::DLRM, 0); }

INSTANTIATE_TEST_SUITE_P(AllModels, ModelGradientTest,
                         ::testing::Values(ModelConfig::LOGISTIC_REGRESSION, ModelConfig::FM, ModelConfig::DEEPFM,
                                           ModelConfig::WIDE_AND_DEEP, ModelConfig::DLRM),
                         [](const auto& info) { return ModelConfig::Type_Name(info.param); });

TEST(ModelTest, TablesFollowTheModelType) {
  auto backend = NewCpuBackend();
  ModelConfig config;
  config.set_type(ModelConfig::LOGISTIC_REGRESSION);
  auto lr = *Model::Create(config, kCriteoFields, 13, backend.get());
  ASSERT_EQ(lr->Tables().size(), 2u);  // wide + the bias
  EXPECT_EQ(lr->dense_size(), 1);
  EXPECT_EQ(lr->Tables()[0].optimizer().type(), OptimizerConfig::FTRL);

  config.set_type(ModelConfig::DEEPFM);
  auto deepfm = *Model::Create(config, kCriteoFields, 13, backend.get());
  const auto tables = deepfm->Tables();
  ASSERT_EQ(tables.size(), 3u);
  EXPECT_EQ(tables[1].name(), kEmbeddingTable);
  EXPECT_EQ(tables[1].dim(), 8);
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

}  // namespace
}  // namespace kestrel
