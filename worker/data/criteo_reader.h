// Streaming reader of Criteo TSV: label, 13 integer features, 26 categorical hex tokens, tab-separated; an
// empty column is a missing value. Bounded memory (one line at a time).
//
// Sharding: worker `shard_index` of `num_shards` reads the lines whose global index (counted across the files
// in order, from 0) is congruent to shard_index modulo num_shards: deterministic, and every line is read by
// exactly one worker. The reader's position (file, byte offset, line numbers) can be saved and resumed.
//
// Malformed lines are an InvalidArgument naming "file:line" and the problem (OnError::kFail, the default), or
// are skipped and counted (OnError::kSkip). Thread-compatible.
#ifndef KESTREL_WORKER_DATA_CRITEO_READER_H_
#define KESTREL_WORKER_DATA_CRITEO_READER_H_

#include <array>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/data/feature_map.h"

namespace kestrel {

struct CriteoExample {
  float label = 0;
  std::array<int64_t, kCriteoIntegerFields> integers{};
  std::array<bool, kCriteoIntegerFields> integer_missing{};
  std::array<uint64_t, kCriteoCategoricalFields> categories{};  // kMissingValue when missing
};

// Parses one line (without its newline). InvalidArgument describes the problem (the reader adds file:line).
absl::Status ParseCriteoLine(absl::string_view line, CriteoExample* out);

struct CriteoReaderOptions {
  enum class OnError { kFail, kSkip };
  // What a malformed line does. Default: kFail.
  OnError on_error = OnError::kFail;
  // This reader's shard of the lines. Defaults: 0 of 1 (every line).
  int shard_index = 0;
  int num_shards = 1;
};

// Where a reader is: resume a reader from it to continue exactly after the last example returned.
struct ReaderPosition {
  size_t file = 0;           // index into the file list
  uint64_t byte_offset = 0;  // within that file
  uint64_t file_line = 0;    // lines consumed in that file
  uint64_t global_line = 0;  // lines consumed in all files (drives sharding)
};

class CriteoReader {
 public:
  static absl::StatusOr<std::unique_ptr<CriteoReader>> Open(std::vector<std::string> files,
                                                             const CriteoReaderOptions& options,
                                                             const ReaderPosition& start = {});

  // The next example of this shard: true, or false at the end of the data.
  absl::StatusOr<bool> Next(CriteoExample* out);

  const ReaderPosition& position() const { return position_; }
  // Malformed lines skipped so far (OnError::kSkip).
  uint64_t skipped() const { return skipped_; }

 private:
  CriteoReader(std::vector<std::string> files, const CriteoReaderOptions& options, const ReaderPosition& start)
      : files_(std::move(files)), options_(options), position_(start) {}
  absl::Status OpenCurrent();

  const std::vector<std::string> files_;
  const CriteoReaderOptions options_;
  ReaderPosition position_;
  std::ifstream in_;
  bool open_ = false;
  uint64_t skipped_ = 0;
  std::string line_;
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_DATA_CRITEO_READER_H_
