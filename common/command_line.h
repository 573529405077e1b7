// Command-line parsing for Kestrel's binaries: one place that makes `--help` list every Kestrel flag a binary
// links (its own and the shared ones: TLS, metrics, job), with its default, and nothing of Abseil's internals.
#ifndef KESTREL_COMMON_COMMAND_LINE_H_
#define KESTREL_COMMON_COMMAND_LINE_H_

#include <vector>

#include "absl/strings/string_view.h"

namespace kestrel {

// Whether `--help` lists a flag defined in source file `file`: every flag of Kestrel's own sources, none of
// Abseil's (their files are under absl/).
bool ListedInHelp(absl::string_view file);

// Sets the usage message to `usage`, makes `--help` and `--helpshort` list the binary's Kestrel flags
// (ListedInHelp), and parses the command line (absl::ParseCommandLine: exits on an unknown flag or a bad value,
// and after printing help). Returns the positional arguments, argv[0] first. Call once, at the start of main().
std::vector<char*> ParseCommandLine(int argc, char** argv, absl::string_view usage);

}  // namespace kestrel

#endif  // KESTREL_COMMON_COMMAND_LINE_H_
