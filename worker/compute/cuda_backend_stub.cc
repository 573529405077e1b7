// CPU-only build of cuda_backend.h: no CUDA toolkit was found at build time.
#include "worker/compute/cuda_backend.h"

#ifndef KESTREL_HAS_CUDA
namespace kestrel {

absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend(int) {
  return absl::FailedPreconditionError("no CUDA backend: this binary was built without the CUDA toolkit");
}

}  // namespace kestrel
#endif  // KESTREL_HAS_CUDA
