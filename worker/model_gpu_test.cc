// GPU test (tagged "gpu"): one whole training step (forward, backward, every gradient) of each model on the
// CUDA backend against the CPU backend, on a Criteo-shaped batch (single-valued, and jagged with pooled
// multi-valued fields and example weights), within 1e-5 (relative to 1 + |cpu|), and with TF32 matrix products
// within 1e-2. Skips where there is no GPU or the binary was built without CUDA.
#include <cmath>
#include <random>

#include "common/cuda_device.h"
#include "gtest/gtest.h"
#include "worker/compute/cpu_backend.h"
#include "worker/data/preset_examples.h"
#include "worker/compute/cuda_backend.h"
#include "worker/model.h"
#include "worker/synthetic_batch.h"

namespace kestrel {
namespace {

constexpr int kDenseDim = 13;

void ExpectClose(const std::vector<float>& cuda, const std::vector<float>& cpu, const char* what,
                 double tolerance) {
  ASSERT_EQ(cuda.size(), cpu.size());
  int bad = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (!(std::fabs(cuda[i] - cpu[i]) <= tolerance * (1 + std::fabs(cpu[i]))) && ++bad <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: cuda " << cuda[i] << " cpu " << cpu[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

// One training step of `config` on a Criteo-shaped `batch`, CUDA against CPU (gradients and probabilities
// within `tolerance` relative to 1 + |cpu|, the loss within `loss_tolerance`), and the CUDA step repeated bit for
// bit.
void CompareStep(const ModelConfig& config, const PreparedBatch& batch, double tolerance, double loss_tolerance = 1e-5) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no GPU here (" << DescribeCudaDevices() << ")";
  absl::StatusOr<std::unique_ptr<Backend>> cuda = NewCudaBackend(0);
  if (!cuda.ok()) GTEST_SKIP() << "no CUDA backend: " << cuda.status();
  std::unique_ptr<Backend> cpu = NewCpuBackend();
  auto cpu_model = *Model::Create(config, kCriteoFields, kDenseDim, cpu.get());
  auto cuda_model = *Model::Create(config, kCriteoFields, kDenseDim, cuda->get());
  const int64_t examples = batch.batch.size;
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
    o.probs.resize(examples);
    ModelGrads g{o.wide.data(), o.emb.data(), o.dense.data()};
    absl::StatusOr<double> loss = m.Step(batch, {wide.data(), emb.data(), dense.data()}, &g, o.probs.data());
    EXPECT_TRUE(loss.ok()) << loss.status();
    o.loss = loss.value_or(0);
    return o;
  };
  const Out a = run(*cuda_model), b = run(*cpu_model);
  EXPECT_NEAR(a.loss, b.loss, loss_tolerance * (1 + std::fabs(b.loss)));
  ExpectClose(a.probs, b.probs, "probabilities", tolerance);
  ExpectClose(a.wide, b.wide, "wide gradient", tolerance);
  if (cpu_model->has_embedding()) ExpectClose(a.emb, b.emb, "embedding gradient", tolerance);
  ExpectClose(a.dense, b.dense, "dense gradient", tolerance);
  // The CUDA step is deterministic (segment reduce, no float atomics): bitwise equal when repeated.
  const Out again = run(*cuda_model);
  EXPECT_EQ(again.wide, a.wide);
  EXPECT_EQ(again.emb, a.emb);
}

class ModelGpuTest : public ::testing::TestWithParam<ModelConfig::Type> {};

TEST_P(ModelGpuTest, TrainingStepMatchesTheCpuBackend) {
  ModelConfig config;
  config.set_type(GetParam());
  CompareStep(config, SyntheticCriteoBatch(512, 500.0), 1e-5);
}

TEST_P(ModelGpuTest, JaggedWeightedTrainingStepMatchesTheCpuBackend) {
  ModelConfig config;
  config.set_type(GetParam());
  CompareStep(config, SyntheticMultiValuedBatch(512, 500.0), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(AllModels, ModelGpuTest,
                         ::testing::Values(ModelConfig::LOGISTIC_REGRESSION, ModelConfig::FM, ModelConfig::DEEPFM,
                                           ModelConfig::WIDE_AND_DEEP, ModelConfig::DLRM),
                         [](const auto& info) { return ModelConfig::Type_Name(info.param); });

// The sizes users run: batch 4096, embedding dim 16 with MLP 256-128 and dim 64 with MLP 1024-512-256. The
// MLP's sums run over up to 4096 examples and 2509 inputs, in a different order in cuBLAS and oneDNN: 1e-4.
class ModelGpuRealisticTest : public ::testing::TestWithParam<std::tuple<ModelConfig::Type, int>> {};

TEST_P(ModelGpuRealisticTest, TrainingStepMatchesTheCpuBackend) {
  ModelConfig config;
  config.set_type(std::get<0>(GetParam()));
  const int dim = std::get<1>(GetParam());
  config.set_embedding_dim(dim);
  for (int h : dim == 16 ? std::vector<int>{256, 128} : std::vector<int>{1024, 512, 256}) config.add_hidden(h);
  CompareStep(config, SyntheticCriteoBatch(4096, 500.0), 1e-4);
}

// model.gemm_precision GEMM_TF32: the MLP's products on tensor cores from TF32-rounded inputs (10-bit mantissa):
// within 1e-2 of the CPU's fp32 at the realistic size, and still repeatable bit for bit.
TEST(ModelGpuTf32Test, TrainingStepNearTheCpuBackendAndRepeatable) {
  ModelConfig config;
  config.set_type(ModelConfig::DEEPFM);
  config.set_embedding_dim(16);
  config.add_hidden(256);
  config.add_hidden(128);
  config.set_gemm_precision(ModelConfig::GEMM_TF32);
  CompareStep(config, SyntheticCriteoBatch(4096, 500.0), 1e-2, 1e-3);
}

INSTANTIATE_TEST_SUITE_P(RealisticSizes, ModelGpuRealisticTest,
                         ::testing::Combine(::testing::Values(ModelConfig::DEEPFM, ModelConfig::DLRM),
                                            ::testing::Values(16, 64)),
                         [](const auto& info) {
                           return ModelConfig::Type_Name(std::get<0>(info.param)) + "_dim" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace kestrel
