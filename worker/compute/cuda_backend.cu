// The CUDA backend (cuda_backend.h): one non-blocking stream and one cuBLAS handle on one device.
//
// Every op except Gemm is a grid-stride kernel that computes one output element per thread by calling the
// same kernel_math.h function the CPU backend loops over, so the two backends share their math and a GPU test
// only has to compare them. Elements that reduce (Pool, FieldSum, FmForward, ColumnSum, SegmentSum) are summed
// by one thread in the same fixed order as on the CPU: no atomics, so every op is bitwise repeatable run to run.
// They need not be bitwise equal to the CPU's, since nvcc fuses a * b + c into one FMA where g++ rounds twice;
// the GPU test allows 1e-5. Gemm is cuBLAS SGEMM in full fp32 (no TF32), within 1e-5 of the CPU's loops, unless
// SetGemmMath(kTf32) opts into tensor cores (ModelConfig.gemm_precision).
//
// Ops only enqueue work; errors a kernel hits while running surface at the next launch check or at
// Synchronize(). Indices are 64-bit throughout: examples * fields * dim overflows int at realistic batch sizes.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "worker/compute/backend.h"
#include "worker/compute/cuda_backend.h"
#include "worker/compute/kernel_math.h"

namespace kestrel {
namespace {

// Threads per block for every elementwise kernel: a multiple of the warp size that keeps enough blocks
// resident per SM on Ampere and Hopper.
constexpr int kThreads = 256;
// Grid-stride loops cover any size, so the grid is capped: 8192 blocks of 256 threads is several waves on an
// H100/H200 (132 SMs x 2048 resident threads) and keeps the per-launch block scheduling cost bounded.
constexpr int64_t kMaxBlocks = 8192;

int BlocksFor(int64_t total) { return static_cast<int>(std::min((total + kThreads - 1) / kThreads, kMaxBlocks)); }

[[nodiscard]] absl::Status CudaError(cudaError_t e, const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

// The Status of a runtime call. A failed call also stays behind as this thread's "last error", which the next
// launch check (cudaGetLastError) would then blame on its kernel; it is cleared here, where it is reported.
// (A sticky error, one that broke the context, stays and fails every later call anyway.)
[[nodiscard]] absl::Status CudaStatus(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return CudaError(e, what);
}

[[nodiscard]] absl::Status CublasError(cublasStatus_t s, const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", cublasGetStatusName(s), " (", cublasGetStatusString(s), ")"));
}

// The launch check shared by every launcher: a bad configuration, or an error a kernel enqueued earlier hit
// while running (those are sticky), reported under the name of the kernel whose launch saw it.
[[nodiscard]] absl::Status CheckLaunch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? absl::OkStatus() : CudaError(e, absl::StrCat("launching ", kernel));
}

// Grid-stride loop bounds: thread i handles elements i, i + Stride(), ... in 64 bits.
__device__ inline int64_t FirstIndex() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline int64_t Stride() { return static_cast<int64_t>(blockDim.x) * gridDim.x; }

// ---- Kernels: one output element per thread, the math in kernel_math.h. ----

// One thread per (bag, d): adjacent threads read adjacent elements of each entry's row, so the entry loop is
// coalesced; each sums its bag's entries in ascending order.
__global__ void PoolKernel(const float* rows, int dim, const uint32_t* index, const float* values,
                           const uint32_t* bag_offsets, int64_t bags, float* x) {
  const int64_t total = bags * dim;
  for (int64_t i = FirstIndex(); i < total; i += Stride()) {
    x[i] = kernel::PoolElement(rows, index, values, bag_offsets, dim, i / dim, static_cast<int>(i % dim));
  }
}

__global__ void FieldSumKernel(const float* x, int64_t examples, int fields, int dim, float* sum) {
  const int64_t total = examples * dim;
  for (int64_t i = FirstIndex(); i < total; i += Stride()) {
    sum[i] = kernel::FieldSumElement(x, fields, dim, i / dim, static_cast<int>(i % dim));
  }
}

__global__ void FmForwardKernel(const float* x, const float* sum, int64_t examples, int fields, int dim,
                                float* out) {
  for (int64_t n = FirstIndex(); n < examples; n += Stride()) {
    out[n] = kernel::FmInteraction(x, sum, fields, dim, n);
  }
}

__global__ void FmBackwardKernel(const float* x, const float* sum, const float* g, int64_t examples, int fields,
                                 int dim, float* dx) {
  const int64_t total = examples * fields * dim;
  for (int64_t i = FirstIndex(); i < total; i += Stride()) {
    const int64_t nf = i / dim;
    dx[i] = kernel::FmGradElement(x, sum, g, fields, dim, nf / fields, static_cast<int>(nf % fields),
                                  static_cast<int>(i % dim));
  }
}

__global__ void DotInteractionKernel(const float* v, int64_t examples, int m, int dim, float* z) {
  const int pairs = m * (m - 1) / 2;
  const int64_t total = examples * pairs;
  for (int64_t i = FirstIndex(); i < total; i += Stride()) {
    z[i] = kernel::DotInteractionElement(v, m, dim, i / pairs, static_cast<int>(i % pairs));
  }
}

__global__ void DotInteractionBackwardKernel(const float* v, const float* dz, int64_t examples, int m, int dim,
                                             float* dv) {
  const int64_t total = examples * m * dim;
  for (int64_t i = FirstIndex(); i < total; i += Stride()) {
    const int64_t nm = i / dim;
    dv[i] = kernel::DotInteractionGradElement(v, dz, m, dim, nm / m, static_cast<int>(nm % m),
                                              static_cast<int>(i % dim));
  }
}

__global__ void CopyBlockKernel(const float* src, int src_stride, float* dst, int dst_stride, int64_t rows,
                                int cols, bool accumulate) {
  const int64_t total = rows * cols;
  for (int64_t i = FirstIndex(); i < total; i += Stride()) {
    const int64_t r = i / cols;
    const int64_t c = i % cols;
    const float s = src[r * src_stride + c];
    float* t = dst + r * dst_stride + c;
    *t = accumulate ? *t + s : s;
  }
}

__global__ void BiasActivationKernel(float* x, const float* bias, int64_t rows, int cols, bool relu) {
  const int64_t total = rows * cols;
  for (int64_t i = FirstIndex(); i < total; i += Stride()) {
    x[i] = kernel::BiasActivation(x[i], bias[i % cols], relu);
  }
}

__global__ void ReluBackwardKernel(const float* y, float* dy, int64_t count) {
  for (int64_t i = FirstIndex(); i < count; i += Stride()) dy[i] = kernel::ReluGrad(y[i], dy[i]);
}

// One thread per column: adjacent threads read adjacent columns of each row, so the row loop is coalesced.
__global__ void ColumnSumKernel(const float* x, int64_t rows, int cols, float* out) {
  for (int64_t c = FirstIndex(); c < cols; c += Stride()) {
    out[c] = kernel::ColumnSumElement(x, rows, cols, static_cast<int>(c));
  }
}

// One thread per example. `bias` is read on the device so the host never waits for the model's bias.
__global__ void LogitLossKernel(const float* bias, const float* wide, const float* fm, const float* deep,
                                const float* labels, const float* weights, int64_t examples, float scale,
                                float* prob, float* loss, float* dlogit) {
  const float b = *bias;
  for (int64_t n = FirstIndex(); n < examples; n += Stride()) {
    kernel::LogitLossElement(b, wide, fm, deep, labels, weights, scale, n, prob, loss, dlogit);
  }
}

// One thread per (unique row, d): each sums its segment's entries in ascending order, which is what makes
// the embedding gradient deterministic (an atomicAdd scatter would not be).
__global__ void SegmentSumKernel(const float* dx, const float* values, const uint32_t* offsets,
                                 const uint32_t* positions, const uint32_t* entry_bags, int dim, int group,
                                 int64_t segments, float* grad_rows) {
  const int64_t total = segments * dim;
  for (int64_t i = FirstIndex(); i < total; i += Stride()) {
    grad_rows[i] = kernel::SegmentSumElement(dx, values, offsets, positions, entry_bags, dim, group, i / dim,
                                             static_cast<int>(i % dim));
  }
}

// ---- Launchers: size the grid, enqueue on `stream`, check the launch. Empty work launches nothing. ----

[[nodiscard]] absl::Status LaunchPool(cudaStream_t stream, const float* rows, int dim, const uint32_t* index,
                        const float* values, const uint32_t* bag_offsets, int64_t bags, float* x) {
  const int64_t total = bags * dim;
  if (total <= 0) return absl::OkStatus();
  PoolKernel<<<BlocksFor(total), kThreads, 0, stream>>>(rows, dim, index, values, bag_offsets, bags, x);
  return CheckLaunch("PoolKernel");
}

[[nodiscard]] absl::Status LaunchFieldSum(cudaStream_t stream, const float* x, int64_t examples, int fields, int dim,
                            float* sum) {
  const int64_t total = examples * dim;
  if (total <= 0) return absl::OkStatus();
  FieldSumKernel<<<BlocksFor(total), kThreads, 0, stream>>>(x, examples, fields, dim, sum);
  return CheckLaunch("FieldSumKernel");
}

[[nodiscard]] absl::Status LaunchFmForward(cudaStream_t stream, const float* x, const float* sum, int64_t examples, int fields,
                             int dim, float* out) {
  if (examples <= 0) return absl::OkStatus();
  FmForwardKernel<<<BlocksFor(examples), kThreads, 0, stream>>>(x, sum, examples, fields, dim, out);
  return CheckLaunch("FmForwardKernel");
}

[[nodiscard]] absl::Status LaunchFmBackward(cudaStream_t stream, const float* x, const float* sum, const float* g,
                              int64_t examples, int fields, int dim, float* dx) {
  const int64_t total = examples * fields * dim;
  if (total <= 0) return absl::OkStatus();
  FmBackwardKernel<<<BlocksFor(total), kThreads, 0, stream>>>(x, sum, g, examples, fields, dim, dx);
  return CheckLaunch("FmBackwardKernel");
}

[[nodiscard]] absl::Status LaunchDotInteraction(cudaStream_t stream, const float* v, int64_t examples, int m, int dim,
                                  float* z) {
  const int64_t total = examples * (int64_t{m} * (m - 1) / 2);
  if (total <= 0) return absl::OkStatus();
  DotInteractionKernel<<<BlocksFor(total), kThreads, 0, stream>>>(v, examples, m, dim, z);
  return CheckLaunch("DotInteractionKernel");
}

[[nodiscard]] absl::Status LaunchDotInteractionBackward(cudaStream_t stream, const float* v, const float* dz, int64_t examples,
                                          int m, int dim, float* dv) {
  const int64_t total = examples * m * dim;
  if (total <= 0) return absl::OkStatus();
  DotInteractionBackwardKernel<<<BlocksFor(total), kThreads, 0, stream>>>(v, dz, examples, m, dim, dv);
  return CheckLaunch("DotInteractionBackwardKernel");
}

[[nodiscard]] absl::Status LaunchCopyBlock(cudaStream_t stream, const float* src, int src_stride, float* dst, int dst_stride,
                             int64_t rows, int cols, bool accumulate) {
  const int64_t total = rows * cols;
  if (rows <= 0 || cols <= 0) return absl::OkStatus();
  CopyBlockKernel<<<BlocksFor(total), kThreads, 0, stream>>>(src, src_stride, dst, dst_stride, rows, cols,
                                                              accumulate);
  return CheckLaunch("CopyBlockKernel");
}

[[nodiscard]] absl::Status LaunchBiasActivation(cudaStream_t stream, float* x, const float* bias, int64_t rows, int cols,
                                  bool relu) {
  const int64_t total = rows * cols;
  if (rows <= 0 || cols <= 0) return absl::OkStatus();
  BiasActivationKernel<<<BlocksFor(total), kThreads, 0, stream>>>(x, bias, rows, cols, relu);
  return CheckLaunch("BiasActivationKernel");
}

[[nodiscard]] absl::Status LaunchReluBackward(cudaStream_t stream, const float* y, float* dy, int64_t count) {
  if (count <= 0) return absl::OkStatus();
  ReluBackwardKernel<<<BlocksFor(count), kThreads, 0, stream>>>(y, dy, count);
  return CheckLaunch("ReluBackwardKernel");
}

// rows == 0 still launches: every column sum is then 0, as on the CPU.
[[nodiscard]] absl::Status LaunchColumnSum(cudaStream_t stream, const float* x, int64_t rows, int cols, float* out) {
  if (cols <= 0) return absl::OkStatus();
  ColumnSumKernel<<<BlocksFor(cols), kThreads, 0, stream>>>(x, rows, cols, out);
  return CheckLaunch("ColumnSumKernel");
}

[[nodiscard]] absl::Status LaunchLogitLoss(cudaStream_t stream, const float* bias, const float* wide, const float* fm,
                             const float* deep, const float* labels, const float* weights, int64_t examples,
                             float scale, float* prob, float* loss, float* dlogit) {
  if (examples <= 0) return absl::OkStatus();
  LogitLossKernel<<<BlocksFor(examples), kThreads, 0, stream>>>(bias, wide, fm, deep, labels, weights, examples,
                                                                 scale, prob, loss, dlogit);
  return CheckLaunch("LogitLossKernel");
}

[[nodiscard]] absl::Status LaunchSegmentSum(cudaStream_t stream, const float* dx, const float* values, const uint32_t* offsets,
                              const uint32_t* positions, const uint32_t* entry_bags, int dim, int group,
                              int64_t segments, float* grad_rows) {
  const int64_t total = segments * dim;
  if (total <= 0) return absl::OkStatus();
  SegmentSumKernel<<<BlocksFor(total), kThreads, 0, stream>>>(dx, values, offsets, positions, entry_bags, dim,
                                                               group, segments, grad_rows);
  return CheckLaunch("SegmentSumKernel");
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {}
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  // Releases whatever Init() created (it may have failed part way, or before there was a device to select).
  // Waits for queued work first, so nothing still running can touch memory the caller frees next.
  ~CudaBackend() override {
    if (stream_ == nullptr && blas_ == nullptr) return;
    cudaSetDevice(device_);
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (blas_ != nullptr) cublasDestroy(blas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status Init() {
    int count = 0;
    // No driver reads as no device: the caller asked for hardware this machine does not have.
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    cudaGetLastError();  // a failed device query must not be blamed on the first kernel launch
    if (device_ < 0 || device_ >= count) {
      return absl::FailedPreconditionError(
          absl::StrCat("no CUDA device ", device_, ": this machine has ", count, " device(s)"));
    }
    if (absl::Status s = SetDevice(); !s.ok()) return s;
    // Non-blocking: the legacy default stream, which other libraries in the process may use, must not
    // serialize with this one.
    const cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      stream_ = nullptr;
      return CudaStatus(e, "cudaStreamCreateWithFlags");
    }
    cublasStatus_t blas = cublasCreate(&blas_);
    if (blas != CUBLAS_STATUS_SUCCESS) {
      blas_ = nullptr;
      return CublasError(blas, "cublasCreate");
    }
    if ((blas = cublasSetStream(blas_, stream_)) != CUBLAS_STATUS_SUCCESS) {
      return CublasError(blas, "cublasSetStream");
    }
    // alpha and beta are host floats passed by address; host mode reads them at call time.
    if ((blas = cublasSetPointerMode(blas_, CUBLAS_POINTER_MODE_HOST)) != CUBLAS_STATUS_SUCCESS) {
      return CublasError(blas, "cublasSetPointerMode");
    }
    // CUBLAS_DEFAULT_MATH keeps SGEMM in fp32 (CUBLAS_COMPUTE_32F): TF32 tensor cores and the BF16x9
    // emulation are opt-in modes in CUDA 13 and both would break the 1e-5 agreement with the CPU backend.
    if ((blas = cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS) {
      return CublasError(blas, "cublasSetMathMode");
    }
    return absl::OkStatus();
  }

  std::string name() const override { return absl::StrCat("cuda:", device_); }
  bool accelerator() const override { return true; }

  absl::Status SetGemmMath(GemmMath math) override {
    if (absl::Status s = SetDevice(); !s.ok()) return s;
    const cublasStatus_t blas =
        cublasSetMathMode(blas_, math == GemmMath::kTf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
    return blas == CUBLAS_STATUS_SUCCESS ? absl::OkStatus() : CublasError(blas, "cublasSetMathMode");
  }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    if (absl::Status s = SetDevice(); !s.ok()) return s;
    void* p = nullptr;
    // At least one byte, like the CPU backend: every allocation is a distinct non-null pointer.
    const cudaError_t e = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
    if (e != cudaSuccess) return AllocationError(e, "cudaMalloc", bytes);
    return p;
  }
  // Free cannot report: a failure is a bad pointer (a caller's bug) or a broken context, which every later
  // call reports anyway. Either way it is cleared, so the next launch check does not blame its kernel.
  void Free(void* p) override {
    if (p == nullptr) return;
    (void)CudaStatus(cudaSetDevice(device_), "cudaSetDevice");
    (void)CudaStatus(cudaFree(p), "cudaFree");
  }
  absl::StatusOr<void*> AllocateHost(size_t bytes) override {
    if (absl::Status s = SetDevice(); !s.ok()) return s;
    void* p = nullptr;
    const cudaError_t e = cudaMallocHost(&p, bytes == 0 ? 1 : bytes);
    if (e != cudaSuccess) return AllocationError(e, "cudaMallocHost", bytes);
    return p;
  }
  void FreeHost(void* p) override {
    if (p == nullptr) return;
    (void)CudaStatus(cudaSetDevice(device_), "cudaSetDevice");
    (void)CudaStatus(cudaFreeHost(p), "cudaFreeHost");
  }

  absl::Status CopyToDevice(void* device, const void* host, size_t bytes) override {
    if (absl::Status s = SetDevice(); !s.ok()) return s;
    if (bytes == 0) return absl::OkStatus();
    return CudaStatus(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_),
                      "cudaMemcpyAsync to the device");
  }
  absl::Status CopyToHost(void* host, const void* device, size_t bytes) override {
    if (absl::Status s = SetDevice(); !s.ok()) return s;
    if (bytes == 0) return absl::OkStatus();
    return CudaStatus(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_),
                      "cudaMemcpyAsync to the host");
  }
  absl::Status Zero(void* device, size_t bytes) override {
    if (absl::Status s = SetDevice(); !s.ok()) return s;
    if (bytes == 0) return absl::OkStatus();
    return CudaStatus(cudaMemsetAsync(device, 0, bytes, stream_), "cudaMemsetAsync");
  }
  absl::Status Synchronize() override {
    if (absl::Status s = SetDevice(); !s.ok()) return s;
    // A kernel that faulted while running reports here (its launch check had passed).
    const cudaError_t e = cudaStreamSynchronize(stream_);
    if (e != cudaSuccess) return CudaStatus(e, absl::StrCat("cudaStreamSynchronize on ", name()));
    // An error still pending on this thread (from a call whose Status went unchecked) fails the step too.
    return CudaStatus(cudaGetLastError(), absl::StrCat("after synchronizing ", name()));
  }

  absl::Status Pool(const float* rows, int dim, const uint32_t* index, const float* values,
                    const uint32_t* bag_offsets, int64_t bags, float* x) override {
    if (absl::Status s = SetDevice(); !s.ok()) return s;
    return LaunchPool(stream_, rows, dim, index, values, bag_offsets, bags, x);
  }
  absl::Status FieldSum(const float* x, int64_t examples, int fields, int dim, float* sum) override {
    if (absl::Status s = SetDevice(); !s.ok()) return s;
    return LaunchFieldSum(stream_, x, examples, fields, dim, sum);
  }
  absl::Status FmForward(const float* x, const float* sum, int64_t examples, int fields, int dim,
                         float* out) override {
    if (absl::Status s = SetDevice(); !s.ok()) return s;
    return LaunchFmForward(stream_, x, sum, examples, fields, dim, out);
  }
  absl::Status FmBackward(const float* x, const float* sum, const float* g, int64_t examples, int fields, int dim,
                          float* dx) override {
    if (absl::Status s = SetDevice(); !s.ok()) return s;
    return LaunchFmBackward(stream_, x, sum, g, examples, fields, dim, dx);
  }
  absl::Status DotInteraction(const float* v, int64_t examples, int m, int dim, float* z) override {
    if (absl::Status s = SetDevice(); !s.ok()) return s;
    return LaunchDotInteraction(stream_, v, examples, m, dim, z);
  }
  absl::Status DotInteractionBackward(const float* v, const float* dz, int64_t examples, int m, int dim,
                                      float* dv) override {
    if (absl::Status s = SetDevice(); !s.ok()) return s;
    return LaunchDotInteractionBackward(stream_, v, dz, examples, m, dim, dv);
  }
  absl::Status CopyBlock(const float* src, int src_stride, float* dst, int dst_stride, int64_t rows, int cols,
                         bool accumulate) override {
    if (absl::Status s = SetDevice(); !s.ok()) return s;
    return LaunchCopyBlock(stream_, src, src_stride, dst, dst_stride, rows, cols, accumulate);
  }

  // cuBLAS is column-major, and a row-major matrix read as column-major is its transpose. So the row-major
  // C = op(A) op(B) (m x n) is computed as the column-major C^T = op(B)^T op(A)^T (n x m): B and A swap
  // places, m and n swap, and each operand keeps its own transpose flag with the leading dimension of its
  // row-major storage (its number of columns).
  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, const float* b,
                    float beta, float* c) override {
    if (absl::Status s = SetDevice(); !s.ok()) return s;
    if (m <= 0 || n <= 0) return absl::OkStatus();
    // Stored shapes: A is m x k (k x m when transposed), B is k x n (n x k). cuBLAS rejects a leading
    // dimension below 1 even when k == 0 (then C = beta * C).
    const int lda = std::max(trans_a ? m : k, 1);
    const int ldb = std::max(trans_b ? k : n, 1);
    const cublasStatus_t s =
        cublasSgemm(blas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                    &alpha, b, ldb, a, lda, &beta, c, n);
    if (s != CUBLAS_STATUS_SUCCESS) {
      return CublasError(s, absl::StrCat("cublasSgemm(trans_a=", trans_a, ", trans_b=", trans_b, ", m=", m,
                                         ", n=", n, ", k=", k, ")"));
    }
    return absl::OkStatus();
  }

  absl::Status BiasActivation(float* x, const float* bias, int64_t rows, int cols, bool relu) override {
    if (absl::Status s = SetDevice(); !s.ok()) return s;
    return LaunchBiasActivation(stream_, x, bias, rows, cols, relu);
  }
  absl::Status ReluBackward(const float* y, float* dy, int64_t count) override {
    if (absl::Status s = SetDevice(); !s.ok()) return s;
    return LaunchReluBackward(stream_, y, dy, count);
  }
  absl::Status ColumnSum(const float* x, int64_t rows, int cols, float* out) override {
    if (absl::Status s = SetDevice(); !s.ok()) return s;
    return LaunchColumnSum(stream_, x, rows, cols, out);
  }
  absl::Status LogitLoss(const float* bias, const float* wide, const float* fm, const float* deep,
                         const float* labels, const float* weights, int64_t examples, float scale, float* prob,
                         float* loss, float* dlogit) override {
    if (absl::Status s = SetDevice(); !s.ok()) return s;
    return LaunchLogitLoss(stream_, bias, wide, fm, deep, labels, weights, examples, scale, prob, loss, dlogit);
  }
  absl::Status SegmentSum(const float* dx, const float* values, const uint32_t* offsets, const uint32_t* positions,
                          const uint32_t* entry_bags, int dim, int group, int64_t segments,
                          float* grad_rows) override {
    if (absl::Status s = SetDevice(); !s.ok()) return s;
    return LaunchSegmentSum(stream_, dx, values, offsets, positions, entry_bags, dim, group, segments, grad_rows);
  }

 private:
  // Every entry point makes this backend's device current first: the calling thread may have used another
  // device (or another backend) since the last call, and CUDA's current device is per thread.
  absl::Status SetDevice() const {
    return CudaStatus(cudaSetDevice(device_), absl::StrCat("cudaSetDevice(", device_, ")"));
  }

  // Out of memory is ResourceExhausted, as on the CPU backend; anything else is Internal.
  absl::Status AllocationError(cudaError_t e, const char* call, size_t bytes) const {
    const absl::Status status = CudaStatus(e, absl::StrCat(call, "(", bytes, " bytes) on ", name()));
    if (e != cudaErrorMemoryAllocation) return status;
    return absl::ResourceExhaustedError(status.message());
  }

  const int device_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend(int device) {
  auto backend = std::make_unique<CudaBackend>(device);
  absl::Status status = backend->Init();
  if (!status.ok()) return status;
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace kestrel
