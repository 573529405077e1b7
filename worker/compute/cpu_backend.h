// The CPU backend. GEMMs go through oneDNN (dnnl_sgemm, OpenMP threads); every other op is a loop over its
// kernel_math.h element function whose output elements are split across `threads` OpenMP threads by a fixed
// (static) partition, so each output element is still computed by one thread in one order: the non-GEMM ops
// give the same bits at any thread count. The GEMM's results depend on the thread count (its blocking follows
// it) but not on timing, so for a fixed thread count the whole backend is bitwise repeatable.
//
// The reference mode (CpuGemm::kReference, one thread) keeps the hand-written GEMM loops: the tests compare
// every op of the fast backend against it.
#ifndef KESTREL_WORKER_COMPUTE_CPU_BACKEND_H_
#define KESTREL_WORKER_COMPUTE_CPU_BACKEND_H_

#include <memory>

#include "worker/compute/backend.h"

namespace kestrel {

enum class CpuGemm {
  kBlas,       // oneDNN's dnnl_sgemm (bench/results/gemm_bench.md: the fastest of OpenBLAS, Eigen and oneDNN)
  kReference,  // the hand-written loops (summing each element over k in order, like kernel::GemmElement)
};

struct CpuBackendOptions {
  // Compute threads of every op (OpenMP threads, shared with oneDNN). Default: 0, the cores this process
  // may use (DefaultComputeThreads()).
  int threads = 0;
  // Default: kBlas.
  CpuGemm gemm = CpuGemm::kBlas;
};

std::unique_ptr<Backend> NewCpuBackend(const CpuBackendOptions& options = {});

// The tests' reference: one thread, hand-written GEMM loops.
std::unique_ptr<Backend> NewReferenceCpuBackend();

// The CPU backend's default threads: every CPU this process may run on (common/usable_cores.h).
int DefaultComputeThreads();

}  // namespace kestrel

#endif  // KESTREL_WORKER_COMPUTE_CPU_BACKEND_H_
