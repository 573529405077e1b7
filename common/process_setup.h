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

// Blocks SIGTERM and SIGINT in the calling thread and every thread it starts later, so that
// WaitForShutdownSignal() receives them. Call at the start of main(), before starting gRPC.
void BlockShutdownSignals();
// Waits for SIGTERM or SIGINT (blocked by BlockShutdownSignals) and returns its number.
int WaitForShutdownSignal();

// Writes `port` to `path` atomically (temp file + rename), for launchers waiting on it. No-op for "".
absl::Status WritePortFile(const std::string& path, int port);

}  // namespace kestrel

#endif  // KESTREL_COMMON_PROCESS_SETUP_H_
