#include "common/optimizer.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_format.h"

namespace kestrel {
namespace {

float Or(float value, float fallback) { return value == 0.0f ? fallback : value; }

// Learning rates outside this range are configuration mistakes, and at the edges (FTRL's beta / alpha)
// would overflow float.
constexpr float kMinLearningRate = 1e-12f;
constexpr float kMaxLearningRate = 1e4f;

class Sgd final : public Optimizer {
 public:
  Sgd(int dim, float lr) : Optimizer(dim), lr_(lr) {}
  int slot_floats() const override { return 0; }
  std::vector<SlotRun> slot_runs() const override { return {}; }
  void InitSlots(const float*, float*) const override {}
  void Apply(const float* g_in, float* w_in, float*) const override {
    // Locals and __restrict let the compiler vectorize (members could alias the row otherwise).
    const float* __restrict g = g_in;
    float* __restrict w = w_in;
    const float lr = lr_;
    for (int j = 0, n = dim_; j < n; ++j) w[j] -= lr * g[j];
  }

 private:
  const float lr_;
};

class Adagrad final : public Optimizer {
 public:
  Adagrad(int dim, float lr, float initial_accumulator, float eps)
      : Optimizer(dim), lr_(lr), initial_accumulator_(initial_accumulator), eps_(eps) {}
  int slot_floats() const override { return dim_; }
  std::vector<SlotRun> slot_runs() const override { return {{dim_, SlotRun::kNonNegative}}; }
  void InitSlots(const float*, float* acc) const override {
    for (int j = 0; j < dim_; ++j) acc[j] = initial_accumulator_;
  }
  void Apply(const float* g_in, float* w_in, float* acc_in) const override {
    const float* __restrict g = g_in;
    float* __restrict w = w_in;
    float* __restrict acc = acc_in;
    const float lr = lr_, eps = eps_;
    for (int j = 0, n = dim_; j < n; ++j) {
      acc[j] += g[j] * g[j];
      w[j] -= lr * g[j] / (std::sqrt(acc[j]) + eps);
    }
  }

 private:
  const float lr_, initial_accumulator_, eps_;
};

// One accumulator per row: acc += mean(g^2) over the row (summed in index order, then divided by dim, so the
// update is bitwise repeatable), then every value steps by lr * g / (sqrt(acc) + eps).
class RowwiseAdagrad final : public Optimizer {
 public:
  RowwiseAdagrad(int dim, float lr, float initial_accumulator, float eps)
      : Optimizer(dim), lr_(lr), initial_accumulator_(initial_accumulator), eps_(eps) {}
  int slot_floats() const override { return 1; }
  std::vector<SlotRun> slot_runs() const override { return {{1, SlotRun::kNonNegative}}; }
  void InitSlots(const float*, float* acc) const override { acc[0] = initial_accumulator_; }
  void Apply(const float* g_in, float* w_in, float* acc) const override {
    const float* __restrict g = g_in;
    float* __restrict w = w_in;
    float sum_sq = 0;
    for (int j = 0, n = dim_; j < n; ++j) sum_sq += g[j] * g[j];
    acc[0] += sum_sq / static_cast<float>(dim_);
    const float step = lr_ / (std::sqrt(acc[0]) + eps_);
    for (int j = 0, n = dim_; j < n; ++j) w[j] -= step * g[j];
  }

 private:
  const float lr_, initial_accumulator_, eps_;
};

class Adam final : public Optimizer {
 public:
  Adam(int dim, float lr, float beta1, float beta2, float eps)
      : Optimizer(dim), lr_(lr), beta1_(beta1), beta2_(beta2), eps_(eps) {}
  // m[dim], v[dim], then the row's step count stored as the bits of a uint32.
  int slot_floats() const override { return 2 * dim_ + 1; }
  std::vector<SlotRun> slot_runs() const override {
    return {{dim_, SlotRun::kSigned}, {dim_, SlotRun::kNonNegative}, {1, SlotRun::kBits}};
  }
  void InitSlots(const float*, float* slots) const override {
    std::memset(slots, 0, sizeof(float) * slot_floats());
  }
  void Apply(const float* g, float* w, float* slots) const override {
    float* m = slots;
    float* v = slots + dim_;
    uint32_t step;
    std::memcpy(&step, slots + 2 * dim_, sizeof(step));
    if (step != UINT32_MAX) ++step;  // saturates: bias correction is 1 long before
    std::memcpy(slots + 2 * dim_, &step, sizeof(step));
    const float c1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1_), step));
    const float c2 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta2_), step));
    const float b1 = beta1_, b2 = beta2_, lr = lr_, eps = eps_;
    float* __restrict mr = m;
    float* __restrict vr = v;
    float* __restrict wr = w;
    const float* __restrict gr = g;
    for (int j = 0, n = dim_; j < n; ++j) {
      mr[j] = b1 * mr[j] + (1.0f - b1) * gr[j];
      vr[j] = b2 * vr[j] + (1.0f - b2) * gr[j] * gr[j];
      const float m_hat = mr[j] / c1;
      const float v_hat = vr[j] / c2;
      wr[j] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }

 private:
  const float lr_, beta1_, beta2_, eps_;
};

class Ftrl final : public Optimizer {
 public:
  Ftrl(int dim, float alpha, float beta, float l1, float l2)
      : Optimizer(dim), alpha_(alpha), beta_(beta), l1_(l1), l2_(l2) {}
  // z[dim], n[dim].
  int slot_floats() const override { return 2 * dim_; }
  std::vector<SlotRun> slot_runs() const override { return {{dim_, SlotRun::kSigned}, {dim_, SlotRun::kNonNegative}}; }
  void InitSlots(const float* w, float* slots) const override {
    // With n = 0 the closed form gives w = -z / (beta/alpha + l2) when |z| > l1. Choosing z so that this
    // reproduces the initial value keeps a non-zero initializer meaningful (zeros give z = 0, the classic
    // start). Values with |z| <= l1 would be snapped to 0 at the first update, as FTRL intends.
    float* z = slots;
    float* n = slots + dim_;
    const float denom = beta_ / alpha_ + l2_;
    for (int j = 0; j < dim_; ++j) {
      z[j] = w[j] == 0.0f ? 0.0f : -(w[j] * denom + std::copysign(l1_, w[j]));
      n[j] = 0.0f;
    }
  }
  void Apply(const float* g, float* w, float* slots) const override {
    float* z = slots;
    float* n = slots + dim_;
    for (int j = 0; j < dim_; ++j) {
      // Squares in double: a large finite gradient must not overflow n to Inf (and z to NaN).
      const double n_new = static_cast<double>(n[j]) + static_cast<double>(g[j]) * g[j];
      const double sigma = (std::sqrt(n_new) - std::sqrt(static_cast<double>(n[j]))) / alpha_;
      z[j] = static_cast<float>(z[j] + g[j] - sigma * w[j]);
      n[j] = static_cast<float>(n_new);
      if (std::abs(z[j]) <= l1_) {
        w[j] = 0.0f;
      } else {
        const float sign = z[j] < 0 ? -1.0f : 1.0f;
        w[j] = -(z[j] - sign * l1_) / ((beta_ + std::sqrt(n[j])) / alpha_ + l2_);
      }
    }
  }

 private:
  const float alpha_, beta_, l1_, l2_;
};

class Assign final : public Optimizer {
 public:
  explicit Assign(int dim) : Optimizer(dim) {}
  int slot_floats() const override { return 0; }
  std::vector<SlotRun> slot_runs() const override { return {}; }
  void InitSlots(const float*, float*) const override {}
  void Apply(const float* g, float* w, float*) const override { std::memcpy(w, g, sizeof(float) * dim_); }
};

[[nodiscard]] absl::Status CheckPositive(const char* name, float v) {
  if (!(v > 0.0f) || !std::isfinite(v)) {
    return absl::InvalidArgumentError(absl::StrFormat("optimizer %s must be finite and > 0, got %g", name, v));
  }
  return absl::OkStatus();
}

[[nodiscard]] absl::Status CheckNonNegative(const char* name, float v) {
  if (!(v >= 0.0f) || !std::isfinite(v)) {
    return absl::InvalidArgumentError(absl::StrFormat("optimizer %s must be finite and >= 0, got %g", name, v));
  }
  return absl::OkStatus();
}

[[nodiscard]] absl::Status CheckDecay(const char* name, float v) {
  if (!(v > 0.0f && v < 1.0f)) {
    return absl::InvalidArgumentError(absl::StrFormat("optimizer %s must be in (0, 1), got %g", name, v));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const OptimizerConfig& c, int dim) {
  if (dim < 1) return absl::InvalidArgumentError(absl::StrFormat("optimizer dim must be >= 1, got %d", dim));
  if (c.type() == OptimizerConfig::ASSIGN) return std::unique_ptr<Optimizer>(new Assign(dim));  // no fields
  const float lr = Or(c.learning_rate(), 0.01f);
  absl::Status s = CheckPositive("learning_rate", lr);
  if (!s.ok()) return s;
  if (lr < kMinLearningRate || lr > kMaxLearningRate) {
    return absl::InvalidArgumentError(absl::StrFormat("optimizer learning_rate must be in [%g, %g], got %g",
                                                      kMinLearningRate, kMaxLearningRate, lr));
  }
  switch (c.type()) {
    case OptimizerConfig::SGD:
      return std::unique_ptr<Optimizer>(new Sgd(dim, lr));
    case OptimizerConfig::ADAGRAD:
    case OptimizerConfig::ROWWISE_ADAGRAD: {
      const float acc0 = Or(c.initial_accumulator(), 0.1f), eps = Or(c.epsilon(), 1e-8f);
      for (absl::Status st : {CheckPositive("initial_accumulator", acc0), CheckPositive("epsilon", eps)}) {
        if (!st.ok()) return st;
      }
      if (c.type() == OptimizerConfig::ROWWISE_ADAGRAD) {
        return std::unique_ptr<Optimizer>(new RowwiseAdagrad(dim, lr, acc0, eps));
      }
      return std::unique_ptr<Optimizer>(new Adagrad(dim, lr, acc0, eps));
    }
    case OptimizerConfig::ADAM: {
      const float b1 = Or(c.beta1(), 0.9f), b2 = Or(c.beta2(), 0.999f), eps = Or(c.epsilon(), 1e-8f);
      for (absl::Status st : {CheckDecay("beta1", b1), CheckDecay("beta2", b2), CheckPositive("epsilon", eps)}) {
        if (!st.ok()) return st;
      }
      return std::unique_ptr<Optimizer>(new Adam(dim, lr, b1, b2, eps));
    }
    case OptimizerConfig::FTRL: {
      const float beta = Or(c.ftrl_beta(), 1.0f);
      for (absl::Status st : {CheckPositive("ftrl_beta", beta), CheckNonNegative("l1", c.l1()),
                              CheckNonNegative("l2", c.l2())}) {
        if (!st.ok()) return st;
      }
      return std::unique_ptr<Optimizer>(new Ftrl(dim, lr, beta, c.l1(), c.l2()));
    }
    default:
      return absl::InvalidArgumentError(absl::StrFormat("unknown optimizer type %d", c.type()));
  }
}

}  // namespace kestrel
