#include "common/logging.h"

#include <unistd.h>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kestrel {
namespace {

std::string& Identity() {
  static std::string* identity = new std::string("kestrel");
  return *identity;
}

}  // namespace

void SetLogIdentity(absl::string_view identity) { Identity() = std::string(identity); }

LogMessage::LogMessage(LogSeverity severity, const char* file, int line) {
  const char tag = severity == LogSeverity::kInfo ? 'I' : severity == LogSeverity::kWarning ? 'W' : 'E';
  absl::string_view base(file);
  if (auto slash = base.rfind('/'); slash != absl::string_view::npos) base.remove_prefix(slash + 1);
  stream_ << tag << absl::FormatTime("%m%d %H:%M:%E6S", absl::Now(), absl::LocalTimeZone()) << ' '
          << Identity() << ' ' << base << ':' << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string line = stream_.str();
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;  // Nothing sensible to do when stderr is gone.
}

}  // namespace kestrel
