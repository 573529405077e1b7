#include "worker/line_log.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace kestrel {

LineLog::~LineLog() {
  absl::MutexLock lock(&mu_);
  if (file_ != nullptr) std::fclose(file_);
}

void LineLog::Append(int64_t clock, int64_t epoch, const std::vector<uint64_t>& lines) {
  if (!on()) return;
  std::string text = absl::StrCat(clock, " ", epoch);
  for (uint64_t line : lines) absl::StrAppend(&text, " ", line);
  text.push_back('\n');
  absl::MutexLock lock(&mu_);
  if (failed_) return;
  if (file_ == nullptr) {
    file_ = std::fopen(path_.c_str(), "a");
    if (file_ == nullptr) {
      KLOG(Error) << "cannot append to --line_log " << path_;
      failed_ = true;
      return;
    }
  }
  std::fwrite(text.data(), 1, text.size(), file_);
  std::fflush(file_);
}

}  // namespace kestrel
