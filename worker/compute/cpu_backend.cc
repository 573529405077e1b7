// The CPU backend (see cpu_backend.h). Copies are memcpy; ops run to completion on the calling thread and its
// OpenMP team, so Synchronize has nothing to wait for.
#include "worker/compute/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "dnnl.h"

#include "absl/strings/str_cat.h"
#include "common/usable_cores.h"
#include "worker/compute/kernel_math.h"

namespace kestrel {
namespace {

// Below this many element operations an op runs on the calling thread alone: a parallel region costs a few
// microseconds.
constexpr int64_t kParallelWork = 1 << 15;
// Row kernels keep dim floats of scratch on the stack up to this dim (model.embedding_dim is at most 1024).
constexpr int kMaxRowScratch = 1024;

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options)
      : threads_(options.threads > 0 ? options.threads : DefaultComputeThreads()), gemm_(options.gemm) {
    if (gemm_ == CpuGemm::kReference) threads_ = 1;
  }

  std::string name() const override {
    return gemm_ == CpuGemm::kReference ? "cpu-reference" : absl::StrCat("cpu (", threads_, " threads, oneDNN)");
  }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    void* p = std::malloc(bytes == 0 ? 1 : bytes);
    if (p == nullptr) return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes"));
    return p;
  }
  void Free(void* p) override { std::free(p); }
  absl::StatusOr<void*> AllocateHost(size_t bytes) override { return Allocate(bytes); }
  void FreeHost(void* p) override { std::free(p); }
  absl::Status CopyToDevice(void* device, const void* host, size_t bytes) override {
    if (bytes > 0) std::memcpy(device, host, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyToHost(void* host, const void* device, size_t bytes) override {
    if (bytes > 0) std::memcpy(host, device, bytes);
    return absl::OkStatus();
  }
  absl::Status Zero(void* device, size_t bytes) override {
    if (bytes > 0) std::memset(device, 0, bytes);
    return absl::OkStatus();
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }

  absl::Status Pool(const float* rows, int dim, const uint32_t* index, const float* values,
                    const uint32_t* bag_offsets, int64_t bags, float* x) override {
    const int64_t entries = bag_offsets == nullptr ? bags : (bags > 0 ? bag_offsets[bags] : 0);
    ParallelFor(bags, std::max<int64_t>(1, entries / std::max<int64_t>(bags, 1)) * dim, [=](int64_t b) {
      kernel::PoolRow(rows, index, values, bag_offsets, dim, b, x + b * dim);
    });
    return absl::OkStatus();
  }
  absl::Status FieldSum(const float* x, int64_t examples, int fields, int dim, float* sum) override {
    ParallelFor(examples, int64_t{fields} * dim,
                [=](int64_t n) { kernel::FieldSumRow(x, fields, dim, n, sum + n * dim); });
    return absl::OkStatus();
  }
  absl::Status FmForward(const float* x, const float* sum, int64_t examples, int fields, int dim,
                         float* out) override {
    if (dim > kMaxRowScratch) {
      ParallelFor(examples, int64_t{fields} * dim,
                  [=](int64_t n) { out[n] = kernel::FmInteraction(x, sum, fields, dim, n); });
      return absl::OkStatus();
    }
    ParallelFor(examples, int64_t{fields} * dim, [=](int64_t n) {
      float squares[kMaxRowScratch];
      out[n] = kernel::FmInteractionRows(x, sum, fields, dim, n, squares);
    });
    return absl::OkStatus();
  }
  absl::Status FmBackward(const float* x, const float* sum, const float* g, int64_t examples, int fields, int dim,
                          float* dx) override {
    ParallelFor(examples, int64_t{fields} * dim, [=](int64_t n) {
      for (int f = 0; f < fields; ++f) {
        for (int d = 0; d < dim; ++d) {
          dx[(n * fields + f) * dim + d] = kernel::FmGradElement(x, sum, g, fields, dim, n, f, d);
        }
      }
    });
    return absl::OkStatus();
  }
  absl::Status DotInteraction(const float* v, int64_t examples, int m, int dim, float* z) override {
    const int pairs = m * (m - 1) / 2;
    ParallelFor(examples, int64_t{pairs} * dim, [=](int64_t n) {
      for (int k = 0; k < pairs; ++k) z[n * pairs + k] = kernel::DotInteractionElement(v, m, dim, n, k);
    });
    return absl::OkStatus();
  }
  absl::Status DotInteractionBackward(const float* v, const float* dz, int64_t examples, int m, int dim,
                                      float* dv) override {
    ParallelFor(examples, int64_t{m} * m * dim, [=](int64_t n) {
      for (int i = 0; i < m; ++i) {
        for (int d = 0; d < dim; ++d) {
          dv[(n * m + i) * dim + d] = kernel::DotInteractionGradElement(v, dz, m, dim, n, i, d);
        }
      }
    });
    return absl::OkStatus();
  }
  absl::Status CopyBlock(const float* src, int src_stride, float* dst, int dst_stride, int64_t rows, int cols,
                         bool accumulate) override {
    ParallelFor(rows, cols, [=](int64_t r) {
      const float* s = src + r * src_stride;
      float* t = dst + r * dst_stride;
      if (accumulate) {
        for (int c = 0; c < cols; ++c) t[c] += s[c];
      } else {
        std::memcpy(t, s, sizeof(float) * cols);
      }
    });
    return absl::OkStatus();
  }
  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, const float* b,
                    float beta, float* c) override {
    if (m <= 0 || n <= 0) return absl::OkStatus();
    if (gemm_ == CpuGemm::kReference) return ReferenceGemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
    if (k <= 0) {  // C = beta * C; BLAS would too, but some skip the scaling when k is 0
      for (int64_t e = 0; e < int64_t{m} * n; ++e) c[e] = beta == 0.0f ? 0.0f : beta * c[e];
      return absl::OkStatus();
    }
    // oneDNN (OpenMP threading) runs on as many threads as the calling thread's OpenMP setting allows.
    omp_set_num_threads(threads_);
    const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a,
                                            trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
    if (status != dnnl_success) {
      return absl::InternalError(absl::StrCat("dnnl_sgemm(", m, "x", n, "x", k, ") failed with status ", status));
    }
    return absl::OkStatus();
  }
  absl::Status BiasActivation(float* x, const float* bias, int64_t rows, int cols, bool relu) override {
    ParallelFor(rows, cols, [=](int64_t r) {
      for (int c = 0; c < cols; ++c) x[r * cols + c] = kernel::BiasActivation(x[r * cols + c], bias[c], relu);
    });
    return absl::OkStatus();
  }
  absl::Status ReluBackward(const float* y, float* dy, int64_t count) override {
    constexpr int64_t kChunk = 4096;
    ParallelFor((count + kChunk - 1) / kChunk, kChunk, [=](int64_t chunk) {
      const int64_t end = std::min(count, (chunk + 1) * kChunk);
      for (int64_t i = chunk * kChunk; i < end; ++i) dy[i] = kernel::ReluGrad(y[i], dy[i]);
    });
    return absl::OkStatus();
  }
  absl::Status ColumnSum(const float* x, int64_t rows, int cols, float* out) override {
    // Blocks of columns per thread; within a block the rows are walked in order (cache-friendly), so every
    // column is still summed in row order, like kernel::ColumnSumElement.
    constexpr int kBlock = 16;
    const int blocks = (cols + kBlock - 1) / kBlock;
    ParallelFor(blocks, rows * kBlock, [=](int64_t block) {
      const int first = static_cast<int>(block) * kBlock;
      const int width = std::min(kBlock, cols - first);
      float acc[kBlock] = {};
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * cols + first;
        for (int c = 0; c < width; ++c) acc[c] += row[c];
      }
      for (int c = 0; c < width; ++c) out[first + c] = acc[c];
    });
    return absl::OkStatus();
  }
  absl::Status LogitLoss(const float* bias, const float* wide, const float* fm, const float* deep,
                         const float* labels, const float* weights, int64_t examples, float scale, float* prob,
                         float* loss, float* dlogit) override {
    const float b = *bias;
    ParallelFor(examples, 64, [=](int64_t n) {
      kernel::LogitLossElement(b, wide, fm, deep, labels, weights, scale, n, prob, loss, dlogit);
    });
    return absl::OkStatus();
  }
  absl::Status SegmentSum(const float* dx, const float* values, const uint32_t* offsets, const uint32_t* positions,
                          const uint32_t* entry_bags, int dim, int group, int64_t segments,
                          float* grad_rows) override {
    // Work per segment varies (popular keys have many entries); the static partition over segments is still
    // balanced enough at batch sizes where it matters, and it keeps one thread per output row.
    const int64_t positions_total = segments > 0 ? offsets[segments] : 0;
    ParallelFor(segments, std::max<int64_t>(1, positions_total / std::max<int64_t>(segments, 1)) * dim,
                [=](int64_t u) {
                  kernel::SegmentSumRow(dx, values, offsets, positions, entry_bags, dim, group, u,
                                        grad_rows + u * dim);
                });
    return absl::OkStatus();
  }

 private:
  // Runs body(i) for i in [0, count), split into one contiguous range per thread (OpenMP's static schedule)
  // when the op is large enough (`work_per_item` element operations each).
  template <typename Body>
  void ParallelFor(int64_t count, int64_t work_per_item, const Body& body) const {
    if (threads_ <= 1 || count < 2 || count * work_per_item < kParallelWork) {
      for (int64_t i = 0; i < count; ++i) body(i);
      return;
    }
#pragma omp parallel for schedule(static) num_threads(threads_)
    for (int64_t i = 0; i < count; ++i) body(i);
  }

  // The hand-written GEMM: row-major loops in a cache-friendly order, summing each element over k in order
  // like kernel::GemmElement.
  absl::Status ReferenceGemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                             const float* b, float beta, float* c) {
    if (!trans_a && !trans_b) {
      for (int i = 0; i < m; ++i) {
        float* row = c + static_cast<int64_t>(i) * n;
        for (int j = 0; j < n; ++j) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
        std::vector<float>& acc = scratch_;
        acc.assign(n, 0.0f);
        for (int t = 0; t < k; ++t) {
          const float av = a[static_cast<int64_t>(i) * k + t];
          const float* brow = b + static_cast<int64_t>(t) * n;
          for (int j = 0; j < n; ++j) acc[j] += av * brow[j];
        }
        for (int j = 0; j < n; ++j) row[j] += alpha * acc[j];
      }
      return absl::OkStatus();
    }
    if (trans_a && !trans_b) {
      // C = A^T B (the MLP's weight gradients): walk A and B row by row, accumulating every output in the
      // same k order as GemmElement.
      std::vector<float>& acc = scratch_;
      acc.assign(static_cast<size_t>(m) * n, 0.0f);
      for (int t = 0; t < k; ++t) {
        const float* arow = a + static_cast<int64_t>(t) * m;
        const float* brow = b + static_cast<int64_t>(t) * n;
        for (int i = 0; i < m; ++i) {
          const float av = arow[i];
          float* out = acc.data() + static_cast<int64_t>(i) * n;
          for (int j = 0; j < n; ++j) out[j] += av * brow[j];
        }
      }
      for (int64_t e = 0; e < static_cast<int64_t>(m) * n; ++e) {
        c[e] = beta == 0.0f ? alpha * acc[e] : alpha * acc[e] + beta * c[e];
      }
      return absl::OkStatus();
    }
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        float* cij = c + static_cast<int64_t>(i) * n + j;
        *cij = kernel::GemmElement(trans_a, trans_b, m, n, k, alpha, a, b, beta, *cij, i, j);
      }
    }
    return absl::OkStatus();
  }

  int threads_;
  const CpuGemm gemm_;
  std::vector<float> scratch_;  // the reference GEMM's accumulators
};

}  // namespace

int DefaultComputeThreads() { return UsableCores(); }

std::unique_ptr<Backend> NewCpuBackend(const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

std::unique_ptr<Backend> NewReferenceCpuBackend() {
  CpuBackendOptions options;
  options.threads = 1;
  options.gemm = CpuGemm::kReference;
  return NewCpuBackend(options);
}

}  // namespace kestrel
