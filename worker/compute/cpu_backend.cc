// The CPU backend: each op is a loop over its kernel_math.h element function, run on the calling thread (so
// it is deterministic and needs no Synchronize). Copies are memcpy.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/compute/cpu_backend.h"
#include "worker/compute/kernel_math.h"

namespace kestrel {
namespace {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }

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

  absl::Status Gather(const float* rows, int dim, const uint32_t* index, const float* values, int64_t count,
                      float* x) override {
    for (int64_t p = 0; p < count; ++p) {
      for (int d = 0; d < dim; ++d) x[p * dim + d] = kernel::GatherElement(rows, index, values, dim, p, d);
    }
    return absl::OkStatus();
  }
  absl::Status FieldSum(const float* x, int64_t examples, int fields, int dim, float* sum) override {
    for (int64_t n = 0; n < examples; ++n) {
      for (int d = 0; d < dim; ++d) sum[n * dim + d] = kernel::FieldSumElement(x, fields, dim, n, d);
    }
    return absl::OkStatus();
  }
  absl::Status FmForward(const float* x, const float* sum, int64_t examples, int fields, int dim,
                         float* out) override {
    for (int64_t n = 0; n < examples; ++n) out[n] = kernel::FmInteraction(x, sum, fields, dim, n);
    return absl::OkStatus();
  }
  absl::Status FmBackward(const float* x, const float* sum, const float* g, int64_t examples, int fields, int dim,
                          float* dx) override {
    for (int64_t n = 0; n < examples; ++n) {
      for (int f = 0; f < fields; ++f) {
        for (int d = 0; d < dim; ++d) {
          dx[(n * fields + f) * dim + d] = kernel::FmGradElement(x, sum, g, fields, dim, n, f, d);
        }
      }
    }
    return absl::OkStatus();
  }
  absl::Status DotInteraction(const float* v, int64_t examples, int m, int dim, float* z) override {
    const int pairs = m * (m - 1) / 2;
    for (int64_t n = 0; n < examples; ++n) {
      for (int k = 0; k < pairs; ++k) z[n * pairs + k] = kernel::DotInteractionElement(v, m, dim, n, k);
    }
    return absl::OkStatus();
  }
  absl::Status DotInteractionBackward(const float* v, const float* dz, int64_t examples, int m, int dim,
                                      float* dv) override {
    for (int64_t n = 0; n < examples; ++n) {
      for (int i = 0; i < m; ++i) {
        for (int d = 0; d < dim; ++d) {
          dv[(n * m + i) * dim + d] = kernel::DotInteractionGradElement(v, dz, m, dim, n, i, d);
        }
      }
    }
    return absl::OkStatus();
  }
  absl::Status CopyBlock(const float* src, int src_stride, float* dst, int dst_stride, int64_t rows, int cols,
                         bool accumulate) override {
    for (int64_t r = 0; r < rows; ++r) {
      const float* s = src + r * src_stride;
      float* t = dst + r * dst_stride;
      for (int c = 0; c < cols; ++c) t[c] = accumulate ? t[c] + s[c] : s[c];
    }
    return absl::OkStatus();
  }
  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, const float* b,
                    float beta, float* c) override {
    // Row-major loops in a cache-friendly order, summing each element over k in order like GemmElement.
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
  absl::Status BiasActivation(float* x, const float* bias, int64_t rows, int cols, bool relu) override {
    for (int64_t r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) x[r * cols + c] = kernel::BiasActivation(x[r * cols + c], bias[c], relu);
    }
    return absl::OkStatus();
  }
  absl::Status ReluBackward(const float* y, float* dy, int64_t count) override {
    for (int64_t i = 0; i < count; ++i) dy[i] = kernel::ReluGrad(y[i], dy[i]);
    return absl::OkStatus();
  }
  absl::Status ColumnSum(const float* x, int64_t rows, int cols, float* out) override {
    for (int c = 0; c < cols; ++c) out[c] = kernel::ColumnSumElement(x, rows, cols, c);
    return absl::OkStatus();
  }
  absl::Status LogitLoss(const float* bias, const float* wide, const float* fm, const float* deep,
                         const float* labels, int64_t examples, float scale, float* prob, float* loss,
                         float* dlogit) override {
    for (int64_t n = 0; n < examples; ++n) {
      const float z = kernel::CombineLogit(*bias, wide, fm, deep, n);
      prob[n] = kernel::Sigmoid(z);
      if (labels == nullptr) continue;
      if (loss != nullptr) loss[n] = kernel::LogLossFromLogit(z, labels[n]);
      if (dlogit != nullptr) dlogit[n] = kernel::LogitGrad(z, labels[n], scale);
    }
    return absl::OkStatus();
  }
  absl::Status SegmentSum(const float* dx, const float* values, const uint32_t* offsets, const uint32_t* positions,
                          int dim, int group, int64_t segments, float* grad_rows) override {
    for (int64_t u = 0; u < segments; ++u) {
      for (int d = 0; d < dim; ++d) {
        grad_rows[u * dim + d] = kernel::SegmentSumElement(dx, values, offsets, positions, dim, group, u, d);
      }
    }
    return absl::OkStatus();
  }

 private:
  std::vector<float> scratch_;
};

}  // namespace

std::unique_ptr<Backend> NewCpuBackend() { return std::make_unique<CpuBackend>(); }

}  // namespace kestrel
