// GPU test (tagged "gpu"): one whole training step (forward, backward, every gradient) of each model on the
// CUDA backend against the CPU backend, on a Criteo-shaped batch, within 1e-5 (relative to 1 + |cpu|). Skips
// where there is no GPU or the binary was built without CUDA.
#include <cmath>
#include <random>

#include "common/cuda_device.h"
#include "gtest/gtest.h"
#include "worker/compute/cpu_backend.h"
#include "worker/compute/cuda_backend.h"
#include "worker/model.h"
#include "worker/synthetic_batch.h"

namespace kestrel {
namespace {

constexpr int kExamples = 512;
constexpr int kDenseDim = 13;

void ExpectClose(const std::vector<float>& cuda, const std::vector<float>& cpu, const char* what) {
  ASSERT_EQ(cuda.size(), cpu.size());
  int bad = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (!(std::fabs(cuda[i] - cpu[i]) <= 1e-5 * (1 + std::fabs(cpu[i]))) && ++bad <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: cuda " << cuda[i] << " cpu " << cpu[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

class ModelGpuTest : public ::testing::TestWithParam<ModelConfig::Type> {};

TEST_P(ModelGpuTest, TrainingStepMatchesTheCpuBackend) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no GPU here (" << DescribeCudaDevices() << ")";
  absl::StatusOr<std::unique_ptr<Backend>> cuda = NewCudaBackend(0);
  if (!cuda.ok()) GTEST_SKIP() << "no CUDA backend: " << cuda.status();
  std::unique_ptr<Backend> cpu = NewCpuBackend();
  ModelConfig config;
  config.set_type(GetParam());
  auto cpu_model = *Model::Create(config, kCriteoFields, kDenseDim, cpu.get());
  auto cuda_model = *Model::Create(config, kCriteoFields, kDenseDim, cuda->get());
  const PreparedBatch batch = SyntheticCriteoBatch(kExamples, 500.0);
  const size_t unique = batch.keys.num_unique();
  const int dim = cpu_model->embedding_dim();
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  std::vector<float> wide(unique), emb(unique * dim), dense(cpu_model->dense_size());
  for (auto* v : {&wide, &emb, &dense}) {
    for (float& x : *v) x = u(rng);
  }
  struct Out {
    std::vector<float> wide, emb, dense, probs;
    double loss = 0;
  };
  auto run = [&](Model& m) {
    Out o;
    o.wide.resize(unique);
    o.emb.resize(unique * dim);
    o.dense.resize(m.dense_size());
    o.probs.resize(kExamples);
    ModelGrads g{o.wide.data(), o.emb.data(), o.dense.data()};
    absl::StatusOr<double> loss = m.Step(batch, {wide.data(), emb.data(), dense.data()}, &g, o.probs.data());
    EXPECT_TRUE(loss.ok()) << loss.status();
    o.loss = loss.value_or(0);
    return o;
  };
  const Out a = run(*cuda_model), b = run(*cpu_model);
  EXPECT_NEAR(a.loss, b.loss, 1e-5 * (1 + std::fabs(b.loss)));
  ExpectClose(a.probs, b.probs, "probabilities");
  ExpectClose(a.wide, b.wide, "wide gradient");
  if (cpu_model->has_embedding()) ExpectClose(a.emb, b.emb, "embedding gradient");
  ExpectClose(a.dense, b.dense, "dense gradient");
  // The CUDA step is deterministic (segment reduce, no float atomics): bitwise equal when repeated.
  const Out again = run(*cuda_model);
  EXPECT_EQ(again.wide, a.wide);
  EXPECT_EQ(again.emb, a.emb);
}

INSTANTIATE_TEST_SUITE_P(AllModels, ModelGpuTest,
                         ::testing::Values(ModelConfig::LOGISTIC_REGRESSION, ModelConfig::FM, ModelConfig::DEEPFM,
                                           ModelConfig::WIDE_AND_DEEP, ModelConfig::DLRM),
                         [](const auto& info) { return ModelConfig::Type_Name(info.param); });

}  // namespace
}  // namespace kestrel
