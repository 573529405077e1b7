// CUDA device discovery and a runtime self-check, for logs and `--device=auto` (issue 4).
//
// Built with nvcc when the CUDA toolkit is present (KESTREL_HAS_CUDA); without it every function reports that
// no device exists, so callers take their CPU path. Thread-safe.
#ifndef KESTREL_COMMON_CUDA_DEVICE_H_
#define KESTREL_COMMON_CUDA_DEVICE_H_

#include <string>

#include "absl/status/status.h"

namespace kestrel {

// True when this binary was built with the CUDA backend.
bool CudaBuilt();
// Number of usable CUDA devices; 0 without a driver, a device or the CUDA build.
int CudaDeviceCount();
// One line per device ("0: NVIDIA H200, 139.8 GiB, sm_90"), or why there is none.
std::string DescribeCudaDevices();
// Runs a kernel on device `device` over `n` elements and checks its result on the host: Ok when the device
// computes correctly, FailedPrecondition when there is no device, Internal on a wrong result or CUDA error.
[[nodiscard]] absl::Status CheckCudaDevice(int device, int n = 1 << 20);

}  // namespace kestrel

#endif  // KESTREL_COMMON_CUDA_DEVICE_H_
