#include "worker/compute/backend_factory.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/cuda_device.h"
#include "worker/compute/cpu_backend.h"
#include "worker/compute/cuda_backend.h"

namespace kestrel {

absl::StatusOr<std::unique_ptr<Backend>> NewBackend(const std::string& device, int compute_threads) {
  if (compute_threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--compute_threads must be >= 0, got ", compute_threads));
  }
  CpuBackendOptions cpu;
  cpu.threads = compute_threads;
  if (device == "cpu") return NewCpuBackend(cpu);
  if (device == "auto") {
    if (CudaBuilt() && CudaDeviceCount() > 0) return NewCudaBackend(0);
    return NewCpuBackend(cpu);
  }
  if (device == "cuda") return NewCudaBackend(0);
  if (device.rfind("cuda:", 0) == 0) {
    int index = 0;
    if (!absl::SimpleAtoi(device.substr(5), &index) || index < 0) {
      return absl::InvalidArgumentError(absl::StrCat("bad --device '", device, "': expected cuda:N"));
    }
    return NewCudaBackend(index);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --device '", device, "': expected auto, cpu, cuda or cuda:N"));
}

}  // namespace kestrel
