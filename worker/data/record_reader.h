// RecordReader<Example>: streaming, sharded reading of line-oriented data files, one record per line, parsed
// by a format's parse function (worker/data/criteo_reader.h, libsvm_reader.h). Bounded memory.
//
// Sharding: worker `part` of `num_parts` reads the lines whose global index (counted across the files
// in order, from 0) is congruent to part modulo num_parts: deterministic, and every line is read by
// exactly one worker. The reader's position (file, byte offset, line numbers) can be saved and resumed.
// Blank lines carry nothing and are passed over.
//
// Malformed lines are an InvalidArgument naming "file:line" and the problem (OnError::kFail, the default), or
// are skipped and counted (OnError::kSkip). Thread-compatible.
#ifndef KESTREL_WORKER_DATA_RECORD_READER_H_
#define KESTREL_WORKER_DATA_RECORD_READER_H_

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/reshard.h"

namespace kestrel {

struct ReaderOptions {
  enum class OnError { kFail, kSkip };
  // What a malformed line does. Default: kFail.
  OnError on_error = OnError::kFail;
  // This reader's shard of the lines. Defaults: 0 of 1 (every line).
  int part = 0;
  int num_parts = 1;
  // Instead of part / num_parts: an explicit share of the lines (a rescaled epoch, common/reshard.h).
  // Default: none.
  std::shared_ptr<const ShardAssignment> assignment;
  // The first line of every file is a header, not a record. Default: false.
  bool header = false;
};

// Where a reader is: resume a reader from it to continue exactly after the last record returned.
struct ReaderPosition {
  size_t file = 0;           // index into the file list
  uint64_t byte_offset = 0;  // within that file
  uint64_t file_line = 0;    // lines consumed in that file
  uint64_t global_line = 0;  // lines consumed in all files (drives sharding)
};

// Finds this shard's next non-blank line. Shared by every RecordReader.
class ShardedLines {
 public:
  static absl::StatusOr<ShardedLines> Open(std::vector<std::string> files, const ReaderOptions& options,
                                           const ReaderPosition& start);
  // The next line of this shard (true), or the end of the data (false). `line` stays valid until the next call.
  absl::StatusOr<bool> Next(absl::string_view* line);
  // "file:line" of the line last returned.
  std::string Where() const;
  const ReaderPosition& position() const { return position_; }

 private:
  ShardedLines(std::vector<std::string> files, const ReaderOptions& options, const ReaderPosition& start)
      : files_(std::move(files)), options_(options), position_(start) {}

  std::vector<std::string> files_;
  ReaderOptions options_;
  ReaderPosition position_;
  std::unique_ptr<std::ifstream> in_;
  std::string line_;
};

// The non-blank lines of each of `num_parts` shards of `files` (what each shard's reader will return, malformed
// lines included): one pass over the data.
absl::StatusOr<std::vector<uint64_t>> CountPartLines(const std::vector<std::string>& files, int num_parts);
// The same for explicit shares (each line in at most one of them).
absl::StatusOr<std::vector<uint64_t>> CountAssignmentLines(const std::vector<std::string>& files,
                                                           absl::Span<const ShardAssignment> shares);

template <typename Example>
class RecordReader {
 public:
  // Parses one line (without its newline); InvalidArgument describes the problem (the reader adds file:line).
  using ParseFn = absl::Status (*)(absl::string_view line, Example* out);

  static absl::StatusOr<std::unique_ptr<RecordReader>> Open(std::vector<std::string> files, ParseFn parse,
                                                             const ReaderOptions& options = {},
                                                             const ReaderPosition& start = {}) {
    auto lines = ShardedLines::Open(std::move(files), options, start);
    if (!lines.ok()) return lines.status();
    return std::unique_ptr<RecordReader>(new RecordReader(std::move(lines).value(), parse, options));
  }

  // The next record of this shard: true, or false at the end of the data.
  absl::StatusOr<bool> Next(Example* out) {
    absl::string_view line;
    while (true) {
      absl::StatusOr<bool> more = lines_.Next(&line);
      if (!more.ok() || !*more) return more;
      absl::Status parsed = parse_(line, out);
      if (parsed.ok()) return true;
      if (on_error_ == ReaderOptions::OnError::kFail) {
        return absl::InvalidArgumentError(absl::StrFormat("%s: %s", lines_.Where(), parsed.message()));
      }
      ++skipped_;
    }
  }

  const ReaderPosition& position() const { return lines_.position(); }
  // "file:line" of the record last returned.
  std::string Where() const { return lines_.Where(); }
  // Malformed lines skipped so far (OnError::kSkip).
  uint64_t skipped() const { return skipped_; }

 private:
  RecordReader(ShardedLines lines, ParseFn parse, const ReaderOptions& options)
      : lines_(std::move(lines)), parse_(parse), on_error_(options.on_error) {}

  ShardedLines lines_;
  const ParseFn parse_;
  const ReaderOptions::OnError on_error_;
  uint64_t skipped_ = 0;
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_DATA_RECORD_READER_H_
