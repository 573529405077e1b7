// Backend: where a model's math runs, the CPU (cpu_backend.h, the reference) or a CUDA GPU (cuda_backend.h).
//
// A backend owns its memory space. Device arrays (Allocate) live there: host memory for the CPU backend, GPU
// memory for CUDA. Host staging arrays (AllocateHost) are pinned on CUDA so copies run asynchronously. Every
// op is enqueued in order on the backend's one stream and may return before it has run; Synchronize() waits
// for all of them, and must be called before reading a CopyToHost result. Pointers passed to ops are device
// arrays. Each op's element math is in kernel_math.h, shared by both backends.
//
// Not thread-safe: one Backend per training thread. Arrays must be freed by the backend that allocated them.
#ifndef KESTREL_WORKER_COMPUTE_BACKEND_H_
#define KESTREL_WORKER_COMPUTE_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace kestrel {

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu" or "cuda:<device>".
  virtual std::string name() const = 0;
  // Whether the model computes on an accelerator while the host's cores are free (CUDA), rather than on the
  // host's cores (the CPU backend). Default: false.
  virtual bool accelerator() const { return false; }

  // Memory.
  [[nodiscard]] virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* p) = 0;
  [[nodiscard]] virtual absl::StatusOr<void*> AllocateHost(size_t bytes) = 0;
  virtual void FreeHost(void* p) = 0;
  // Enqueue copies; `host` must stay untouched (CopyToDevice) or unread (CopyToHost) until Synchronize().
  [[nodiscard]] virtual absl::Status CopyToDevice(void* device, const void* host, size_t bytes) = 0;
  [[nodiscard]] virtual absl::Status CopyToHost(void* host, const void* device, size_t bytes) = 0;
  // Sets `bytes` of a device array to zero.
  [[nodiscard]] virtual absl::Status Zero(void* device, size_t bytes) = 0;
  [[nodiscard]] virtual absl::Status Synchronize() = 0;
  // The arithmetic of Gemm from now on: kFp32 (the default), or kTf32, tensor cores on TF32-rounded inputs with
  // fp32 accumulation where the backend has them (ModelConfig.gemm_precision). A backend without them (the CPU)
  // keeps computing fp32 and answers OK.
  enum class GemmMath { kFp32, kTf32 };
  [[nodiscard]] virtual absl::Status SetGemmMath(GemmMath math) {
    (void)math;
    return absl::OkStatus();
  }

  // Ops (layouts in kernel_math.h).
  // Pools each bag's rows: x[b, :] = sum over bag b's entries e (ascending) of values[e] * rows[index[e], :],
  // for b < bags. Bag b holds entries [bag_offsets[b], bag_offsets[b + 1]); with bag_offsets null it holds
  // entry b alone (x[b, :] = values[b] * rows[index[b], :] exactly). An empty bag gives zeros.
  [[nodiscard]] virtual absl::Status Pool(const float* rows, int dim, const uint32_t* index, const float* values,
                            const uint32_t* bag_offsets, int64_t bags, float* x) = 0;
  // sum[n, :] = sum_f x[n, f, :] for n < examples.
  [[nodiscard]] virtual absl::Status FieldSum(const float* x, int64_t examples, int fields, int dim, float* sum) = 0;
  // out[n] = the FM pairwise term of example n.
  [[nodiscard]] virtual absl::Status FmForward(const float* x, const float* sum, int64_t examples, int fields, int dim,
                                 float* out) = 0;
  // dx[n, f, d] = g[n] * (sum[n, d] - x[n, f, d]).
  [[nodiscard]] virtual absl::Status FmBackward(const float* x, const float* sum, const float* g, int64_t examples, int fields,
                                  int dim, float* dx) = 0;
  // DLRM: z[n, k] = <v[n, i], v[n, j]> for the m (m - 1) / 2 pairs k = (i < j) of the m vectors of v[n].
  [[nodiscard]] virtual absl::Status DotInteraction(const float* v, int64_t examples, int m, int dim, float* z) = 0;
  // dv[n, i, :] = sum over j != i of dz[n, pair(i, j)] * v[n, j, :].
  [[nodiscard]] virtual absl::Status DotInteractionBackward(const float* v, const float* dz, int64_t examples, int m, int dim,
                                              float* dv) = 0;
  // dst[r, c] (+)= src[r, c] for r < rows, c < cols, with row strides src_stride and dst_stride (floats);
  // accumulate adds instead of overwriting.
  [[nodiscard]] virtual absl::Status CopyBlock(const float* src, int src_stride, float* dst, int dst_stride, int64_t rows,
                                 int cols, bool accumulate) = 0;
  // Row-major C[m, n] = alpha * op(A) op(B) + beta * C; op(A) is m x k, op(B) k x n, both contiguous.
  [[nodiscard]] virtual absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                            const float* b, float beta, float* c) = 0;
  // x[r, c] = BiasActivation(x[r, c], bias[c], relu) in place.
  [[nodiscard]] virtual absl::Status BiasActivation(float* x, const float* bias, int64_t rows, int cols, bool relu) = 0;
  // dy[i] = ReluGrad(y[i], dy[i]) in place.
  [[nodiscard]] virtual absl::Status ReluBackward(const float* y, float* dy, int64_t count) = 0;
  // out[c] = sum_r x[r, c].
  [[nodiscard]] virtual absl::Status ColumnSum(const float* x, int64_t rows, int cols, float* out) = 0;
  // For n < examples: logit = CombineLogit(*bias, wide, fm, deep, n) (null parts are absent); prob[n] =
  // sigmoid(logit); loss[n] = weights[n] * logloss; dlogit[n] = weights[n] * LogitGrad(logit, labels[n],
  // scale). `bias` is a device pointer to one float. `weights` null: every example weighs 1. `labels`, `loss`
  // and `dlogit` may be null (inference).
  [[nodiscard]] virtual absl::Status LogitLoss(const float* bias, const float* wide, const float* fm, const float* deep,
                                 const float* labels, const float* weights, int64_t examples, float scale,
                                 float* prob, float* loss, float* dlogit) = 0;
  // Pool's backward into unique rows: grad_rows[u, :] = sum over segment u's entries p (ascending) of
  // values[p] * dx[bag(p) / group, :], for u < segments, where bag(p) = entry_bags[p], or p with entry_bags
  // null (group >= 1; see kernel::SegmentSumElement).
  [[nodiscard]] virtual absl::Status SegmentSum(const float* dx, const float* values, const uint32_t* offsets,
                                  const uint32_t* positions, const uint32_t* entry_bags, int dim, int group,
                                  int64_t segments, float* grad_rows) = 0;
};

// An array of T in device memory (kHost = false) or pinned host staging memory (kHost = true) that grows on
// demand and is reused across steps. Not thread-safe.
template <typename T, bool kHost>
class BackendArray {
 public:
  explicit BackendArray(Backend* backend) : backend_(backend) {}
  BackendArray(const BackendArray&) = delete;
  BackendArray& operator=(const BackendArray&) = delete;
  ~BackendArray() { Release(); }
  // Makes room for n elements (contents are lost when it grows).
  [[nodiscard]] absl::Status Reserve(size_t n) {
    if (n <= capacity_) return absl::OkStatus();
    Release();
    absl::StatusOr<void*> p = kHost ? backend_->AllocateHost(n * sizeof(T)) : backend_->Allocate(n * sizeof(T));
    if (!p.ok()) return p.status();
    data_ = static_cast<T*>(*p);
    capacity_ = n;
    return absl::OkStatus();
  }
  T* data() const { return data_; }

 private:
  void Release() {
    if (data_ == nullptr) return;
    if (kHost) {
      backend_->FreeHost(data_);
    } else {
      backend_->Free(data_);
    }
    data_ = nullptr;
    capacity_ = 0;
  }

  Backend* backend_;
  T* data_ = nullptr;
  size_t capacity_ = 0;
};

template <typename T>
using DeviceArray = BackendArray<T, false>;
template <typename T>
using HostArray = BackendArray<T, true>;

}  // namespace kestrel

#endif  // KESTREL_WORKER_COMPUTE_BACKEND_H_
