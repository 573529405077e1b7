// The CUDA backend: one stream and one cuBLAS handle on one device; each op is a kernel running its
// kernel_math.h element function one element per thread (GEMMs are cuBLAS SGEMM). Built by nvcc where the
// CUDA toolkit is present (cuda_backend.cu), a stub otherwise (cuda_backend_stub.cc).
#ifndef KESTREL_WORKER_COMPUTE_CUDA_BACKEND_H_
#define KESTREL_WORKER_COMPUTE_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/compute/backend.h"

namespace kestrel {

// FailedPrecondition when the binary was built without the CUDA toolkit or `device` does not exist.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend(int device);

}  // namespace kestrel

#endif  // KESTREL_WORKER_COMPUTE_CUDA_BACKEND_H_
