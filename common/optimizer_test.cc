#include "common/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "proto/table.pb.h"

namespace kestrel {
namespace {

using Vec = std::vector<double>;
using Grads = std::vector<Vec>;

// Three steps of gradients for a dim-3 row: mixed signs and magnitudes, one zero entry.
const Grads kGrads = {{0.5, 0.1, -1.0}, {0.4, 0.1, 2.0}, {-0.2, 0.0, -0.5}};

OptimizerConfig Config(OptimizerConfig::Type type, float learning_rate = 0) {
  OptimizerConfig c;
  c.set_type(type);
  c.set_learning_rate(learning_rate);
  return c;
}

std::unique_ptr<Optimizer> MustCreate(const OptimizerConfig& config, int dim) {
  auto opt = Optimizer::Create(config, dim);
  EXPECT_TRUE(opt.ok()) << opt.status();
  return opt.ok() ? *std::move(opt) : nullptr;
}

std::vector<float> ToFloats(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

// A row as the table stores it: values and optimizer state.
struct Row {
  std::vector<float> w;
  std::vector<float> slots;
};

Row NewRow(const Optimizer& opt, const Vec& w0) {
  Row row{ToFloats(w0), std::vector<float>(opt.slot_floats(), std::numeric_limits<float>::quiet_NaN())};
  opt.InitSlots(row.w.data(), row.slots.data());
  return row;
}

void ApplyAll(const Optimizer& opt, const Grads& grads, Row* row) {
  for (const Vec& g : grads) opt.Apply(ToFloats(g).data(), row->w.data(), row->slots.data());
}

Row RunSteps(const Optimizer& opt, const Vec& w0, const Grads& grads) {
  Row row = NewRow(opt, w0);
  ApplyAll(opt, grads, &row);
  return row;
}

// ~1e-6 relative, with a small absolute floor for values near 0.
void ExpectClose(const float* actual, const Vec& expected, const char* what) {
  for (size_t j = 0; j < expected.size(); ++j) {
    EXPECT_NEAR(actual[j], expected[j], 1e-6 * std::abs(expected[j]) + 1e-7) << what << "[" << j << "]";
  }
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

void ExpectInvalid(const OptimizerConfig& config, int dim = 3) {
  EXPECT_EQ(Optimizer::Create(config, dim).status().code(), absl::StatusCode::kInvalidArgument)
      << config.ShortDebugString() << " dim " << dim;
}

// ---- Textbook reference implementations, in double precision. ----

Vec RefSgd(Vec w, const Grads& grads, double lr) {
  for (const Vec& g : grads) {
    for (size_t j = 0; j < w.size(); ++j) w[j] = w[j] - lr * g[j];
  }
  return w;
}

struct AdagradState {
  Vec w, acc;
};
AdagradState RefAdagrad(Vec w, const Grads& grads, double lr, double acc0, double eps) {
  Vec acc(w.size(), acc0);
  for (const Vec& g : grads) {
    for (size_t j = 0; j < w.size(); ++j) {
      acc[j] = acc[j] + g[j] * g[j];
      w[j] = w[j] - lr * g[j] / (std::sqrt(acc[j]) + eps);
    }
  }
  return {w, acc};
}

// Kingma & Ba, Algorithm 1.
struct AdamState {
  Vec w, m, v;
};
AdamState RefAdam(Vec w, const Grads& grads, double lr, double beta1, double beta2, double eps) {
  Vec m(w.size(), 0.0), v(w.size(), 0.0);
  int t = 0;
  for (const Vec& g : grads) {
    ++t;
    for (size_t j = 0; j < w.size(); ++j) {
      m[j] = beta1 * m[j] + (1 - beta1) * g[j];
      v[j] = beta2 * v[j] + (1 - beta2) * g[j] * g[j];
      const double m_hat = m[j] / (1 - std::pow(beta1, t));
      const double v_hat = v[j] / (1 - std::pow(beta2, t));
      w[j] = w[j] - lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
  return {w, m, v};
}

// McMahan et al. 2013, Algorithm 1 (per coordinate), from the given w, z, n.
struct FtrlState {
  Vec w, z, n;
};
FtrlState RefFtrl(FtrlState s, const Grads& grads, double alpha, double beta, double l1, double l2) {
  for (const Vec& g : grads) {
    for (size_t j = 0; j < s.w.size(); ++j) {
      const double sigma = (std::sqrt(s.n[j] + g[j] * g[j]) - std::sqrt(s.n[j])) / alpha;
      s.z[j] = s.z[j] + g[j] - sigma * s.w[j];
      s.n[j] = s.n[j] + g[j] * g[j];
      if (std::abs(s.z[j]) <= l1) {
        s.w[j] = 0;
      } else {
        const double sign = s.z[j] < 0 ? -1.0 : 1.0;
        s.w[j] = -(s.z[j] - sign * l1) / ((beta + std::sqrt(s.n[j])) / alpha + l2);
      }
    }
  }
  return s;
}

OptimizerConfig FtrlConfig(float alpha, float beta, float l1, float l2) {
  OptimizerConfig c = Config(OptimizerConfig::FTRL, alpha);
  c.set_ftrl_beta(beta);
  c.set_l1(l1);
  c.set_l2(l2);
  return c;
}

// ---- Tests. ----

TEST(OptimizerTest, SlotFloatsPerOptimizer) {
  for (int dim : {1, 3, 16}) {
    EXPECT_EQ(MustCreate(Config(OptimizerConfig::SGD), dim)->slot_floats(), 0);
    EXPECT_EQ(MustCreate(Config(OptimizerConfig::ADAGRAD), dim)->slot_floats(), dim);
    EXPECT_EQ(MustCreate(Config(OptimizerConfig::ADAM), dim)->slot_floats(), 2 * dim + 1);
    EXPECT_EQ(MustCreate(Config(OptimizerConfig::FTRL), dim)->slot_floats(), 2 * dim);
    EXPECT_EQ(MustCreate(Config(OptimizerConfig::ASSIGN), dim)->slot_floats(), 0);
    EXPECT_EQ(MustCreate(Config(OptimizerConfig::ROWWISE_ADAGRAD), dim)->slot_floats(), 1);
    EXPECT_EQ(MustCreate(Config(OptimizerConfig::FTRL), dim)->dim(), dim);
  }
}

TEST(OptimizerTest, SgdMatchesReference) {
  const Vec w0 = {1.0, -2.0, 0.5};
  const auto opt = MustCreate(Config(OptimizerConfig::SGD, 0.5f), 3);
  const Row row = RunSteps(*opt, w0, kGrads);
  ExpectClose(row.w.data(), RefSgd(w0, kGrads, 0.5), "w");
}

TEST(OptimizerTest, AdagradMatchesReference) {
  const Vec w0 = {1.0, -2.0, 0.5};
  OptimizerConfig c = Config(OptimizerConfig::ADAGRAD, 0.1f);
  c.set_initial_accumulator(0.5f);
  c.set_epsilon(0.01f);
  const auto opt = MustCreate(c, 3);
  EXPECT_EQ(NewRow(*opt, w0).slots, std::vector<float>(3, 0.5f));
  const Row row = RunSteps(*opt, w0, kGrads);
  const AdagradState ref = RefAdagrad(w0, kGrads, 0.1, 0.5, static_cast<double>(0.01f));
  ExpectClose(row.w.data(), ref.w, "w");
  ExpectClose(row.slots.data(), ref.acc, "acc");
}

// Row-wise Adagrad against a double-precision reference: one accumulator, grown by the row's mean squared
// gradient, scales every value's step.
TEST(OptimizerTest, RowwiseAdagradMatchesReference) {
  const Vec w0 = {1.0, -2.0, 0.5};
  OptimizerConfig c = Config(OptimizerConfig::ROWWISE_ADAGRAD, 0.1f);
  c.set_initial_accumulator(0.5f);
  c.set_epsilon(0.01f);
  const auto opt = MustCreate(c, 3);
  EXPECT_EQ(NewRow(*opt, w0).slots, std::vector<float>(1, 0.5f));
  const Row row = RunSteps(*opt, w0, kGrads);
  Vec w = w0;
  double acc = 0.5;
  for (const Vec& g : kGrads) {
    double sum_sq = 0;
    for (double x : g) sum_sq += x * x;
    acc += sum_sq / 3;
    for (size_t j = 0; j < w.size(); ++j) w[j] -= 0.1 * g[j] / (std::sqrt(acc) + static_cast<double>(0.01f));
  }
  ExpectClose(row.w.data(), w, "w");
  EXPECT_NEAR(row.slots[0], acc, 1e-5 * acc);
}

TEST(OptimizerTest, RowwiseAdagradRefusesWhatAdagradRefuses) {
  for (const auto& [field, value] : std::vector<std::pair<const char*, float>>{{"initial_accumulator", -1.0f},
                                                                               {"epsilon", -1e-8f}}) {
    OptimizerConfig c = Config(OptimizerConfig::ROWWISE_ADAGRAD, 0.1f);
    if (std::string(field) == "initial_accumulator") c.set_initial_accumulator(value);
    else c.set_epsilon(value);
    absl::StatusOr<std::unique_ptr<Optimizer>> opt = Optimizer::Create(c, 4);
    EXPECT_EQ(opt.status().code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(opt.status().message().find(field), std::string::npos) << opt.status();
  }
}

TEST(OptimizerTest, AdamMatchesReference) {
  const Vec w0 = {1.0, -2.0, 0.5};
  OptimizerConfig c = Config(OptimizerConfig::ADAM, 0.05f);
  c.set_beta1(0.8f);
  c.set_beta2(0.95f);
  c.set_epsilon(1e-3f);
  const auto opt = MustCreate(c, 3);
  EXPECT_EQ(NewRow(*opt, w0).slots, std::vector<float>(7, 0.0f));
  const Row row = RunSteps(*opt, w0, kGrads);
  // The reference uses the float hyper-parameters the optimizer actually holds.
  const double lr = 0.05f, b1 = 0.8f, b2 = 0.95f, eps = 1e-3f;
  const AdamState ref = RefAdam(w0, kGrads, lr, b1, b2, eps);
  ExpectClose(row.w.data(), ref.w, "w");
  ExpectClose(row.slots.data(), ref.m, "m");
  ExpectClose(row.slots.data() + 3, ref.v, "v");
}

TEST(OptimizerTest, AdamStepCountIsPerRow) {
  OptimizerConfig c = Config(OptimizerConfig::ADAM, 0.05f);
  c.set_beta1(0.8f);
  c.set_beta2(0.95f);
  c.set_epsilon(1e-3f);
  const auto opt = MustCreate(c, 3);
  const Vec w0 = {1.0, -2.0, 0.5};
  Row a = NewRow(*opt, w0), b = NewRow(*opt, w0);
  ApplyAll(*opt, kGrads, &a);
  ApplyAll(*opt, {kGrads[0]}, &b);  // b's first step must use t = 1 although a is at t = 3
  const double lr = 0.05f, b1 = 0.8f, b2 = 0.95f, eps = 1e-3f;
  ExpectClose(b.w.data(), RefAdam(w0, {kGrads[0]}, lr, b1, b2, eps).w, "b.w after 1 step");
  ApplyAll(*opt, {kGrads[1], kGrads[2]}, &b);
  EXPECT_TRUE(SameBits(a.w, b.w));
  EXPECT_TRUE(SameBits(a.slots, b.slots));
}

TEST(OptimizerTest, FtrlMatchesReference) {
  const double alpha = 0.5f, beta = 1.0f, l1 = 0.3f, l2 = 0.2f;
  const auto opt = MustCreate(FtrlConfig(0.5f, 1.0f, 0.3f, 0.2f), 3);
  const Vec zeros(3, 0.0);
  // The classic start: w = z = n = 0.
  EXPECT_EQ(NewRow(*opt, zeros).slots, std::vector<float>(6, 0.0f));
  const Grads grads = {{0.5, 0.1, -1.0}, {0.4, 0.1, 2.0}, {-0.2, 0.05, -0.5}, {1.5, -0.3, 0.25}};
  const Row row = RunSteps(*opt, zeros, grads);
  const FtrlState ref = RefFtrl({zeros, zeros, zeros}, grads, alpha, beta, l1, l2);
  // The gradients were chosen so that both branches occur: coordinate 1 stays inside the L1 ball.
  ASSERT_EQ(ref.w[1], 0.0);
  ASSERT_NE(ref.w[0], 0.0);
  ASSERT_NE(ref.w[2], 0.0);
  ExpectClose(row.w.data(), ref.w, "w");
  ExpectClose(row.slots.data(), ref.z, "z");
  ExpectClose(row.slots.data() + 3, ref.n, "n");
  EXPECT_EQ(row.w[1], 0.0f);
}

TEST(OptimizerTest, FtrlMatchesReferenceStepByStep) {
  const double alpha = 0.5f, beta = 1.0f, l1 = 0.3f, l2 = 0.2f;
  const auto opt = MustCreate(FtrlConfig(0.5f, 1.0f, 0.3f, 0.2f), 3);
  const Vec zeros(3, 0.0);
  Row row = NewRow(*opt, zeros);
  FtrlState ref{zeros, zeros, zeros};
  for (size_t step = 0; step < kGrads.size(); ++step) {
    SCOPED_TRACE(step);
    ApplyAll(*opt, {kGrads[step]}, &row);
    ref = RefFtrl(ref, {kGrads[step]}, alpha, beta, l1, l2);
    ExpectClose(row.w.data(), ref.w, "w");
  }
}

TEST(OptimizerTest, FtrlLargeL1KeepsWeightsExactlyZero) {
  const auto opt = MustCreate(FtrlConfig(0.5f, 1.0f, 100.0f, 0.2f), 3);
  Row row = NewRow(*opt, Vec(3, 0.0));
  for (int i = 0; i < 10; ++i) ApplyAll(*opt, kGrads, &row);
  EXPECT_EQ(row.w, std::vector<float>(3, 0.0f));
  // The state still accumulates.
  EXPECT_GT(row.slots[3], 0.0f);
  EXPECT_NE(row.slots[0], 0.0f);
}

TEST(OptimizerTest, FtrlInitSlotsReproducesNonZeroInitialValue) {
  // InitSlots documents that it picks z (with n = 0) so that the closed form gives back the initial w: a
  // zero gradient leaves w unchanged, and later steps continue FTRL from that z.
  const double alpha = 0.5f, beta = 1.0f, l1 = 0.3f, l2 = 0.2f;
  const auto opt = MustCreate(FtrlConfig(0.5f, 1.0f, 0.3f, 0.2f), 3);
  const Vec w0 = {0.3, -0.7, 0.0};
  Row row = NewRow(*opt, w0);
  const double denom = beta / alpha + l2;
  const Vec z0 = {-(static_cast<double>(0.3f) * denom + l1), -(static_cast<double>(-0.7f) * denom - l1), 0.0};
  ExpectClose(row.slots.data(), z0, "z0");
  ExpectClose(row.slots.data() + 3, Vec(3, 0.0), "n0");

  ApplyAll(*opt, {Vec(3, 0.0)}, &row);
  ExpectClose(row.w.data(), {0.3f, -0.7f, 0.0}, "w after a zero gradient");

  ApplyAll(*opt, kGrads, &row);
  const FtrlState ref = RefFtrl({{0.3f, -0.7f, 0.0}, z0, Vec(3, 0.0)}, kGrads, alpha, beta, l1, l2);
  ExpectClose(row.w.data(), ref.w, "w");
  ExpectClose(row.slots.data(), ref.z, "z");
}

TEST(OptimizerTest, AssignStoresThePushedValueBitForBit) {
  const auto opt = MustCreate(Config(OptimizerConfig::ASSIGN), 6);
  // Values that arithmetic would disturb: -0, a subnormal, the gradient bounds, and one that 0 + x or x - w
  // rounds differently.
  const std::vector<float> pushed = {-0.0f, 1e-40f, 1e15f, -1e15f, 0.1f, 3.14159274f};
  std::vector<float> w = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  std::vector<float> slots;  // none
  opt->InitSlots(w.data(), slots.data());
  opt->Apply(pushed.data(), w.data(), slots.data());
  EXPECT_TRUE(SameBits(w, pushed));
  // A second push replaces the first.
  const std::vector<float> again = {7.0f, -0.5f, 0.0f, 1e-3f, -2.0f, 0.25f};
  opt->Apply(again.data(), w.data(), slots.data());
  EXPECT_TRUE(SameBits(w, again));
}

TEST(OptimizerTest, AssignIgnoresEveryHyperParameter) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  OptimizerConfig c = Config(OptimizerConfig::ASSIGN, -1.0f);  // a learning rate other types refuse
  c.set_initial_accumulator(nan);
  c.set_epsilon(-1.0f);
  c.set_beta1(2.0f);
  c.set_beta2(nan);
  c.set_ftrl_beta(-3.0f);
  c.set_l1(-1.0f);
  c.set_l2(std::numeric_limits<float>::infinity());
  const auto opt = MustCreate(c, 2);
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(opt->slot_floats(), 0);
  const std::vector<float> pushed = {0.5f, -0.25f};
  std::vector<float> w = {0.0f, 0.0f};
  opt->Apply(pushed.data(), w.data(), nullptr);
  EXPECT_TRUE(SameBits(w, pushed));
  ExpectInvalid(Config(OptimizerConfig::ASSIGN), /*dim=*/0);
}

TEST(OptimizerTest, ZeroFieldsTakeDocumentedDefaults) {
  const Vec w0 = {1.0, -2.0, 0.5};
  // SGD: lr 0.01.
  {
    const Row row = RunSteps(*MustCreate(Config(OptimizerConfig::SGD), 3), w0, kGrads);
    ExpectClose(row.w.data(), RefSgd(w0, kGrads, 0.01f), "sgd w");
  }
  // Adagrad: lr 0.01, initial_accumulator 0.1, epsilon 1e-8.
  {
    const Row row = RunSteps(*MustCreate(Config(OptimizerConfig::ADAGRAD), 3), w0, kGrads);
    const AdagradState ref = RefAdagrad(w0, kGrads, 0.01f, 0.1f, 1e-8f);
    ExpectClose(row.w.data(), ref.w, "adagrad w");
    ExpectClose(row.slots.data(), ref.acc, "adagrad acc");
  }
  // Adam: lr 0.01, beta1 0.9, beta2 0.999, epsilon 1e-8.
  {
    const Row row = RunSteps(*MustCreate(Config(OptimizerConfig::ADAM), 3), w0, kGrads);
    ExpectClose(row.w.data(), RefAdam(w0, kGrads, 0.01f, 0.9f, 0.999f, 1e-8f).w, "adam w");
  }
  // FTRL: alpha 0.01, beta 1, l1 = l2 = 0.
  {
    const Vec zeros(3, 0.0);
    const Row row = RunSteps(*MustCreate(Config(OptimizerConfig::FTRL), 3), zeros, kGrads);
    ExpectClose(row.w.data(), RefFtrl({zeros, zeros, zeros}, kGrads, 0.01f, 1.0, 0.0, 0.0).w, "ftrl w");
  }
  // Explicit defaults give bit-identical results.
  OptimizerConfig adam = Config(OptimizerConfig::ADAM, 0.01f);
  adam.set_beta1(0.9f);
  adam.set_beta2(0.999f);
  adam.set_epsilon(1e-8f);
  EXPECT_TRUE(SameBits(RunSteps(*MustCreate(adam, 3), w0, kGrads).w,
                       RunSteps(*MustCreate(Config(OptimizerConfig::ADAM), 3), w0, kGrads).w));
}

TEST(OptimizerTest, CreateRejectsInvalidHyperParameters) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (auto type : {OptimizerConfig::SGD, OptimizerConfig::ADAGRAD, OptimizerConfig::ADAM, OptimizerConfig::FTRL}) {
    ExpectInvalid(Config(type, -0.1f));
    ExpectInvalid(Config(type, inf));
    ExpectInvalid(Config(type, nan));
    ExpectInvalid(Config(type, 0.1f), /*dim=*/0);
  }
  for (float beta : {1.0f, 1.5f, -0.1f, nan}) {
    OptimizerConfig c = Config(OptimizerConfig::ADAM);
    c.set_beta1(beta);
    ExpectInvalid(c);
    c = Config(OptimizerConfig::ADAM);
    c.set_beta2(beta);
    ExpectInvalid(c);
  }
  for (float bad : {-1.0f, inf, nan}) {
    OptimizerConfig c = Config(OptimizerConfig::ADAM);
    c.set_epsilon(bad);
    ExpectInvalid(c);
    c = Config(OptimizerConfig::ADAGRAD);
    c.set_epsilon(bad);
    ExpectInvalid(c);
    c = Config(OptimizerConfig::ADAGRAD);
    c.set_initial_accumulator(bad);
    ExpectInvalid(c);
    ExpectInvalid(FtrlConfig(0.1f, bad, 0.0f, 0.0f));  // ftrl_beta
    ExpectInvalid(FtrlConfig(0.1f, 1.0f, bad, 0.0f));  // l1
    ExpectInvalid(FtrlConfig(0.1f, 1.0f, 0.0f, bad));  // l2
  }
  OptimizerConfig unknown;
  unknown.set_type(static_cast<OptimizerConfig::Type>(99));
  ExpectInvalid(unknown);
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

TEST(OptimizerRangeTest, FtrlStaysFiniteUnderLargeGradients) {
  OptimizerConfig c;
  c.set_type(OptimizerConfig::FTRL);
  c.set_learning_rate(0.1f);
  c.set_l1(0.01f);
  auto opt = Optimizer::Create(c, 2);
  ASSERT_TRUE(opt.ok());
  float w[2] = {0, 0}, slots[4];
  (*opt)->InitSlots(w, slots);
  const float g[2] = {1e15f, -1e15f};  // g*g overflows float
  for (int step = 0; step < 3; ++step) (*opt)->Apply(g, w, slots);
  for (float v : w) EXPECT_TRUE(std::isfinite(v)) << v;
  for (float v : slots) EXPECT_TRUE(std::isfinite(v)) << v;
}

TEST(OptimizerRangeTest, RejectsLearningRatesOutOfRange) {
  for (float lr : {1e5f, 1e-13f, 3e38f}) {
    OptimizerConfig c;
    c.set_type(OptimizerConfig::FTRL);
    c.set_learning_rate(lr);
    EXPECT_EQ(Optimizer::Create(c, 2).status().code(), absl::StatusCode::kInvalidArgument) << lr;
  }
}

}  // namespace
}  // namespace kestrel
