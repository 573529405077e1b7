// Starts and stops real kestrel_server processes on loopback, for cross-process tests and benchmarks.
//
// Each server binds port 0 and reports the port it got through --port_file, so tests never race for ports.
// Not thread-safe; one owner per ServerProcess.
#ifndef KESTREL_TESTS_SERVER_PROCESS_H_
#define KESTREL_TESTS_SERVER_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kestrel {

class ServerProcess {
 public:
  // Runs `binary` with `args` plus --host=127.0.0.1 --port=0 --port_file=<work_dir>/<name>.port, stderr and
  // stdout to <work_dir>/<name>.log, and waits up to `timeout` for the port.
  [[nodiscard]] static absl::StatusOr<ServerProcess> Start(const std::string& binary, const std::vector<std::string>& args,
                                             const std::string& work_dir, const std::string& name,
                                             absl::Duration timeout = absl::Seconds(20));

  // Runs `binary` with exactly `args`, output to <work_dir>/<name>.log, without waiting for anything.
  [[nodiscard]] static absl::StatusOr<ServerProcess> Spawn(const std::string& binary, const std::vector<std::string>& args,
                                             const std::string& work_dir, const std::string& name);

  ServerProcess(ServerProcess&& other) noexcept;
  ServerProcess& operator=(ServerProcess&& other) noexcept;
  // Kills the process (SIGKILL) if it still runs.
  ~ServerProcess();

  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  const std::string& log_path() const { return log_path_; }

  // Sends `signal` and waits up to `timeout` for the exit; returns the exit code (128 + signal if killed).
  [[nodiscard]] absl::StatusOr<int> Stop(int signal, absl::Duration timeout = absl::Seconds(10));
  // Waits up to `timeout` for the process to exit by itself; returns its exit code (DeadlineExceeded: still
  // running).
  [[nodiscard]] absl::StatusOr<int> Wait(absl::Duration timeout);
  // CPU-seconds (user + system, every thread) the process used: so far while it runs (from /proc), in all once
  // Wait or Stop saw it exit. NotFound when it was never started or /proc cannot say.
  [[nodiscard]] absl::StatusOr<double> CpuSeconds() const;

 private:
  ServerProcess() = default;

  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
  double exited_cpu_seconds_ = -1;  // set when Wait or Stop reaped it
};

// The port a process wrote to `path` (e.g. its --metrics_port_file), waiting up to `timeout` for the file to
// hold one. DeadlineExceeded naming the file when it never does.
[[nodiscard]] absl::StatusOr<int> ReadPortFile(const std::string& path, absl::Duration timeout = absl::Seconds(20));

// The path of a binary in Bazel's runfiles (e.g. "server/kestrel_server"), for tests with `data` deps;
// falls back to the path relative to the working directory.
std::string RunfilePath(const std::string& workspace_relative);

}  // namespace kestrel

#endif  // KESTREL_TESTS_SERVER_PROCESS_H_
