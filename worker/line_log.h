// LineLog: the audit of a worker's data order (TrainerOptions::line_log, kestrel_worker --line_log): for every
// iteration the worker trains, a line "<clock> <epoch> <line>..." with the global index of each training line of
// its batch, appended to a file. The file opens on first use; if it cannot, the failure is logged once and the log
// stays quiet. Thread-safe.
#ifndef KESTREL_WORKER_LINE_LOG_H_
#define KESTREL_WORKER_LINE_LOG_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kestrel {

class LineLog {
 public:
  // `path` "": no log.
  explicit LineLog(std::string path) : path_(std::move(path)) {}
  LineLog(const LineLog&) = delete;
  LineLog& operator=(const LineLog&) = delete;
  ~LineLog();

  bool on() const { return !path_.empty(); }
  // Appends iteration `clock` (of epoch `epoch`) and its batch's lines.
  void Append(int64_t clock, int64_t epoch, const std::vector<uint64_t>& lines);

 private:
  const std::string path_;
  absl::Mutex mu_;
  std::FILE* file_ ABSL_GUARDED_BY(mu_) = nullptr;  // opened on first use
  bool failed_ ABSL_GUARDED_BY(mu_) = false;         // could not open: quiet
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_LINE_LOG_H_
