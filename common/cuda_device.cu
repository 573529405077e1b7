#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "common/cuda_device.h"

namespace kestrel {
namespace {

// The element math, shared by the kernel and the host check.
__host__ __device__ inline float SelfCheckValue(int i) { return 0.5f * static_cast<float>(i) + 1.0f; }

__global__ void SelfCheckKernel(float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = SelfCheckValue(i);
}

[[nodiscard]] absl::Status CudaError(cudaError_t e, const char* what) {
  return absl::InternalError(std::string(what) + ": " + cudaGetErrorString(e));
}

// Launches the self-check kernel on `stream`.
[[nodiscard]] absl::Status LaunchSelfCheck(float* out, int n, cudaStream_t stream) {
  constexpr int kThreads = 256;
  SelfCheckKernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, stream>>>(out, n);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? absl::OkStatus() : CudaError(e, "launching the self-check kernel");
}

}  // namespace

bool CudaBuilt() { return true; }

int CudaDeviceCount() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

std::string DescribeCudaDevices() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(e);
  if (count == 0) return "no CUDA device";
  std::string out;
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
    char line[256];
    std::snprintf(line, sizeof(line), "%s%d: %s, %.1f GiB, sm_%d%d", out.empty() ? "" : "\n", d, p.name,
                  p.totalGlobalMem / 1073741824.0, p.major, p.minor);
    out += line;
  }
  return out;
}

namespace {

// The self-check on `stream`: fills *d_out (allocated here; the caller frees it) and compares it on the host.
[[nodiscard]] absl::Status RunSelfCheck(int device, int n, cudaStream_t stream, float** d_out) {
  cudaError_t e = cudaMalloc(d_out, sizeof(float) * n);
  if (e != cudaSuccess) {
    *d_out = nullptr;
    return CudaError(e, "cudaMalloc");
  }
  if (absl::Status launched = LaunchSelfCheck(*d_out, n, stream); !launched.ok()) return launched;
  std::vector<float> host(n);
  e = cudaMemcpyAsync(host.data(), *d_out, sizeof(float) * n, cudaMemcpyDeviceToHost, stream);
  if (e != cudaSuccess) return CudaError(e, "cudaMemcpyAsync");
  if ((e = cudaStreamSynchronize(stream)) != cudaSuccess) return CudaError(e, "cudaStreamSynchronize");
  for (int i = 0; i < n; ++i) {
    if (host[i] != SelfCheckValue(i)) {
      return absl::InternalError("device " + std::to_string(device) + " computed a wrong value at " +
                                 std::to_string(i));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckCudaDevice(int device, int n) {
  if (device < 0 || device >= CudaDeviceCount()) {
    return absl::FailedPreconditionError("no CUDA device " + std::to_string(device) + " (" +
                                         DescribeCudaDevices() + ")");
  }
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return CudaError(e, "cudaSetDevice");
  cudaStream_t stream;
  if ((e = cudaStreamCreate(&stream)) != cudaSuccess) return CudaError(e, "cudaStreamCreate");
  float* d_out = nullptr;
  const absl::Status status = RunSelfCheck(device, n, stream, &d_out);
  // Teardown errors cannot change the verdict; the check's own status is the answer.
  if (d_out != nullptr) (void)cudaFree(d_out);
  (void)cudaStreamDestroy(stream);
  return status;
}

}  // namespace kestrel
