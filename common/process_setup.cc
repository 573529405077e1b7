#include "common/process_setup.h"

#include <malloc.h>
#include <pthread.h>
#include <signal.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace kestrel {

void TuneMallocForLargeBuffers() {
#ifdef __GLIBC__
  // Serve allocations below 256 MiB from the heap, and trim the heap only when 1 GiB is free at its top.
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

void PreferPassiveOpenMpWaiting(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  if (setenv("OMP_WAIT_POLICY", "passive", /*overwrite=*/0) != 0) return;
  execv("/proc/self/exe", argv);
  // Not reached unless execv failed (no /proc, say): go on with the spinning default.
  std::fprintf(stderr, "kestrel: could not re-execute with OMP_WAIT_POLICY=passive; OpenMP threads spin\n");
}

namespace {

sigset_t ShutdownSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  return signals;
}

}  // namespace

void BlockShutdownSignals() {
  const sigset_t signals = ShutdownSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

int WaitForShutdownSignal() {
  const sigset_t signals = ShutdownSignals();
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  return signal_number;
}

absl::Status WritePortFile(const std::string& path, int port) {
  if (path.empty()) return absl::OkStatus();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << port << "\n";
    if (!out.good()) return absl::InternalError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return absl::InternalError("cannot rename " + tmp + " to " + path);
  return absl::OkStatus();
}

}  // namespace kestrel
