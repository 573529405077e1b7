// Helpers shared by Kestrel's benchmark binaries; see bench_util.h.
#include "bench/bench_util.h"

#include <sched.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/server_process.h"

namespace kestrel {
namespace bench {

std::string FirstLineWith(const std::string& path, const std::string& prefix) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, prefix)) return line;
  }
  return "";
}

std::string RunCommand(const std::string& command) {
  FILE* f = ::popen(command.c_str(), "r");
  if (f == nullptr) return "";
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof(buf), f) != nullptr) out += buf;
  ::pclose(f);
  return std::string(absl::StripAsciiWhitespace(out));
}

std::string ShellQuote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                            "_-+=./,:@%") == std::string::npos) {
    return arg;
  }
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool IsExecutable(const std::string& path) { return !path.empty() && ::access(path.c_str(), X_OK) == 0; }

std::string UserPath(const std::string& path) {
  const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  if (path.empty() || path[0] == '/' || ws == nullptr) return path;
  return absl::StrCat(ws, "/", path);
}

void MakeParentDirs(const std::string& path) {
  for (size_t i = path.find('/', 1); i != std::string::npos; i = path.find('/', i + 1)) {
    ::mkdir(path.substr(0, i).c_str(), 0755);
  }
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  MakeParentDirs(path);
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status PublishReport(const std::string& markdown, const std::string& output_flag) {
  std::printf("\n%s", markdown.c_str());
  const std::string output = UserPath(output_flag);
  if (output.empty()) return absl::OkStatus();
  if (absl::Status written = WriteFile(output, markdown); !written.ok()) return written;
  std::printf("\nwrote %s\n", output.c_str());
  return absl::OkStatus();
}

absl::StatusOr<std::string> FindBinary(const std::string& flag_value, const std::string& workspace_relative,
                                       const char* argv0, const std::string& flag_name) {
  if (!flag_value.empty()) {
    const std::string path = UserPath(flag_value);
    if (!IsExecutable(path)) return absl::NotFoundError(absl::StrCat("--", flag_name, " ", path, " is not executable"));
    return path;
  }
  std::vector<std::string> candidates = {RunfilePath(workspace_relative)};
  if (const char* dir = std::getenv("RUNFILES_DIR")) {
    candidates.push_back(absl::StrCat(dir, "/kestrel/", workspace_relative));
  }
  candidates.push_back(absl::StrCat(argv0, ".runfiles/kestrel/", workspace_relative));
  candidates.push_back(UserPath(absl::StrCat("bazel-bin/", workspace_relative)));
  for (const std::string& c : candidates) {
    if (IsExecutable(c)) return c;
  }
  const std::string name = workspace_relative.substr(workspace_relative.rfind('/') + 1);
  return absl::NotFoundError(absl::StrCat(name, " not found (tried ", absl::StrJoin(candidates, ", "), "); pass --",
                                          flag_name));
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  if (!(in >> a >> b >> c)) return "unknown";
  return absl::StrCat(a, " ", b, " ", c);
}

Machine DescribeMachine(int argc, char** argv, const std::string& git_commit, const std::string& invocation) {
  Machine m;
  cpu_set_t set;
  CPU_ZERO(&set);
  m.nproc = ::sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set)
                                                           : static_cast<int>(std::thread::hardware_concurrency());
  std::string cpu = FirstLineWith("/proc/cpuinfo", "model name");
  m.cpu = cpu.empty() ? "unknown" : std::string(absl::StripAsciiWhitespace(cpu.substr(cpu.find(':') + 1)));
  std::string mem = FirstLineWith("/proc/meminfo", "MemTotal:");
  int64_t kb = 0;
  std::vector<std::string> fields = absl::StrSplit(mem, ' ', absl::SkipEmpty());
  if (fields.size() >= 2 && absl::SimpleAtoi(fields[1], &kb)) {
    m.memory = absl::StrFormat("%.1f GiB", kb / (1024.0 * 1024.0));
  } else {
    m.memory = "unknown";
  }
  struct utsname u;
  m.kernel = ::uname(&u) == 0 ? absl::StrCat(u.sysname, " ", u.release, " ", u.machine) : "unknown";
  m.date = absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::Now(), absl::UTCTimeZone());
  m.commit = git_commit;
  if (m.commit.empty()) m.commit = RunCommand("git rev-parse --short HEAD 2>/dev/null");
  if (m.commit.empty()) m.commit = "unknown";
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) args.push_back(ShellQuote(argv[i]));
  m.command = absl::StrJoin(args, " ");
  m.invocation = invocation;
  return m;
}

std::string MachineMarkdown(const Machine& m, const std::string& load_start) {
  std::string s = "| | |\n|---|---|\n";
  absl::StrAppend(&s, "| nproc | ", m.nproc, " |\n");
  absl::StrAppend(&s, "| CPU | ", m.cpu, " |\n");
  absl::StrAppend(&s, "| Memory | ", m.memory, " |\n");
  absl::StrAppend(&s, "| Kernel | ", m.kernel, " |\n");
  absl::StrAppend(&s, "| Date | ", m.date, " |\n");
  absl::StrAppend(&s, "| Git commit | ", m.commit, " |\n");
  absl::StrAppend(&s, "| Load average (1/5/15 min) at start / end | ", load_start, " / ", LoadAverage(), " |\n");
  return s;
}

std::string CommandMarkdown(const Machine& m) {
  // The script a reader runs; the binary's own command line (with this machine's build paths) only when the
  // binary was started by hand.
  return absl::StrCat("Command:\n\n```\n", m.invocation.empty() ? m.command : m.invocation, "\n```\n\n");
}

MachineReport MachineReportOf(const Machine& m) {
  MachineReport r;
  r.set_nproc(m.nproc);
  r.set_cpu(m.cpu);
  r.set_memory(m.memory);
  r.set_kernel(m.kernel);
  r.set_date(m.date);
  r.set_git_commit(m.commit);
  r.set_command(m.command);
  r.set_invocation(m.invocation);
  return r;
}

double ProcessCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : (n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

void Figures::Add(const std::string& name, const std::string& format, double value) {
  for (Series& s : series_) {
    if (s.name == name) {
      s.values.push_back(value);
      return;
    }
  }
  series_.push_back({name, format, {value}});
}

double Figures::MedianOf(const std::string& name) const {
  for (const Series& s : series_) {
    if (s.name == name) return Median(s.values);
  }
  return 0;
}

std::string Figures::Markdown() const {
  std::string md = "| Figure | median | min | max | runs |\n|---|---:|---:|---:|---|\n";
  for (const Series& s : series_) {
    const auto fmt = [&](double v) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), s.format.c_str(), v);
      return std::string(buf);
    };
    std::vector<std::string> runs;
    for (double v : s.values) runs.push_back(fmt(v));
    absl::StrAppend(&md, "| ", s.name, " | ", fmt(Median(s.values)), " | ",
                    fmt(*std::min_element(s.values.begin(), s.values.end())), " | ",
                    fmt(*std::max_element(s.values.begin(), s.values.end())), " | ", absl::StrJoin(runs, ", "),
                    " |\n");
  }
  return md;
}

}  // namespace bench
}  // namespace kestrel
