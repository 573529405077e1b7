// CPU-only build of common/cuda_device.h: no CUDA toolkit was found at build time.
#include "common/cuda_device.h"

#ifndef KESTREL_HAS_CUDA
namespace kestrel {

bool CudaBuilt() { return false; }
int CudaDeviceCount() { return 0; }
std::string DescribeCudaDevices() { return "no CUDA device: built without the CUDA toolkit"; }
absl::Status CheckCudaDevice(int, int) {
  return absl::FailedPreconditionError("built without the CUDA toolkit");
}

}  // namespace kestrel
#endif  // KESTREL_HAS_CUDA
