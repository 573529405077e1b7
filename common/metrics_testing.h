// Test helpers for Prometheus metrics: scrape /metrics over plain HTTP, parse the text exposition format, and run
// `promtool check metrics` (Debian's `prometheus` package) on a scrape. Test-only.
//
// Thread-safe (no shared state).
#ifndef KESTREL_COMMON_METRICS_TESTING_H_
#define KESTREL_COMMON_METRICS_TESTING_H_

#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kestrel {

// Where promtool is looked for.
inline constexpr char kPromtoolPath[] = "/usr/bin/promtool";

// GET http://host:port<path> with HTTP/1.0 over a plain socket; the body of a 200 answer, else an error naming
// the status line. Gives up after `timeout`.
[[nodiscard]] absl::StatusOr<std::string> HttpGet(const std::string& host, int port, const std::string& path,
                                    absl::Duration timeout = absl::Seconds(10));

// A parsed text exposition (format 0.0.4).
struct Exposition {
  std::map<std::string, std::string> help;  // family name -> HELP text
  std::map<std::string, std::string> type;  // family name -> TYPE (counter, gauge, histogram, ...)
  // Sample key -> value. The key is the metric name, then its labels sorted by name in braces when it has any:
  // kestrel_server_requests_total{code="OK",method="Pull"}. Use Key() to build one.
  std::map<std::string, double> samples;

  static std::string Key(const std::string& name, const std::map<std::string, std::string>& labels = {});
  // The sample's value, if present.
  std::optional<double> Value(const std::string& name, const std::map<std::string, std::string>& labels = {}) const;
};

// Parses `text`. InvalidArgument naming the line for a malformed line, a sample of a family without a TYPE line
// before it, or a repeated sample or TYPE line.
[[nodiscard]] absl::StatusOr<Exposition> ParseExposition(const std::string& text);

// Runs `promtool check metrics` on `text` (through a file under $TEST_TMPDIR, else /tmp). OK when promtool
// reports nothing; FailedPrecondition with promtool's output otherwise; NotFound when kPromtoolPath is missing.
[[nodiscard]] absl::Status PromtoolCheckMetrics(const std::string& text);

}  // namespace kestrel

#endif  // KESTREL_COMMON_METRICS_TESTING_H_
