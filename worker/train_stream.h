// TrainStream: the directory a job follows as it grows (DataConfig.train_stream): its complete data files in name
// order, waited for as they arrive, and the stop file that ends the stream.
//
//   <dir>/part-00001.tsv ...   data files, taken in name order; a file is complete once it is there under its
//                              name (writers write elsewhere, or under a name starting with '.' or '_', and
//                              rename it in). Names starting with '.' or '_' are never read.
//   <dir>/_STOP                ends the stream: it holds the name of the last file to train (what `kestrel stop`
//                              writes: the last file present then); an empty one ends it after the files present
//                              when a worker reads it.
//
// Every worker of a job sees the same files at the same indices as long as files arrive in name order, so all
// agree on each epoch's lines. A file that arrives out of name order (sorting before one already taken) would
// shift them: the feed checks the name it trains at each index (WorkerState.stream_file) and stops with
// FailedPrecondition rather than train another file there.
//
// Thread-compatible; its functions read the directory only.
#ifndef KESTREL_WORKER_TRAIN_STREAM_H_
#define KESTREL_WORKER_TRAIN_STREAM_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kestrel {

// The stop file of a stream directory.
inline constexpr char kStreamStopFile[] = "_STOP";
// Largest stop file read (it holds one file name).
inline constexpr uint64_t kMaxStopFileBytes = 4096;
// How often a waiting worker looks again when DataConfig.stream_poll_ms is 0.
inline constexpr int kDefaultStreamPollMs = 1000;

class TrainStream {
 public:
  TrainStream(std::string dir, absl::Duration poll) : dir_(std::move(dir)), poll_(poll) {}

  const std::string& dir() const { return dir_; }

  // The complete data files, by name (sorted). NotFound when the directory does not exist.
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> List() const;

  // The path of file `index` (0-based, in name order) once it is there: waits for it, looking every `poll`.
  // nullopt when the stream ends before it (the stop file names an earlier file, or is empty and the directory
  // holds no more). `cancelled` (optional) is asked between looks: true ends the wait with Cancelled.
  [[nodiscard]] absl::StatusOr<std::optional<std::string>> WaitFor(int64_t index,
                                                                   const std::function<bool()>& cancelled = {}) const;

  // Ends the stream after the files present now: writes the stop file (atomically) naming the last one.
  // Returns that name ("" when the directory holds none).
  [[nodiscard]] static absl::StatusOr<std::string> Stop(const std::string& dir);

 private:
  // The stop file's content: nullopt when there is none.
  [[nodiscard]] absl::StatusOr<std::optional<std::string>> StopName() const;

  const std::string dir_;
  const absl::Duration poll_;
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_TRAIN_STREAM_H_
