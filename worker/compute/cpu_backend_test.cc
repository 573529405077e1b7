// Every op of the CPU backend (and so every kernel_math.h function) against a naive reference written
// independently here, on random inputs.
#include "worker/compute/cpu_backend.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kestrel {
namespace {

std::vector<float> Random(size_t n, std::mt19937* rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(*rng);
  return v;
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, double tol = 1e-5) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << "element " << i;
  }
}

class CpuBackendTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> backend_ = NewCpuBackend();
  std::mt19937 rng_{7};
};

TEST_F(CpuBackendTest, GatherScalesRowsByValue) {
  const int dim = 3, rows = 4, count = 6;
  std::vector<float> table = Random(rows * dim, &rng_);
  std::vector<uint32_t> index = {0, 3, 3, 1, 2, 0};
  std::vector<float> values = {1, 0.5f, 1, 0, 2, 1};
  std::vector<float> x(count * dim);
  ASSERT_TRUE(backend_->Gather(table.data(), dim, index.data(), values.data(), count, x.data()).ok());
  std::vector<double> want;
  for (int p = 0; p < count; ++p) {
    for (int d = 0; d < dim; ++d) want.push_back(double{values[p]} * table[index[p] * dim + d]);
  }
  ExpectNear(x, want);
}

TEST_F(CpuBackendTest, FieldSumAndFmMatchThePairwiseDefinition) {
  const int n = 5, fields = 4, dim = 3;
  std::vector<float> x = Random(n * fields * dim, &rng_);
  std::vector<float> sum(n * dim), fm(n);
  ASSERT_TRUE(backend_->FieldSum(x.data(), n, fields, dim, sum.data()).ok());
  ASSERT_TRUE(backend_->FmForward(x.data(), sum.data(), n, fields, dim, fm.data()).ok());
  std::vector<double> want_sum, want_fm;
  for (int e = 0; e < n; ++e) {
    for (int d = 0; d < dim; ++d) {
      double s = 0;
      for (int f = 0; f < fields; ++f) s += x[(e * fields + f) * dim + d];
      want_sum.push_back(s);
    }
    double pairs = 0;  // sum over i < j of <x_i, x_j>
    for (int i = 0; i < fields; ++i) {
      for (int j = i + 1; j < fields; ++j) {
        for (int d = 0; d < dim; ++d) pairs += double{x[(e * fields + i) * dim + d]} * x[(e * fields + j) * dim + d];
      }
    }
    want_fm.push_back(pairs);
  }
  ExpectNear(sum, want_sum);
  ExpectNear(fm, want_fm, 1e-4);

  // Backward: d(fm)/dx[n,f,d] = sum_{j != f} x[n,j,d], times g[n].
  std::vector<float> g = Random(n, &rng_), dx(n * fields * dim);
  ASSERT_TRUE(backend_->FmBackward(x.data(), sum.data(), g.data(), n, fields, dim, dx.data()).ok());
  std::vector<double> want_dx;
  for (int e = 0; e < n; ++e) {
    for (int f = 0; f < fields; ++f) {
      for (int d = 0; d < dim; ++d) {
        double s = 0;
        for (int j = 0; j < fields; ++j) {
          if (j != f) s += x[(e * fields + j) * dim + d];
        }
        want_dx.push_back(g[e] * s);
      }
    }
  }
  ExpectNear(dx, want_dx, 1e-4);
}

TEST_F(CpuBackendTest, DotInteractionIsEveryPairsDotProductAndItsGradient) {
  const int n = 3, m = 5, dim = 4, pairs = m * (m - 1) / 2;
  std::vector<float> v = Random(n * m * dim, &rng_);
  std::vector<float> z(n * pairs);
  ASSERT_TRUE(backend_->DotInteraction(v.data(), n, m, dim, z.data()).ok());
  std::vector<double> want;
  for (int e = 0; e < n; ++e) {
    for (int i = 0; i < m; ++i) {
      for (int j = i + 1; j < m; ++j) {
        double s = 0;
        for (int d = 0; d < dim; ++d) s += double{v[(e * m + i) * dim + d]} * v[(e * m + j) * dim + d];
        want.push_back(s);
      }
    }
  }
  ExpectNear(z, want);
  // Backward of L = sum_k dz[k] z[k]: dL/dv[i] = sum_{j != i} dz[pair(i, j)] v[j].
  std::vector<float> dz = Random(n * pairs, &rng_), dv(n * m * dim);
  ASSERT_TRUE(backend_->DotInteractionBackward(v.data(), dz.data(), n, m, dim, dv.data()).ok());
  std::vector<double> want_dv(n * m * dim, 0.0);
  for (int e = 0; e < n; ++e) {
    int k = 0;
    for (int i = 0; i < m; ++i) {
      for (int j = i + 1; j < m; ++j, ++k) {
        for (int d = 0; d < dim; ++d) {
          want_dv[(e * m + i) * dim + d] += double{dz[e * pairs + k]} * v[(e * m + j) * dim + d];
          want_dv[(e * m + j) * dim + d] += double{dz[e * pairs + k]} * v[(e * m + i) * dim + d];
        }
      }
    }
  }
  ExpectNear(dv, want_dv);
}

TEST_F(CpuBackendTest, GemmAllTransposes) {
  const int m = 5, n = 4, k = 7;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      std::vector<float> a = Random(m * k, &rng_), b = Random(k * n, &rng_), c = Random(m * n, &rng_);
      const std::vector<float> c0 = c;
      ASSERT_TRUE(backend_->Gemm(ta, tb, m, n, k, 0.5f, a.data(), b.data(), 2.0f, c.data()).ok());
      std::vector<double> want;
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          double s = 0;
          for (int t = 0; t < k; ++t) {
            const double av = ta ? a[t * m + i] : a[i * k + t];
            const double bv = tb ? b[j * k + t] : b[t * n + j];
            s += av * bv;
          }
          want.push_back(0.5 * s + 2.0 * c0[i * n + j]);
        }
      }
      ExpectNear(c, want, 1e-5);
      // beta = 0 ignores C's old contents, even NaN.
      std::fill(c.begin(), c.end(), std::nanf(""));
      ASSERT_TRUE(backend_->Gemm(ta, tb, m, n, k, 1.0f, a.data(), b.data(), 0.0f, c.data()).ok());
      for (float v : c) EXPECT_TRUE(std::isfinite(v)) << "ta=" << ta << " tb=" << tb;
    }
  }
}

TEST_F(CpuBackendTest, BiasReluColumnSumAndCopyBlock) {
  const int rows = 3, cols = 4;
  std::vector<float> x = Random(rows * cols, &rng_), bias = Random(cols, &rng_);
  std::vector<float> y = x;
  ASSERT_TRUE(backend_->BiasActivation(y.data(), bias.data(), rows, cols, /*relu=*/true).ok());
  std::vector<double> want;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) want.push_back(std::max(0.0, double{x[r * cols + c]} + bias[c]));
  }
  ExpectNear(y, want);
  std::vector<float> dy(rows * cols, 1.0f);
  ASSERT_TRUE(backend_->ReluBackward(y.data(), dy.data(), rows * cols).ok());
  for (int i = 0; i < rows * cols; ++i) EXPECT_EQ(dy[i], y[i] > 0 ? 1.0f : 0.0f);
  std::vector<float> colsum(cols);
  ASSERT_TRUE(backend_->ColumnSum(x.data(), rows, cols, colsum.data()).ok());
  for (int c = 0; c < cols; ++c) EXPECT_NEAR(colsum[c], x[c] + x[cols + c] + x[2 * cols + c], 1e-6);
  // Copy the middle two columns of x into a 3 x 5 block at column 1, then add them again.
  std::vector<float> dst(rows * 5, 0.0f);
  ASSERT_TRUE(backend_->CopyBlock(x.data() + 1, cols, dst.data() + 1, 5, rows, 2, false).ok());
  ASSERT_TRUE(backend_->CopyBlock(x.data() + 1, cols, dst.data() + 1, 5, rows, 2, true).ok());
  for (int r = 0; r < rows; ++r) {
    EXPECT_EQ(dst[r * 5 + 0], 0.0f);
    EXPECT_FLOAT_EQ(dst[r * 5 + 1], 2 * x[r * cols + 1]);
    EXPECT_FLOAT_EQ(dst[r * 5 + 2], 2 * x[r * cols + 2]);
    EXPECT_EQ(dst[r * 5 + 3], 0.0f);
  }
}

TEST_F(CpuBackendTest, LogitLossIsStableAndItsGradientIsPMinusY) {
  std::vector<float> wide = {0.5f, -200.0f, 200.0f, 0.0f};
  std::vector<float> deep = {0.25f, 0.0f, 0.0f, -1.0f};
  std::vector<float> labels = {1, 1, 0, 0};
  const float bias = 0.1f;
  std::vector<float> prob(4), loss(4), dlogit(4);
  ASSERT_TRUE(backend_->LogitLoss(&bias, wide.data(), nullptr, deep.data(), labels.data(), 4, 0.25f, prob.data(),
                                  loss.data(), dlogit.data())
                  .ok());
  for (int n = 0; n < 4; ++n) {
    const double z = bias + wide[n] + deep[n];
    const double p = 1 / (1 + std::exp(-z));
    const double want_loss = labels[n] == 1 ? std::log1p(std::exp(-z)) : std::log1p(std::exp(z));
    EXPECT_NEAR(prob[n], p, 1e-6);
    EXPECT_TRUE(std::isfinite(loss[n]));
    EXPECT_NEAR(loss[n], want_loss, 1e-5 * (1 + want_loss));
    EXPECT_NEAR(dlogit[n], 0.25 * (p - labels[n]), 1e-7);
  }
}

TEST_F(CpuBackendTest, SegmentSumAddsEachRowsPositionsInOrder) {
  const int dim = 2;
  // Positions 0..5 with unique rows {0, 2, 0, 1, 2, 2}: segments 0 -> {0, 2}, 1 -> {3}, 2 -> {1, 4, 5}.
  std::vector<uint32_t> offsets = {0, 2, 3, 6};
  std::vector<uint32_t> positions = {0, 2, 3, 1, 4, 5};
  std::vector<float> values = {1, 2, 1, 0.5f, 1, 3};
  std::vector<float> dx = Random(6 * dim, &rng_);
  std::vector<float> out(3 * dim);
  ASSERT_TRUE(
      backend_->SegmentSum(dx.data(), values.data(), offsets.data(), positions.data(), dim, 1, 3, out.data()).ok());
  const std::vector<std::vector<int>> segs = {{0, 2}, {3}, {1, 4, 5}};
  std::vector<double> want;
  for (const auto& seg : segs) {
    for (int d = 0; d < dim; ++d) {
      double s = 0;
      for (int p : seg) s += double{values[p]} * dx[p * dim + d];
      want.push_back(s);
    }
  }
  ExpectNear(out, want);

  // group = 3: positions 0-2 read dx row 0, positions 3-5 row 1.
  ASSERT_TRUE(
      backend_->SegmentSum(dx.data(), values.data(), offsets.data(), positions.data(), dim, 3, 3, out.data()).ok());
  want.clear();
  for (const auto& seg : segs) {
    for (int d = 0; d < dim; ++d) {
      double s = 0;
      for (int p : seg) s += double{values[p]} * dx[(p / 3) * dim + d];
      want.push_back(s);
    }
  }
  ExpectNear(out, want);
}

}  // namespace
}  // namespace kestrel
