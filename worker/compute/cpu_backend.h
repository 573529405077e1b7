// The reference backend: plain loops over kernel_math.h on the calling thread. Deterministic.
#ifndef KESTREL_WORKER_COMPUTE_CPU_BACKEND_H_
#define KESTREL_WORKER_COMPUTE_CPU_BACKEND_H_

#include <memory>

#include "worker/compute/backend.h"

namespace kestrel {

std::unique_ptr<Backend> NewCpuBackend();

}  // namespace kestrel

#endif  // KESTREL_WORKER_COMPUTE_CPU_BACKEND_H_
