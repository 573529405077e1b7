// Minimal structured logging to stderr: "I1122 16:55:01.123456 server[1] g3 shard.cc:45] message": severity,
// time, process and rank, job generation (once known), source. Lines about training name the step.
//
// Debian's Abseil has no absl/log. Each process sets its identity once (SetLogIdentity("server[1]")) so every
// line names the process and rank. Thread-safe: each line is written with one write(2).
#ifndef KESTREL_COMMON_LOGGING_H_
#define KESTREL_COMMON_LOGGING_H_

#include <cstdint>
#include <sstream>
#include <string>

#include "absl/strings/string_view.h"

namespace kestrel {

enum class LogSeverity { kInfo, kWarning, kError };

// Names the process in every log line, e.g. "server[1]". Call once at start-up, before other threads log.
void SetLogIdentity(absl::string_view identity);
// The job generation this process is in (common/membership: it changes after failures and rollbacks), shown
// after the identity ("server[1] g3") once set. Thread-safe; call whenever the process learns a new one.
void SetLogGeneration(uint64_t generation);

class LogMessage {
 public:
  LogMessage(LogSeverity severity, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

}  // namespace kestrel

#define KLOG(severity) ::kestrel::LogMessage(::kestrel::LogSeverity::k##severity, __FILE__, __LINE__).stream()

#endif  // KESTREL_COMMON_LOGGING_H_
