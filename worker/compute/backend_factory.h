// Chooses the compute backend from --device.
#ifndef KESTREL_WORKER_COMPUTE_BACKEND_FACTORY_H_
#define KESTREL_WORKER_COMPUTE_BACKEND_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/compute/backend.h"

namespace kestrel {

// `device`: "cpu"; "cuda" (device 0; an error without one); "cuda:N"; or "auto" (CUDA device 0 when a GPU is
// present and the binary has the CUDA backend, else the CPU). `compute_threads`: the CPU backend's threads
// (0: the cores this process may use; CpuBackendOptions::threads); negative is an error.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Backend>> NewBackend(const std::string& device, int compute_threads = 0);

}  // namespace kestrel

#endif  // KESTREL_WORKER_COMPUTE_BACKEND_FACTORY_H_
