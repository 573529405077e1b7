#include "common/fault_injection.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"

namespace kestrel {
namespace {

struct FaultSpec {
  std::string point;  // empty: no fault injection
  long long hit = 1;  // which arrival at `point` dies (1-based)
  std::string once;   // KESTREL_FAULT_ONCE: die only if this process creates the file; "": always
};

const FaultSpec& Spec() {
  static const FaultSpec* spec = [] {
    auto* s = new FaultSpec;
    const char* env = std::getenv("KESTREL_FAULT_POINT");
    if (env == nullptr || *env == '\0') return s;
    std::pair<std::string, std::string> parts = absl::StrSplit(env, absl::MaxSplits('@', 1));
    s->point = parts.first;
    if (!parts.second.empty() && (!absl::SimpleAtoi(parts.second, &s->hit) || s->hit < 1)) s->hit = 1;
    if (const char* once = std::getenv("KESTREL_FAULT_ONCE"); once != nullptr) s->once = once;
    return s;
  }();
  return *spec;
}

std::atomic<long long> hits{0};

}  // namespace

void CrashPoint(absl::string_view point) {
  const FaultSpec& spec = Spec();
  if (spec.point.empty() || spec.point != point) return;
  if (hits.fetch_add(1) + 1 != spec.hit) return;
  if (!spec.once.empty()) {
    const int fd = open(spec.once.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) return;  // another process died here already (or the path is unusable): live on
    close(fd);
  }
  KLOG(Warning) << "fault injection: dying at " << point << " (KESTREL_FAULT_POINT)";
  kill(getpid(), SIGKILL);
  _exit(137);  // not reached
}

}  // namespace kestrel
