#include "common/command_line.h"

#include <string>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

namespace kestrel {

bool ListedInHelp(absl::string_view file) {
  return !absl::StartsWith(file, "absl/") && !absl::StrContains(file, "/absl/");
}

std::vector<char*> ParseCommandLine(int argc, char** argv, absl::string_view usage) {
  absl::FlagsUsageConfig config;
  config.contains_helpshort_flags = ListedInHelp;
  config.contains_help_flags = ListedInHelp;
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
  return absl::ParseCommandLine(argc, argv);
}

}  // namespace kestrel
