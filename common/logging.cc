#include "common/logging.h"

#include <unistd.h>

#include <atomic>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kestrel {
namespace {

std::string& Identity() {
  static std::string* identity = new std::string("kestrel");
  return *identity;
}

std::atomic<uint64_t> generation{0};

}  // namespace

void SetLogIdentity(absl::string_view identity) { Identity() = std::string(identity); }

void SetLogGeneration(uint64_t g) { generation.store(g, std::memory_order_relaxed); }

LogMessage::LogMessage(LogSeverity severity, const char* file, int line) {
  const char tag = severity == LogSeverity::kInfo ? 'I' : severity == LogSeverity::kWarning ? 'W' : 'E';
  absl::string_view base(file);
  if (auto slash = base.rfind('/'); slash != absl::string_view::npos) base.remove_prefix(slash + 1);
  stream_ << tag << absl::FormatTime("%m%d %H:%M:%E6S", absl::Now(), absl::LocalTimeZone()) << ' '
          << Identity();
  if (const uint64_t g = generation.load(std::memory_order_relaxed); g != 0) stream_ << " g" << g;
  stream_ << ' ' << base << ':' << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string line = stream_.str();
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;  // Nothing sensible to do when stderr is gone.
}

}  // namespace kestrel
