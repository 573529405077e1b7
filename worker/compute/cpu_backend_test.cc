// Every op of the CPU backend (and so every kernel_math.h function) against a naive reference written
// independently here, on random inputs, for the reference mode and the oneDNN-backed backend at several thread
// counts; then every op of the oneDNN-backed backend against the reference mode at a realistic size (DeepFM with 39
// fields of dim 16, single-valued and jagged, MLP 256-128, 1024 examples): the element kernels bit for bit at
// any thread count, the GEMMs within float rounding, and every op bitwise repeatable.
#include "worker/compute/cpu_backend.h"

#include "worker/compute/kernel_math.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
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

// 0: the reference mode; N > 0: oneDNN GEMMs and N threads.
class CpuBackendTest : public ::testing::TestWithParam<int> {
 protected:
  static std::unique_ptr<Backend> Make(int threads) {
    if (threads == 0) return NewReferenceCpuBackend();
    CpuBackendOptions options;
    options.threads = threads;
    return NewCpuBackend(options);
  }
  std::unique_ptr<Backend> backend_ = Make(GetParam());
  std::mt19937 rng_{7};
};

TEST_P(CpuBackendTest, PoolSumsEachBagsScaledRows) {
  const int dim = 3, rows = 4;
  std::vector<float> table = Random(rows * dim, &rng_);
  // Without bag offsets every entry is its own bag: exactly value * row (a zero value keeps a row's -0).
  {
    std::vector<uint32_t> index = {0, 3, 3, 1, 2, 0};
    std::vector<float> values = {1, 0.5f, 1, 0, 2, 1};
    const int count = static_cast<int>(index.size());
    std::vector<float> x(count * dim, 7.0f);
    ASSERT_TRUE(backend_->Pool(table.data(), dim, index.data(), values.data(), nullptr, count, x.data()).ok());
    std::vector<float> want;
    for (int p = 0; p < count; ++p) {
      for (int d = 0; d < dim; ++d) want.push_back(values[p] * table[index[p] * dim + d]);
    }
    EXPECT_EQ(std::memcmp(x.data(), want.data(), want.size() * sizeof(float)), 0);
  }
  // Bags {0, 3, 3}, {}, {1}, {2, 0}: sums in order, zeros for the empty bag.
  std::vector<uint32_t> index = {0, 3, 3, 1, 2, 0};
  std::vector<float> values = {1, 0.5f, 1, 0.25f, 2, 1};
  std::vector<uint32_t> bag_offsets = {0, 3, 3, 4, 6};
  const int bags = 4;
  std::vector<float> x(bags * dim, 7.0f);
  ASSERT_TRUE(
      backend_->Pool(table.data(), dim, index.data(), values.data(), bag_offsets.data(), bags, x.data()).ok());
  std::vector<double> want;
  for (int b = 0; b < bags; ++b) {
    for (int d = 0; d < dim; ++d) {
      double s = 0;
      for (uint32_t e = bag_offsets[b]; e < bag_offsets[b + 1]; ++e) s += double{values[e]} * table[index[e] * dim + d];
      want.push_back(s);
    }
  }
  ExpectNear(x, want);
  for (int d = 0; d < dim; ++d) EXPECT_EQ(x[1 * dim + d], 0.0f);
}

TEST_P(CpuBackendTest, FieldSumAndFmMatchThePairwiseDefinition) {
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

TEST_P(CpuBackendTest, DotInteractionIsEveryPairsDotProductAndItsGradient) {
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

TEST_P(CpuBackendTest, GemmAllTransposes) {
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

TEST_P(CpuBackendTest, BiasReluColumnSumAndCopyBlock) {
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

TEST_P(CpuBackendTest, LogitLossIsStableAndItsGradientIsPMinusY) {
  std::vector<float> wide = {0.5f, -200.0f, 200.0f, 0.0f};
  std::vector<float> deep = {0.25f, 0.0f, 0.0f, -1.0f};
  std::vector<float> labels = {1, 1, 0, 0};
  const float bias = 0.1f;
  // Without weights, and with weights that scale each example's loss and gradient (0 drops it).
  std::vector<float> weights = {2.0f, 0.5f, 0.0f, 1.0f};
  for (bool weighted : {false, true}) {
    SCOPED_TRACE(weighted);
    std::vector<float> prob(4), loss(4), dlogit(4);
    ASSERT_TRUE(backend_->LogitLoss(&bias, wide.data(), nullptr, deep.data(), labels.data(),
                                    weighted ? weights.data() : nullptr, 4, 0.25f, prob.data(), loss.data(),
                                    dlogit.data())
                    .ok());
    for (int n = 0; n < 4; ++n) {
      const double w = weighted ? weights[n] : 1.0;
      const double z = bias + wide[n] + deep[n];
      const double p = 1 / (1 + std::exp(-z));
      const double want_loss = w * (labels[n] == 1 ? std::log1p(std::exp(-z)) : std::log1p(std::exp(z)));
      EXPECT_NEAR(prob[n], p, 1e-6);
      EXPECT_TRUE(std::isfinite(loss[n]));
      EXPECT_NEAR(loss[n], want_loss, 1e-5 * (1 + want_loss));
      EXPECT_NEAR(dlogit[n], w * 0.25 * (p - labels[n]), 1e-7);
    }
  }
}

TEST_P(CpuBackendTest, SegmentSumAddsEachRowsEntriesInOrder) {
  const int dim = 2;
  // Entries 0..5 with unique rows {0, 2, 0, 1, 2, 2}: segments 0 -> {0, 2}, 1 -> {3}, 2 -> {1, 4, 5}.
  std::vector<uint32_t> offsets = {0, 2, 3, 6};
  std::vector<uint32_t> positions = {0, 2, 3, 1, 4, 5};
  std::vector<float> values = {1, 2, 1, 0.5f, 1, 3};
  std::vector<float> dx = Random(6 * dim, &rng_);
  std::vector<float> out(3 * dim);
  const std::vector<std::vector<int>> segs = {{0, 2}, {3}, {1, 4, 5}};
  // The entries' bags: none (entry p is bag p), or bags {0, 0, 1, 3, 3, 5} of 6.
  std::vector<uint32_t> entry_bags = {0, 0, 1, 3, 3, 5};
  for (bool jagged : {false, true}) {
    // group = 1: each bag's row of dx; group = 3: bags 0-2 read dx row 0, bags 3-5 row 1.
    for (int group : {1, 3}) {
      SCOPED_TRACE(std::string(jagged ? "jagged" : "one entry per bag") + " group " + std::to_string(group));
      ASSERT_TRUE(backend_
                      ->SegmentSum(dx.data(), values.data(), offsets.data(), positions.data(),
                                   jagged ? entry_bags.data() : nullptr, dim, group, 3, out.data())
                      .ok());
      std::vector<double> want;
      for (const auto& seg : segs) {
        for (int d = 0; d < dim; ++d) {
          double s = 0;
          for (int p : seg) s += double{values[p]} * dx[(jagged ? entry_bags[p] : p) / group * dim + d];
          want.push_back(s);
        }
      }
      ExpectNear(out, want);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CpuBackendTest, ::testing::Values(0, 1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 0 ? std::string("Reference")
                                                  : "Blas" + std::to_string(info.param) + "Threads";
                         });

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// One op's output, from a backend, on fixed inputs.
using Op = std::function<std::vector<float>(Backend&)>;

// The ops of one DeepFM/DLRM step at a realistic size, each as a function of the backend.
std::vector<std::pair<std::string, Op>> RealisticOps(std::mt19937* rng) {
  constexpr int kN = 1024, kFields = 39, kDim = 16, kUnique = 5000, kIn = kFields * kDim, kHidden = 256;
  constexpr int kM = 8, kPairs = kM * (kM - 1) / 2;  // DLRM vectors
  constexpr int64_t kPositions = int64_t{kN} * kFields;
  auto rows = std::make_shared<std::vector<float>>(Random(int64_t{kUnique} * kDim, rng));
  auto x = std::make_shared<std::vector<float>>(Random(kPositions * kDim, rng));
  auto g = std::make_shared<std::vector<float>>(Random(kN, rng));
  auto values = std::make_shared<std::vector<float>>(Random(kPositions, rng, 0.0f, 2.0f));
  auto w = std::make_shared<std::vector<float>>(Random(int64_t{kIn} * kHidden, rng));
  auto act = std::make_shared<std::vector<float>>(Random(int64_t{kN} * kHidden, rng));
  auto bias = std::make_shared<std::vector<float>>(Random(kHidden, rng));
  auto labels = std::make_shared<std::vector<float>>(kN);
  for (int n = 0; n < kN; ++n) (*labels)[n] = static_cast<float>((*rng)() % 2);
  auto v = std::make_shared<std::vector<float>>(Random(int64_t{kN} * kM * kDim, rng));
  auto dz = std::make_shared<std::vector<float>>(Random(int64_t{kN} * kPairs, rng));
  // Each entry's unique row, Zipf-like (a few rows collect most entries, as popular keys do), and the segments.
  struct Sparse {
    std::vector<uint32_t> index, offsets{0}, positions;
  };
  auto sparse = [&](int64_t entries) {
    auto out = std::make_shared<Sparse>();
    std::vector<std::vector<uint32_t>> by_row(kUnique);
    for (int64_t p = 0; p < entries; ++p) {
      const uint32_t r = static_cast<uint32_t>(std::min<uint64_t>((*rng)() % kUnique, (*rng)() % kUnique));
      out->index.push_back(r);
      by_row[r].push_back(static_cast<uint32_t>(p));
    }
    for (const auto& seg : by_row) {
      out->positions.insert(out->positions.end(), seg.begin(), seg.end());
      out->offsets.push_back(static_cast<uint32_t>(out->positions.size()));
    }
    return out;
  };
  // One entry per bag, and the same bags jagged: 0 to 4 entries each.
  const std::shared_ptr<const Sparse> single = sparse(kPositions);
  auto bag_offsets = std::make_shared<std::vector<uint32_t>>(1, 0);
  auto entry_bags = std::make_shared<std::vector<uint32_t>>();
  for (int64_t b = 0; b < kPositions; ++b) {
    const int n = static_cast<int>((*rng)() % 5);
    for (int e = 0; e < n; ++e) entry_bags->push_back(static_cast<uint32_t>(b));
    bag_offsets->push_back(static_cast<uint32_t>(entry_bags->size()));
  }
  const int64_t kEntries = static_cast<int64_t>(entry_bags->size());
  const std::shared_ptr<const Sparse> jagged = sparse(kEntries);
  auto jagged_values = std::make_shared<std::vector<float>>(Random(kEntries, rng, 0.0f, 2.0f));
  std::vector<std::pair<std::string, Op>> ops;
  ops.emplace_back("Pool", [=](Backend& b) {
    std::vector<float> out(kPositions * kDim), pooled(kPositions * kDim);
    EXPECT_TRUE(
        b.Pool(rows->data(), kDim, single->index.data(), values->data(), nullptr, kPositions, out.data()).ok());
    EXPECT_TRUE(b.Pool(rows->data(), kDim, jagged->index.data(), jagged_values->data(), bag_offsets->data(),
                       kPositions, pooled.data())
                    .ok());
    out.insert(out.end(), pooled.begin(), pooled.end());
    return out;
  });
  ops.emplace_back("FieldSum+FmForward+FmBackward", [=](Backend& b) {
    std::vector<float> sum(int64_t{kN} * kDim), fm(kN), dx(kPositions * kDim);
    EXPECT_TRUE(b.FieldSum(x->data(), kN, kFields, kDim, sum.data()).ok());
    EXPECT_TRUE(b.FmForward(x->data(), sum.data(), kN, kFields, kDim, fm.data()).ok());
    EXPECT_TRUE(b.FmBackward(x->data(), sum.data(), g->data(), kN, kFields, kDim, dx.data()).ok());
    sum.insert(sum.end(), fm.begin(), fm.end());
    sum.insert(sum.end(), dx.begin(), dx.end());
    return sum;
  });
  ops.emplace_back("DotInteraction+Backward", [=](Backend& b) {
    std::vector<float> z(int64_t{kN} * kPairs), dv(int64_t{kN} * kM * kDim);
    EXPECT_TRUE(b.DotInteraction(v->data(), kN, kM, kDim, z.data()).ok());
    EXPECT_TRUE(b.DotInteractionBackward(v->data(), dz->data(), kN, kM, kDim, dv.data()).ok());
    z.insert(z.end(), dv.begin(), dv.end());
    return z;
  });
  ops.emplace_back("BiasActivation+ReluBackward+ColumnSum+CopyBlock", [=](Backend& b) {
    std::vector<float> y = *act, dy = *act, sums(kHidden), block(int64_t{kN} * (kHidden + 3), 1.0f);
    EXPECT_TRUE(b.BiasActivation(y.data(), bias->data(), kN, kHidden, true).ok());
    EXPECT_TRUE(b.ReluBackward(y.data(), dy.data(), int64_t{kN} * kHidden).ok());
    EXPECT_TRUE(b.ColumnSum(dy.data(), kN, kHidden, sums.data()).ok());
    EXPECT_TRUE(b.CopyBlock(y.data(), kHidden, block.data() + 3, kHidden + 3, kN, kHidden, true).ok());
    y.insert(y.end(), dy.begin(), dy.end());
    y.insert(y.end(), sums.begin(), sums.end());
    y.insert(y.end(), block.begin(), block.end());
    return y;
  });
  ops.emplace_back("LogitLoss", [=](Backend& b) {
    std::vector<float> prob(kN), loss(kN), dlogit(kN), weighted(3 * kN);
    const float b0 = 0.25f;
    EXPECT_TRUE(b.LogitLoss(&b0, g->data(), g->data(), act->data(), labels->data(), nullptr, kN, 1.0f / kN,
                            prob.data(), loss.data(), dlogit.data())
                    .ok());
    EXPECT_TRUE(b.LogitLoss(&b0, g->data(), g->data(), act->data(), labels->data(), values->data(), kN, 1.0f / kN,
                            weighted.data(), weighted.data() + kN, weighted.data() + 2 * kN)
                    .ok());
    prob.insert(prob.end(), loss.begin(), loss.end());
    prob.insert(prob.end(), dlogit.begin(), dlogit.end());
    prob.insert(prob.end(), weighted.begin(), weighted.end());
    return prob;
  });
  ops.emplace_back("SegmentSum", [=](Backend& b) {
    std::vector<float> out;
    for (const Sparse* s : {single.get(), jagged.get()}) {
      const float* v = s == single.get() ? values->data() : jagged_values->data();
      const uint32_t* bags = s == single.get() ? nullptr : entry_bags->data();
      std::vector<float> emb(int64_t{kUnique} * kDim), wide(kUnique);
      EXPECT_TRUE(b.SegmentSum(x->data(), v, s->offsets.data(), s->positions.data(), bags, kDim, 1, kUnique,
                               emb.data())
                      .ok());
      EXPECT_TRUE(b.SegmentSum(g->data(), v, s->offsets.data(), s->positions.data(), bags, 1, kFields, kUnique,
                               wide.data())
                      .ok());
      out.insert(out.end(), emb.begin(), emb.end());
      out.insert(out.end(), wide.begin(), wide.end());
    }
    return out;
  });
  // The MLP's three GEMMs: forward, weight gradient, input gradient.
  ops.emplace_back("Gemm", [=](Backend& b) {
    std::vector<float> y(int64_t{kN} * kHidden), dw(int64_t{kIn} * kHidden), dx(int64_t{kN} * kIn);
    EXPECT_TRUE(b.Gemm(false, false, kN, kHidden, kIn, 1.0f, x->data(), w->data(), 0.0f, y.data()).ok());
    EXPECT_TRUE(b.Gemm(true, false, kIn, kHidden, kN, 1.0f, x->data(), act->data(), 0.0f, dw.data()).ok());
    EXPECT_TRUE(b.Gemm(false, true, kN, kIn, kHidden, 1.0f, act->data(), w->data(), 0.0f, dx.data()).ok());
    y.insert(y.end(), dw.begin(), dw.end());
    y.insert(y.end(), dx.begin(), dx.end());
    return y;
  });
  return ops;
}

TEST(CpuBackendRealisticTest, EveryOpMatchesTheReferenceAndRepeatsBitForBit) {
  std::mt19937 rng(11);
  const auto ops = RealisticOps(&rng);
  std::unique_ptr<Backend> reference = NewReferenceCpuBackend();
  for (const auto& [name, op] : ops) {
    const std::vector<float> want = op(*reference);
    for (int threads : {1, 2, 3}) {
      CpuBackendOptions options;
      options.threads = threads;
      std::unique_ptr<Backend> fast = NewCpuBackend(options);
      const std::vector<float> got = op(*fast);
      ASSERT_EQ(got.size(), want.size()) << name;
      EXPECT_TRUE(SameBits(got, op(*fast))) << name << " is not repeatable at " << threads << " threads";
      if (name == "Gemm") {
        // A BLAS blocks and vectorizes the inner sums differently: within float rounding of the reference
        // (sums of 256 to 1024 products of values in [-1, 1]).
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], 2e-4 * (1 + std::fabs(want[i]))) << name << " element " << i;
        }
      } else {
        EXPECT_TRUE(SameBits(got, want)) << name << " differs from the reference at " << threads << " threads";
      }
    }
  }
}

// The CPU backend walks each segment's and each bag's rows once (kernel::SegmentSumRow, PoolRow); the CUDA
// backend computes one element at a time (kernel::SegmentSumElement, PoolElement). Both must give the same bits.
TEST(CpuBackendRealisticTest, RowKernelsHaveTheBitsOfTheElementKernels) {
  std::mt19937 rng(5);
  const int dim = 16, segments = 300, count = 6000, bags = 2500;
  std::vector<float> dx = Random(int64_t{bags} * dim, &rng), values = Random(count, &rng);
  std::vector<uint32_t> offsets = {0}, positions, index(count), bag_offsets = {0}, entry_bags;
  for (int u = 0; u < segments; ++u) {
    for (int p = u; p < count; p += segments) {
      positions.push_back(static_cast<uint32_t>(p));
      index[p] = static_cast<uint32_t>(u);
    }
    offsets.push_back(static_cast<uint32_t>(positions.size()));
  }
  for (int b = 0; b < bags; ++b) {  // 0 to 4 entries per bag; the last bag takes the rest
    const int n = b + 1 == bags ? count - static_cast<int>(entry_bags.size())
                                : std::min<int>(static_cast<int>(rng() % 5), count - entry_bags.size());
    for (int e = 0; e < n; ++e) entry_bags.push_back(static_cast<uint32_t>(b));
    bag_offsets.push_back(static_cast<uint32_t>(entry_bags.size()));
  }
  std::unique_ptr<Backend> backend = NewCpuBackend();
  std::vector<float> got(segments * dim), want(segments * dim);
  ASSERT_TRUE(backend
                  ->SegmentSum(dx.data(), values.data(), offsets.data(), positions.data(), entry_bags.data(), dim, 1,
                               segments, got.data())
                  .ok());
  for (int u = 0; u < segments; ++u) {
    for (int d = 0; d < dim; ++d) {
      want[u * dim + d] = kernel::SegmentSumElement(dx.data(), values.data(), offsets.data(), positions.data(),
                                                    entry_bags.data(), dim, 1, u, d);
    }
  }
  EXPECT_TRUE(SameBits(got, want));

  const std::vector<float> rows = Random(int64_t{segments} * dim, &rng);
  std::vector<float> pooled(int64_t{bags} * dim), want_pooled(int64_t{bags} * dim);
  ASSERT_TRUE(
      backend->Pool(rows.data(), dim, index.data(), values.data(), bag_offsets.data(), bags, pooled.data()).ok());
  for (int b = 0; b < bags; ++b) {
    for (int d = 0; d < dim; ++d) {
      want_pooled[b * dim + d] =
          kernel::PoolElement(rows.data(), index.data(), values.data(), bag_offsets.data(), dim, b, d);
    }
  }
  EXPECT_TRUE(SameBits(pooled, want_pooled));
}

// Likewise the CPU backend's field sums and FM terms walk each example's rows (kernel::FieldSumRow,
// FmInteractionRows); the CUDA backend computes kernel::FieldSumElement and FmInteraction.
TEST(CpuBackendRealisticTest, FieldSumAndFmRowsHaveTheBitsOfTheElementKernels) {
  std::mt19937 rng(6);
  for (int dim : {1, 7, 16, 64}) {
    SCOPED_TRACE(dim);
    const int n = 300, fields = 39;
    std::vector<float> x = Random(n * fields * dim, &rng);
    std::unique_ptr<Backend> backend = NewCpuBackend();
    std::vector<float> sum(n * dim), fm(n), want_sum(n * dim), want_fm(n);
    ASSERT_TRUE(backend->FieldSum(x.data(), n, fields, dim, sum.data()).ok());
    ASSERT_TRUE(backend->FmForward(x.data(), sum.data(), n, fields, dim, fm.data()).ok());
    for (int e = 0; e < n; ++e) {
      for (int d = 0; d < dim; ++d) want_sum[e * dim + d] = kernel::FieldSumElement(x.data(), fields, dim, e, d);
    }
    for (int e = 0; e < n; ++e) want_fm[e] = kernel::FmInteraction(x.data(), want_sum.data(), fields, dim, e);
    EXPECT_TRUE(SameBits(sum, want_sum));
    EXPECT_TRUE(SameBits(fm, want_fm));
  }
}

}  // namespace
}  // namespace kestrel
