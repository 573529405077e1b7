#include "tests/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace kestrel {

absl::StatusOr<ServerProcess> ServerProcess::Spawn(const std::string& binary, const std::vector<std::string>& args,
                                                   const std::string& work_dir, const std::string& name) {
  ServerProcess p;
  p.log_path_ = absl::StrCat(work_dir, "/", name, ".log");
  std::vector<std::string> argv_strings = {binary};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);

  const int log_fd = ::open(p.log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (log_fd < 0) return absl::InternalError(absl::StrCat("cannot open ", p.log_path_));
  p.pid_ = ::fork();
  if (p.pid_ < 0) return absl::InternalError("fork failed");
  if (p.pid_ == 0) {
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(log_fd);
  return p;
}

absl::StatusOr<ServerProcess> ServerProcess::Start(const std::string& binary, const std::vector<std::string>& args,
                                                   const std::string& work_dir, const std::string& name,
                                                   absl::Duration timeout) {
  const std::string port_file = absl::StrCat(work_dir, "/", name, ".port");
  ::unlink(port_file.c_str());
  std::vector<std::string> all = {"--host=127.0.0.1", "--port=0", absl::StrCat("--port_file=", port_file)};
  all.insert(all.end(), args.begin(), args.end());
  absl::StatusOr<ServerProcess> spawned = Spawn(binary, all, work_dir, name);
  if (!spawned.ok()) return spawned.status();
  ServerProcess p = std::move(spawned).value();

  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::ifstream in(port_file);
    if (in >> p.port_ && p.port_ > 0) return p;
    int wstatus;
    if (::waitpid(p.pid_, &wstatus, WNOHANG) == p.pid_) {
      p.pid_ = -1;
      return absl::InternalError(absl::StrCat(name, " exited before serving; see ", p.log_path_));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat(name, " did not report its port in time; see ", p.log_path_));
}

ServerProcess::ServerProcess(ServerProcess&& other) noexcept { *this = std::move(other); }

ServerProcess& ServerProcess::operator=(ServerProcess&& other) noexcept {
  std::swap(pid_, other.pid_);
  std::swap(port_, other.port_);
  std::swap(log_path_, other.log_path_);
  std::swap(exited_cpu_seconds_, other.exited_cpu_seconds_);
  return *this;
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

absl::StatusOr<int> ServerProcess::Stop(int signal, absl::Duration timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("process is not running");
  ::kill(pid_, signal);
  return Wait(timeout);
}

absl::StatusOr<int> ServerProcess::Wait(absl::Duration timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("process is not running");
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {  // at least one look, so a zero timeout polls
    int wstatus;
    struct rusage usage {};
    if (::wait4(pid_, &wstatus, WNOHANG, &usage) == pid_) {
      pid_ = -1;
      exited_cpu_seconds_ = usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
                            (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
      return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
    }
    if (absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::DeadlineExceededError(absl::StrCat("process ", pid_, " did not exit in time"));
}

absl::StatusOr<double> ServerProcess::CpuSeconds() const {
  if (pid_ <= 0) {
    if (exited_cpu_seconds_ >= 0) return exited_cpu_seconds_;
    return absl::NotFoundError("the process was not started");
  }
  // /proc/<pid>/stat: fields 14 and 15 (utime, stime) in clock ticks, after the parenthesized command name.
  std::ifstream in(absl::StrCat("/proc/", pid_, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return absl::NotFoundError(absl::StrCat("no /proc/", pid_, "/stat"));
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i >= 14) ticks += std::strtod(field.c_str(), nullptr);
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

absl::StatusOr<int> ReadPortFile(const std::string& path, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::ifstream in(path);
    int port = 0;
    if (in >> port && port > 0) return port;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat("no port in ", path));
}

std::string RunfilePath(const std::string& workspace_relative) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr && workspace != nullptr) return absl::StrCat(srcdir, "/", workspace, "/", workspace_relative);
  return workspace_relative;
}

}  // namespace kestrel
