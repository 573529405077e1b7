// GPU test (tagged "gpu"): every op of the CUDA backend against the CPU backend (the reference, whose math
// cpu_backend_test checks) on the same random inputs at realistic shapes, element by element within
// |cuda - cpu| <= 1e-5 * (1 + |cpu|). Skips where there is no GPU or no CUDA build; the missing-device check
// runs everywhere.
#include "worker/compute/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/cuda_device.h"
#include "gtest/gtest.h"
#include "worker/compute/backend.h"
#include "worker/compute/cpu_backend.h"

namespace kestrel {
namespace {

// A Criteo-like batch (kCount bags).
constexpr int kExamples = 512;
constexpr int kFields = 39;
constexpr int kDim = 8;
constexpr int64_t kCount = int64_t{kExamples} * kFields;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// One host array's copies in the CPU backend's and the CUDA backend's memory.
template <typename T>
struct Twin {
  T* cpu = nullptr;
  T* cuda = nullptr;
  size_t size = 0;
};

// The sparse side of a batch as the worker builds it: each entry's unique row, its value, the segments
// (entries of each unique row, ascending) that SegmentSum reduces over, and for a jagged batch the bags.
struct SparseBatch {
  int rows = 0;
  std::vector<uint32_t> index;        // [entries]
  std::vector<float> values;          // [entries]
  std::vector<uint32_t> offsets;      // [rows + 1]
  std::vector<uint32_t> positions;    // [entries]
  std::vector<uint32_t> bag_offsets;  // [kCount + 1] (jagged), or empty: entry b is bag b
  std::vector<uint32_t> entry_bags;   // [entries] (jagged), or empty
};

// Keys are skewed like real categorical data (log-uniform ids: a few hot keys repeat across many examples),
// and field 0 is one constant key, so one segment holds every example. 70% of values are 1 (categorical),
// 20% are real-valued, 10% are 0 (padding). max_entries 0: one entry per bag; else each of the kCount bags
// holds 0 to max_entries entries (field 0 exactly one).
SparseBatch MakeSparseBatch(std::mt19937* rng, int max_entries = 0) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::unordered_map<uint64_t, uint32_t> row_of;
  SparseBatch batch;
  if (max_entries > 0) batch.bag_offsets.push_back(0);
  for (int n = 0; n < kExamples; ++n) {
    for (int f = 0; f < kFields; ++f) {
      const int entries = max_entries == 0 || f == 0 ? 1 : static_cast<int>((*rng)() % (max_entries + 1));
      for (int e = 0; e < entries; ++e) {
        const uint64_t id = f == 0 ? 0 : static_cast<uint64_t>(std::pow(2000.0, u(*rng)));
        const uint64_t key = uint64_t{static_cast<uint32_t>(f)} << 32 | id;
        auto [it, inserted] = row_of.emplace(key, static_cast<uint32_t>(row_of.size()));
        batch.index.push_back(it->second);
        const double kind = u(*rng);
        batch.values.push_back(kind < 0.7 ? 1.0f : kind < 0.9 ? static_cast<float>(2 * u(*rng)) : 0.0f);
        if (max_entries > 0) batch.entry_bags.push_back(static_cast<uint32_t>(n * kFields + f));
      }
      if (max_entries > 0) batch.bag_offsets.push_back(static_cast<uint32_t>(batch.index.size()));
    }
  }
  batch.rows = static_cast<int>(row_of.size());
  // Counting sort by row; walking p upwards keeps each segment's entries ascending.
  const uint32_t count = static_cast<uint32_t>(batch.index.size());
  batch.offsets.assign(batch.rows + 1, 0);
  for (uint32_t row : batch.index) ++batch.offsets[row + 1];
  for (int r = 0; r < batch.rows; ++r) batch.offsets[r + 1] += batch.offsets[r];
  std::vector<uint32_t> next(batch.offsets.begin(), batch.offsets.end() - 1);
  batch.positions.resize(count);
  for (uint32_t p = 0; p < count; ++p) batch.positions[next[batch.index[p]]++] = p;
  return batch;
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no GPU here (" << DescribeCudaDevices() << "); CUDA backend built: " << CudaBuilt();
    }
    absl::StatusOr<std::unique_ptr<Backend>> cuda = NewCudaBackend(0);
    if (!cuda.ok() && !CudaBuilt()) GTEST_SKIP() << "built without CUDA: " << cuda.status();
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    cuda_ = *std::move(cuda);
    cpu_ = NewCpuBackend();
  }
  // Device arrays go before the backends that own them.
  void TearDown() override { arrays_.clear(); }

  std::vector<float> Random(size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng_);
    return v;
  }

  template <typename T>
  T* UploadTo(Backend* backend, const std::vector<T>& host) {
    auto array = std::make_shared<DeviceArray<T>>(backend);
    absl::Status status = array->Reserve(host.size());
    EXPECT_TRUE(status.ok()) << backend->name() << ": " << status;
    if (!status.ok()) return nullptr;
    arrays_.push_back(array);
    status = backend->CopyToDevice(array->data(), host.data(), host.size() * sizeof(T));
    EXPECT_TRUE(status.ok()) << backend->name() << ": " << status;
    return array->data();
  }
  template <typename T>
  Twin<T> Upload(const std::vector<T>& host) {
    return {UploadTo(cpu_.get(), host), UploadTo(cuda_.get(), host), host.size()};
  }
  // An output array: 0 on the CPU, NaN on CUDA, so an element the kernel never writes cannot match.
  Twin<float> Output(size_t n) {
    return {UploadTo(cpu_.get(), std::vector<float>(n, 0.0f)), UploadTo(cuda_.get(), std::vector<float>(n, kNaN)),
            n};
  }

  template <typename T>
  std::vector<T> Download(Backend* backend, const T* device, size_t n) {
    std::vector<T> host(n);
    absl::Status status = backend->CopyToHost(host.data(), device, n * sizeof(T));
    EXPECT_TRUE(status.ok()) << backend->name() << ": " << status;
    status = backend->Synchronize();
    EXPECT_TRUE(status.ok()) << backend->name() << ": " << status;
    return host;
  }

  template <typename T>
  T* On(Backend* backend, const Twin<T>& t) const {
    return backend == cpu_.get() ? t.cpu : t.cuda;
  }

  // Runs the same op on both backends; `op` picks each backend's arrays with On().
  template <typename Op>
  void RunBoth(const std::string& what, Op op) {
    for (Backend* backend : {cpu_.get(), cuda_.get()}) {
      const absl::Status status = op(backend);
      EXPECT_TRUE(status.ok()) << what << " on " << backend->name() << ": " << status;
    }
  }

  // Every element of the CUDA copy within 1e-5 (relative + absolute) of the CPU copy; reports the first few.
  void ExpectClose(const Twin<float>& t, const std::string& what) {
    const std::vector<float> cuda = Download(cuda_.get(), t.cuda, t.size);
    const std::vector<float> cpu = Download(cpu_.get(), t.cpu, t.size);
    int64_t bad = 0;
    for (size_t i = 0; i < t.size; ++i) {
      // Written so that NaN fails.
      if (std::fabs(cuda[i] - cpu[i]) <= 1e-5 * (1 + std::fabs(cpu[i]))) continue;
      if (++bad <= 5) {
        ADD_FAILURE() << what << ": element " << i << " is " << cuda[i] << " on CUDA, " << cpu[i] << " on CPU";
      }
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << t.size << " elements differ";
  }

  // A SparseBatch's index arrays and values on both backends.
  struct SparseTwins {
    Twin<uint32_t> index, offsets, positions;
    Twin<float> values;
  };
  SparseTwins UploadSparse(const SparseBatch& batch) {
    return {Upload(batch.index), Upload(batch.offsets), Upload(batch.positions), Upload(batch.values)};
  }

  std::mt19937 rng_{20240611};
  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<Backend> cuda_;
  std::vector<std::shared_ptr<void>> arrays_;
};

TEST(CudaBackendFactoryTest, MissingDeviceIsAFailedPrecondition) {
  // Also what a CPU-only build's stub returns for any device.
  absl::StatusOr<std::unique_ptr<Backend>> backend = NewCudaBackend(CudaDeviceCount());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition) << backend.status();
  EXPECT_EQ(NewCudaBackend(-1).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CudaBackendTest, MemoryRoundTripThroughPinnedStaging) {
  EXPECT_EQ(cuda_->name(), "cuda:0");
  const size_t n = 1 << 20;
  HostArray<float> staging(cuda_.get());
  ASSERT_TRUE(staging.Reserve(n).ok());
  for (size_t i = 0; i < n; ++i) staging.data()[i] = static_cast<float>(i) * 0.25f;
  DeviceArray<float> device(cuda_.get());
  ASSERT_TRUE(device.Reserve(n).ok());
  ASSERT_TRUE(cuda_->CopyToDevice(device.data(), staging.data(), n * sizeof(float)).ok());
  ASSERT_TRUE(cuda_->Synchronize().ok());
  std::memset(staging.data(), 0xff, n * sizeof(float));
  // Zero the second half on the device, then bring everything back.
  ASSERT_TRUE(cuda_->Zero(device.data() + n / 2, n / 2 * sizeof(float)).ok());
  ASSERT_TRUE(cuda_->CopyToHost(staging.data(), device.data(), n * sizeof(float)).ok());
  ASSERT_TRUE(cuda_->Synchronize().ok());
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(staging.data()[i], i < n / 2 ? static_cast<float>(i) * 0.25f : 0.0f) << "element " << i;
  }
  // Empty allocations are distinct usable pointers, as on the CPU; empty copies do nothing.
  absl::StatusOr<void*> empty = cuda_->Allocate(0);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_NE(*empty, nullptr);
  EXPECT_TRUE(cuda_->CopyToDevice(*empty, staging.data(), 0).ok());
  EXPECT_TRUE(cuda_->Zero(*empty, 0).ok());
  cuda_->Free(*empty);
  EXPECT_TRUE(cuda_->Synchronize().ok());
}

TEST_F(CudaBackendTest, EmptyOpsLaunchNothing) {
  float* f = nullptr;
  const uint32_t* u = nullptr;
  EXPECT_TRUE(cuda_->Pool(f, kDim, u, f, nullptr, 0, f).ok());
  EXPECT_TRUE(cuda_->Pool(f, kDim, u, f, u, 0, f).ok());
  EXPECT_TRUE(cuda_->FieldSum(f, 0, kFields, kDim, f).ok());
  EXPECT_TRUE(cuda_->FmForward(f, f, 0, kFields, kDim, f).ok());
  EXPECT_TRUE(cuda_->FmBackward(f, f, f, 0, kFields, kDim, f).ok());
  EXPECT_TRUE(cuda_->CopyBlock(f, 4, f, 4, 0, 4, true).ok());
  EXPECT_TRUE(cuda_->Gemm(false, false, 0, 4, 4, 1.0f, f, f, 0.0f, f).ok());
  EXPECT_TRUE(cuda_->BiasActivation(f, f, 0, 4, true).ok());
  EXPECT_TRUE(cuda_->ReluBackward(f, f, 0).ok());
  EXPECT_TRUE(cuda_->ColumnSum(f, 4, 0, f).ok());
  EXPECT_TRUE(cuda_->LogitLoss(f, f, f, f, f, f, 0, 1.0f, f, f, f).ok());
  EXPECT_TRUE(cuda_->SegmentSum(f, f, u, u, nullptr, kDim, 1, 0, f).ok());
  EXPECT_TRUE(cuda_->SegmentSum(f, f, u, u, u, kDim, 1, 0, f).ok());
  EXPECT_TRUE(cuda_->Synchronize().ok());
}

// The embedding path of one single-valued step: pool (one entry per bag), field sum, FM forward and backward,
// and the segment reduce into unique rows, for both the per-bag (embedding) and per-example (wide) gradients.
TEST_F(CudaBackendTest, EmbeddingPathMatchesTheCpu) {
  const SparseBatch batch = MakeSparseBatch(&rng_);
  // Segments of every length: field 0's one id is a row of kExamples entries, the other fields' log-uniform ids
  // repeat within a field.
  uint32_t longest = 0;
  for (int r = 0; r < batch.rows; ++r) longest = std::max(longest, batch.offsets[r + 1] - batch.offsets[r]);
  ASSERT_EQ(longest, static_cast<uint32_t>(kExamples));
  ASSERT_LT(batch.rows, kCount / 2) << "the batch should repeat rows";
  // Embeddings at a typical initial scale.
  const Twin<float> table = Upload(Random(int64_t{batch.rows} * kDim, -0.05f, 0.05f));
  const SparseTwins sparse = UploadSparse(batch);

  const Twin<float> x = Output(kCount * kDim);
  RunBoth("Pool", [&](Backend* b) {
    return b->Pool(On(b, table), kDim, On(b, sparse.index), On(b, sparse.values), nullptr, kCount, On(b, x));
  });
  ExpectClose(x, "Pool");

  const Twin<float> sum = Output(kExamples * kDim);
  RunBoth("FieldSum", [&](Backend* b) { return b->FieldSum(On(b, x), kExamples, kFields, kDim, On(b, sum)); });
  ExpectClose(sum, "FieldSum");

  const Twin<float> fm = Output(kExamples);
  RunBoth("FmForward",
          [&](Backend* b) { return b->FmForward(On(b, x), On(b, sum), kExamples, kFields, kDim, On(b, fm)); });
  ExpectClose(fm, "FmForward");

  const Twin<float> g = Upload(Random(kExamples, -1.0f, 1.0f));
  const Twin<float> dx = Output(kCount * kDim);
  RunBoth("FmBackward", [&](Backend* b) {
    return b->FmBackward(On(b, x), On(b, sum), On(b, g), kExamples, kFields, kDim, On(b, dx));
  });
  ExpectClose(dx, "FmBackward");

  const Twin<float> grad_rows = Output(int64_t{batch.rows} * kDim);
  RunBoth("SegmentSum group 1", [&](Backend* b) {
    return b->SegmentSum(On(b, dx), On(b, sparse.values), On(b, sparse.offsets), On(b, sparse.positions), nullptr, kDim,
                         /*group=*/1, batch.rows, On(b, grad_rows));
  });
  ExpectClose(grad_rows, "SegmentSum group 1");

  // The wide weights: one dL/dlogit per example, scattered to its fields' rows (dim 1).
  const Twin<float> wide_grad = Output(batch.rows);
  RunBoth("SegmentSum group fields", [&](Backend* b) {
    return b->SegmentSum(On(b, g), On(b, sparse.values), On(b, sparse.offsets), On(b, sparse.positions), nullptr,
                         /*dim=*/1, kFields, batch.rows, On(b, wide_grad));
  });
  ExpectClose(wide_grad, "SegmentSum group fields");
}

// The embedding path of a jagged step: kCount bags of 0 to 6 entries (multi-valued features, empty bags among
// them), pooled, and the segment reduce through each entry's bag; the pool repeats bit for bit.
TEST_F(CudaBackendTest, JaggedPoolAndSegmentSumMatchTheCpu) {
  const SparseBatch batch = MakeSparseBatch(&rng_, /*max_entries=*/6);
  const int64_t bags = kCount;
  ASSERT_EQ(batch.bag_offsets.size(), static_cast<size_t>(bags + 1));
  ASSERT_GT(batch.bag_offsets.back(), static_cast<uint32_t>(bags)) << "the bags should hold several entries";
  const Twin<float> table = Upload(Random(int64_t{batch.rows} * kDim, -0.05f, 0.05f));
  const SparseTwins sparse = UploadSparse(batch);
  const Twin<uint32_t> bag_offsets = Upload(batch.bag_offsets);
  const Twin<uint32_t> entry_bags = Upload(batch.entry_bags);

  const Twin<float> x = Output(bags * kDim);
  RunBoth("Pool jagged", [&](Backend* b) {
    return b->Pool(On(b, table), kDim, On(b, sparse.index), On(b, sparse.values), On(b, bag_offsets), bags, On(b, x));
  });
  ExpectClose(x, "Pool jagged");
  const std::vector<float> first = Download(cuda_.get(), x.cuda, x.size);
  ASSERT_TRUE(
      cuda_->Pool(table.cuda, kDim, sparse.index.cuda, sparse.values.cuda, bag_offsets.cuda, bags, x.cuda).ok());
  EXPECT_EQ(std::memcmp(first.data(), Download(cuda_.get(), x.cuda, x.size).data(), x.size * sizeof(float)), 0);

  const Twin<float> dx = Upload(Random(bags * kDim, -1.0f, 1.0f));
  const Twin<float> grad_rows = Output(int64_t{batch.rows} * kDim);
  RunBoth("SegmentSum jagged group 1", [&](Backend* b) {
    return b->SegmentSum(On(b, dx), On(b, sparse.values), On(b, sparse.offsets), On(b, sparse.positions),
                         On(b, entry_bags), kDim, /*group=*/1, batch.rows, On(b, grad_rows));
  });
  ExpectClose(grad_rows, "SegmentSum jagged group 1");
  const Twin<float> g = Upload(Random(kExamples, -1.0f, 1.0f));
  const Twin<float> wide_grad = Output(batch.rows);
  RunBoth("SegmentSum jagged group fields", [&](Backend* b) {
    return b->SegmentSum(On(b, g), On(b, sparse.values), On(b, sparse.offsets), On(b, sparse.positions),
                         On(b, entry_bags), /*dim=*/1, kFields, batch.rows, On(b, wide_grad));
  });
  ExpectClose(wide_grad, "SegmentSum jagged group fields");
}

TEST_F(CudaBackendTest, DotInteractionMatchesTheCpu) {
  // DLRM shape: the bottom MLP's output and 39 field embeddings per example.
  const int m = kFields + 1;
  const int pairs = m * (m - 1) / 2;
  const Twin<float> v = Upload(Random(int64_t{kExamples} * m * kDim, -0.05f, 0.05f));
  const Twin<float> z = Output(int64_t{kExamples} * pairs);
  RunBoth("DotInteraction", [&](Backend* b) { return b->DotInteraction(On(b, v), kExamples, m, kDim, On(b, z)); });
  ExpectClose(z, "DotInteraction");
  const Twin<float> dz = Upload(Random(int64_t{kExamples} * pairs, -0.01f, 0.01f));
  const Twin<float> dv = Output(int64_t{kExamples} * m * kDim);
  RunBoth("DotInteractionBackward", [&](Backend* b) {
    return b->DotInteractionBackward(On(b, v), On(b, dz), kExamples, m, kDim, On(b, dv));
  });
  ExpectClose(dv, "DotInteractionBackward");
}

TEST_F(CudaBackendTest, SegmentSumIsBitwiseRepeatable) {
  const SparseBatch batch = MakeSparseBatch(&rng_);
  const Twin<float> dx = Upload(Random(kCount * kDim, -1.0f, 1.0f));
  const SparseTwins sparse = UploadSparse(batch);
  const size_t n = static_cast<size_t>(batch.rows) * kDim;
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; ++run) {
    const Twin<float> out = Output(n);
    ASSERT_TRUE(cuda_
                    ->SegmentSum(dx.cuda, sparse.values.cuda, sparse.offsets.cuda, sparse.positions.cuda, nullptr, kDim,
                                 1, batch.rows, out.cuda)
                    .ok());
    runs.push_back(Download(cuda_.get(), out.cuda, n));
  }
  EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), n * sizeof(float)), 0);
}

// The deep tower's GEMMs: 512 examples, a 320-wide input (39 x 8 embeddings + 8 dense), 64 hidden units, with
// weights at Xavier scale, in every transpose combination, overwriting (beta 0, C's old NaNs ignored) and
// accumulating.
TEST_F(CudaBackendTest, GemmMatchesTheCpuInEveryTransposeCombination) {
  const int m = 512, n = 320, k = 64;
  const float w = 1.0f / std::sqrt(static_cast<float>(k));
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      for (float beta : {0.0f, 0.75f}) {
        const std::string what = "Gemm trans_a=" + std::to_string(trans_a) + " trans_b=" + std::to_string(trans_b) +
                                 " beta=" + std::to_string(beta);
        const Twin<float> a = Upload(Random(m * k, -1.0f, 1.0f));
        const Twin<float> b = Upload(Random(k * n, -w, w));
        const Twin<float> c = Upload(beta == 0.0f ? std::vector<float>(m * n, kNaN) : Random(m * n, -1.0f, 1.0f));
        RunBoth(what, [&](Backend* be) {
          return be->Gemm(trans_a, trans_b, m, n, k, 1.5f, On(be, a), On(be, b), beta, On(be, c));
        });
        ExpectClose(c, what);
      }
    }
  }
  // An empty inner dimension only scales C (and zeroes it, NaNs included, when beta is 0).
  const Twin<float> a = Upload(Random(m, -1.0f, 1.0f));
  const Twin<float> b = Upload(Random(n, -1.0f, 1.0f));
  for (float beta : {0.0f, 0.5f}) {
    const std::string what = "Gemm k=0 beta=" + std::to_string(beta);
    const Twin<float> c = Upload(beta == 0.0f ? std::vector<float>(m * n, kNaN) : Random(m * n, -1.0f, 1.0f));
    RunBoth(what, [&](Backend* be) {
      return be->Gemm(false, false, m, n, /*k=*/0, 1.0f, On(be, a), On(be, b), beta, On(be, c));
    });
    ExpectClose(c, what);
  }
}

// The backward GEMMs reduce over the batch (k = 512): dW = X^T dY with gradients at their usual small scale.
TEST_F(CudaBackendTest, WeightGradientGemmMatchesTheCpu) {
  const int m = 320, n = 64, k = kExamples;
  const Twin<float> x = Upload(Random(k * m, -1.0f, 1.0f));
  const Twin<float> dy = Upload(Random(k * n, -0.01f, 0.01f));
  const Twin<float> dw = Output(m * n);
  RunBoth("Gemm X^T dY", [&](Backend* b) {
    return b->Gemm(/*trans_a=*/true, /*trans_b=*/false, m, n, k, 1.0f, On(b, x), On(b, dy), 0.0f, On(b, dw));
  });
  ExpectClose(dw, "Gemm X^T dY");
  // dX = dY W^T, into the gradient buffer it accumulates in.
  const Twin<float> weights = Upload(Random(m * n, -0.125f, 0.125f));
  const Twin<float> dx = Upload(Random(k * m, -0.01f, 0.01f));
  RunBoth("Gemm dY W^T", [&](Backend* b) {
    return b->Gemm(false, /*trans_b=*/true, k, m, n, 1.0f, On(b, dy), On(b, weights), 1.0f, On(b, dx));
  });
  ExpectClose(dx, "Gemm dY W^T");
}

TEST_F(CudaBackendTest, DenseOpsMatchTheCpu) {
  const int rows = kExamples, cols = 320;
  const Twin<float> bias = Upload(Random(cols, -0.5f, 0.5f));
  for (bool relu : {false, true}) {
    const std::string what = std::string("BiasActivation relu=") + (relu ? "true" : "false");
    const Twin<float> y = Upload(Random(rows * cols, -1.0f, 1.0f));
    RunBoth(what, [&](Backend* b) { return b->BiasActivation(On(b, y), On(b, bias), rows, cols, relu); });
    ExpectClose(y, what);
    if (!relu) continue;
    const Twin<float> dy = Upload(Random(rows * cols, -1.0f, 1.0f));
    RunBoth("ReluBackward", [&](Backend* b) { return b->ReluBackward(On(b, y), On(b, dy), rows * cols); });
    ExpectClose(dy, "ReluBackward");
  }

  const Twin<float> x = Upload(Random(rows * cols, -1.0f, 1.0f));
  const Twin<float> colsum = Output(cols);
  RunBoth("ColumnSum", [&](Backend* b) { return b->ColumnSum(On(b, x), rows, cols, On(b, colsum)); });
  ExpectClose(colsum, "ColumnSum");

  // A 512 x 64 block from column 100 of x into column 17 of a 512 x 400 matrix, overwritten then added again;
  // the rest of the destination must stay as it was.
  const int dst_cols = 400, block_cols = 64;
  const Twin<float> dst = Upload(Random(rows * dst_cols, -1.0f, 1.0f));
  for (bool accumulate : {false, true}) {
    RunBoth("CopyBlock", [&](Backend* b) {
      return b->CopyBlock(On(b, x) + 100, cols, On(b, dst) + 17, dst_cols, rows, block_cols, accumulate);
    });
    ExpectClose(dst, accumulate ? "CopyBlock accumulate" : "CopyBlock");
  }
}

TEST_F(CudaBackendTest, LogitLossMatchesTheCpuWithAndWithoutLabels) {
  const int n = kExamples;
  std::vector<float> wide_host = Random(n, -3.0f, 3.0f);
  wide_host[0] = 200.0f;  // saturated logits must stay finite
  wide_host[1] = -200.0f;
  std::vector<float> labels_host(n);
  for (int i = 0; i < n; ++i) labels_host[i] = rng_() % 4 == 0 ? 1.0f : 0.0f;
  labels_host[1] = 1.0f;
  const Twin<float> bias = Upload(std::vector<float>{0.1f});
  const Twin<float> wide = Upload(wide_host);
  const Twin<float> fm = Upload(Random(n, -1.0f, 1.0f));
  const Twin<float> deep = Upload(Random(n, -2.0f, 2.0f));
  const Twin<float> labels = Upload(labels_host);
  const float scale = 1.0f / n;

  for (bool with_fm : {true, false}) {
    const std::string what = with_fm ? "LogitLoss" : "LogitLoss without fm";
    const Twin<float> prob = Output(n), loss = Output(n), dlogit = Output(n);
    RunBoth(what, [&](Backend* b) {
      return b->LogitLoss(On(b, bias), On(b, wide), with_fm ? On(b, fm) : nullptr, On(b, deep), On(b, labels),
                          nullptr, n, scale, On(b, prob), On(b, loss), On(b, dlogit));
    });
    ExpectClose(prob, what + " prob");
    ExpectClose(loss, what + " loss");
    ExpectClose(dlogit, what + " dlogit");
  }

  // Example weights (0 among them) scale each example's loss and dlogit.
  std::vector<float> weights_host = Random(n, 0.0f, 2.0f);
  weights_host[2] = 0.0f;
  const Twin<float> weights = Upload(weights_host);
  {
    const Twin<float> prob = Output(n), loss = Output(n), dlogit = Output(n);
    RunBoth("LogitLoss weighted", [&](Backend* b) {
      return b->LogitLoss(On(b, bias), On(b, wide), On(b, fm), On(b, deep), On(b, labels), On(b, weights), n, scale,
                          On(b, prob), On(b, loss), On(b, dlogit));
    });
    ExpectClose(prob, "LogitLoss weighted prob");
    ExpectClose(loss, "LogitLoss weighted loss");
    ExpectClose(dlogit, "LogitLoss weighted dlogit");
  }

  // Without labels (inference) only prob is written, even where loss and dlogit are given; with labels, a null
  // loss or dlogit is skipped alone.
  const std::vector<float> sentinel(n, 7.0f);
  for (int variant = 0; variant < 3; ++variant) {
    const bool with_labels = variant > 0;
    const bool with_loss = variant != 1;
    const bool with_dlogit = variant != 2;
    const std::string what = "LogitLoss variant " + std::to_string(variant);
    const Twin<float> prob = Output(n), loss = Upload(sentinel), dlogit = Upload(sentinel);
    RunBoth(what, [&](Backend* b) {
      return b->LogitLoss(On(b, bias), nullptr, On(b, fm), On(b, deep), with_labels ? On(b, labels) : nullptr,
                          nullptr, n, scale, On(b, prob), with_loss ? On(b, loss) : nullptr,
                          with_dlogit ? On(b, dlogit) : nullptr);
    });
    ExpectClose(prob, what + " prob");
    ExpectClose(loss, what + " loss");
    ExpectClose(dlogit, what + " dlogit");
    const std::vector<float> cuda_loss = Download(cuda_.get(), loss.cuda, n);
    const std::vector<float> cuda_dlogit = Download(cuda_.get(), dlogit.cuda, n);
    EXPECT_EQ(cuda_loss == sentinel, !(with_labels && with_loss)) << what;
    EXPECT_EQ(cuda_dlogit == sentinel, !(with_labels && with_dlogit)) << what;
  }
}

}  // namespace
}  // namespace kestrel
