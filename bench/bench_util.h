// Helpers shared by Kestrel's benchmark binaries (bench/): describing the machine a report was measured on (as a
// markdown table and as JSON), finding the binaries a benchmark spawns, shell quoting, running a command and
// writing report files.
#ifndef KESTREL_BENCH_BENCH_UTIL_H_
#define KESTREL_BENCH_BENCH_UTIL_H_

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/bench.pb.h"

namespace kestrel {
namespace bench {

// ---------------------------------------------------------------------------------------------------------
// Files, paths and commands.

// The first line of the file at `path` that starts with `prefix`, or "" if there is none (or no such file).
std::string FirstLineWith(const std::string& path, const std::string& prefix);

// Runs `command` with the shell and returns its stdout, stripped of surrounding whitespace ("" on failure).
std::string RunCommand(const std::string& command);

// `arg` quoted for a POSIX shell; unchanged when it holds only characters that need no quoting.
std::string ShellQuote(const std::string& arg);

// Whether `path` is non-empty and executable by this process.
bool IsExecutable(const std::string& path);

// Relative paths are taken from the workspace when run with `bazel run`, else from the working directory.
std::string UserPath(const std::string& path);

// Creates the directories above `path` (mode 0755) that do not exist yet.
void MakeParentDirs(const std::string& path);

// Writes `text` to `path` (replacing it), creating the parent directories first.
[[nodiscard]] absl::Status WriteFile(const std::string& path, const std::string& text);

// Prints a benchmark's Markdown report and, when `output_flag` (its --output value, relative to the user's
// directory) is set, writes it there too.
[[nodiscard]] absl::Status PublishReport(const std::string& markdown, const std::string& output_flag);

// The binary a benchmark spawns, e.g. workspace_relative = "server/kestrel_server". A non-empty `flag_value`
// (the value of --<flag_name>, taken by UserPath) must be executable. Otherwise the first executable of: the
// runfiles copy (test runfiles, $RUNFILES_DIR, <argv0>.runfiles), then bazel-bin/<workspace_relative> under
// the workspace. `flag_name` (without "--") is only named in the errors.
[[nodiscard]] absl::StatusOr<std::string> FindBinary(const std::string& flag_value, const std::string& workspace_relative,
                                       const char* argv0, const std::string& flag_name);

// ---------------------------------------------------------------------------------------------------------
// Machine description.

struct Machine {
  int nproc = 0;  // CPUs this process may run on
  std::string cpu, memory, kernel, date, commit, command, invocation;
};

// "0.52 0.31 0.20" (1, 5 and 15 minute load averages; "unknown" if unreadable): other work on the machine
// skews the figures.
std::string LoadAverage();

// The machine and this run: CPUs, CPU model, memory, kernel, UTC date, `git_commit` (default: `git rev-parse
// --short HEAD`, else "unknown"), the shell-quoted command line and `invocation` (the command that reproduces
// the run, e.g. the wrapper script's; may be empty).
Machine DescribeMachine(int argc, char** argv, const std::string& git_commit, const std::string& invocation);

// The markdown table of `m`: a blank header row, then nproc, CPU, Memory, Kernel, Date, Git commit and the load
// average at start (`load_start`, from LoadAverage() when the run began) / end (now). No heading and no
// blank line after the last row, so the caller may append rows of its own.
std::string MachineMarkdown(const Machine& m, const std::string& load_start);

// "Command:" and a code block with `m.invocation` (if any) and `m.command`, followed by a blank line.
std::string CommandMarkdown(const Machine& m);

// `m` for a JSON report (bench/bench.proto; print it with common/json.h).
MachineReport MachineReportOf(const Machine& m);

// ---------------------------------------------------------------------------------------------------------
// Timing.

// Seconds of wall time since `start`.
inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// CPU-seconds this process has used (every thread, user and system).
double ProcessCpuSeconds();

// ---------------------------------------------------------------------------------------------------------
// Figures: one value per run, reported as median (min, max).

double Median(std::vector<double> v);

class Figures {
 public:
  // Appends `value` to the series `name` (created with `format`, an absl::StrFormat format of one value such as
  // "%.3f", on first use; the order of first use is kept).
  void Add(const std::string& name, const std::string& format, double value);
  double MedianOf(const std::string& name) const;
  // A markdown table: figure, median, min, max, every run's value.
  std::string Markdown() const;

 private:
  struct Series {
    std::string name;
    std::string format;
    std::vector<double> values;
  };
  std::vector<Series> series_;
};

}  // namespace bench
}  // namespace kestrel

#endif  // KESTREL_BENCH_BENCH_UTIL_H_
