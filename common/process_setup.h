// Process-wide tuning shared by Kestrel's binaries (servers, workers, benchmarks).
#ifndef KESTREL_COMMON_PROCESS_SETUP_H_
#define KESTREL_COMMON_PROCESS_SETUP_H_

#include <string>

#include "absl/status/status.h"

namespace kestrel {

// Keeps freed large buffers in the heap instead of returning them to the OS. Requests and responses of a few
// MB are allocated per RPC; with glibc's defaults each one is mmap'ed, faulted in page by page and unmapped
// again, which cost ~5 ms of a 1e5-key x 16-float pull on the server (bench/results/ps_bench.md).
// Call once at the start of main(), before other threads run.
void TuneMallocForLargeBuffers();

// Makes idle OpenMP threads sleep instead of spin, for binaries that compute on the CPU backend (workers,
// predict, benchmarks). libgomp's default keeps a thread that finished its part of a parallel loop spinning for
// ~300k iterations; on a machine with as many cores as compute threads it then takes the core from the
// reader, pull and push threads between kernels (DeepFM at dim 16, MLP 256-128, batch 4096 on 2 cores: ~9%
// fewer examples/s, LR 2x slower; bench/results/train_bench.md). libgomp reads its settings once, when it is
// loaded, so when neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set this re-executes the binary
// (/proc/self/exe, same argv and environment) with OMP_WAIT_POLICY=passive; a value the user set is kept.
// Call first in main(), before any thread starts. Returns only when no re-execution was needed or it failed
// (then the process continues with libgomp's defaults).
void PreferPassiveOpenMpWaiting(char** argv);

// Blocks SIGTERM and SIGINT in the calling thread and every thread it starts later, so that
// WaitForShutdownSignal() receives them. Call at the start of main(), before starting gRPC.
void BlockShutdownSignals();
// Waits for SIGTERM or SIGINT (blocked by BlockShutdownSignals) and returns its number.
int WaitForShutdownSignal();

// Writes `port` to `path` atomically (temp file + rename), for launchers waiting on it. No-op for "".
[[nodiscard]] absl::Status WritePortFile(const std::string& path, int port);

}  // namespace kestrel

#endif  // KESTREL_COMMON_PROCESS_SETUP_H_
