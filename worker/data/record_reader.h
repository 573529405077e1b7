// RecordReader<Example>: streaming, sharded, optionally shuffled reading of line-oriented data files, one record
// per line, parsed by a format's parse function (worker/data/criteo_reader.h, libsvm_reader.h). Bounded memory.
//
// Lines. The data lines of `files` are every line but blank ones (nothing, or a lone '\r') and, with
// ReaderOptions::header, the first line of each file. Their global indices count them across the files in order,
// from 0; "file:line" in errors counts every line of the file, from 1.
//
// Order and sharding. Lines are dealt in an order: file order, or with shuffling the seeded order of
// worker/data/line_shuffle.h (windows of shuffle_window lines, each permuted by (seed, epoch, window)). A line's
// place in that order is its position (its global index without shuffling). A reader returns the lines whose
// position is in its share (common/line_assignment.h LineAssignment; plain sharding: position congruent to part modulo
// num_parts), in increasing position: deterministic, every line read by exactly one part, and the order does not
// depend on the number of parts. With shuffling a reader reads a whole window and keeps its own lines of it:
// memory for about shuffle_window / num_parts lines.
//
// Positions. The reader's position (ReaderPosition) can be saved and resumed: a resumed reader returns exactly
// the lines after the last one returned. With shuffling it reads the current window again and skips what was
// returned; ReaderPosition::global_line (the next position) is what dealing the lines anew counts (scheduler/epoch_plan.h).
//
// Malformed lines are an InvalidArgument naming "file:line" and the problem (OnError::kFail, the default), or
// are skipped and counted (OnError::kSkip). Thread-compatible.
#ifndef KESTREL_WORKER_DATA_RECORD_READER_H_
#define KESTREL_WORKER_DATA_RECORD_READER_H_

#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/line_assignment.h"
#include "worker/data/line_shuffle.h"

namespace kestrel {

struct ReaderOptions {
  enum class OnError { kFail, kSkip };
  // What a malformed line does. Default: kFail.
  OnError on_error = OnError::kFail;
  // This reader's part of the lines. Defaults: 0 of 1 (every line).
  int part = 0;
  int num_parts = 1;
  // Instead of part / num_parts: an explicit share of the positions (a rescaled epoch, common/line_assignment.h).
  // Default: none.
  std::shared_ptr<const LineAssignment> assignment;
  // The first line of every file is a header, not a record. Default: false.
  bool header = false;
  // Shuffling (worker/data/line_shuffle.h): windows of this many consecutive lines, each dealt in a seeded random
  // order. 0: file order. Default: 0.
  uint64_t shuffle_window = 0;
  // The shuffle's seed, and the epoch being read (every epoch has its own order). Defaults: 0 and 0.
  uint64_t shuffle_seed = 0;
  int64_t epoch = 0;
  // A validation split held out of the training files (DataConfig.validation_every): the data lines whose text
  // hashes (common/hash.h Hash64) to a multiple of `every` are its lines. A training reader (`validation` false)
  // skips them and a validation reader reads only them; the lines skipped are not data lines for the reader
  // (global indices and positions count the others). Default: every 0, nothing held out.
  // Or, `held` set (DataConfig.validation_column, built by worker/batch_reader.h TrainingHoldout): the lines for
  // which it returns true are the validation split's; `every` is then unused.
  struct Holdout {
    uint32_t every = 0;
    bool validation = false;
    std::shared_ptr<const std::function<bool(absl::string_view line)>> held;
    bool active() const { return every > 0 || held != nullptr; }
  };
  Holdout holdout;
  // BatchReader: threads parsing a batch's lines (in chunks, joined in line order: the batch, the skipped lines and
  // the first error are those of one thread). Default: 1 (the caller's thread alone).
  int parse_threads = 1;
};

// The positions a reader with `options` returns: options.assignment, or the plain sharding of part / num_parts.
LineAssignment ShareOf(const ReaderOptions& options);

// Where a reader is: resume a reader (same files and options) from it to continue exactly after the last record
// returned.
struct ReaderPosition {
  // Where reading continues: the file (index into the file list), the byte offset within it, and the lines of the
  // file before that offset (blank and header lines included).
  size_t file = 0;
  uint64_t byte_offset = 0;
  uint64_t file_line = 0;
  // The next position in the dealing order: every line of the reader's share before it has been returned, none
  // from it on. Without shuffling also the global index of the data line at `byte_offset`.
  uint64_t global_line = 0;
  // With shuffling: the global index of the data line at `byte_offset`, the first line of the window being read.
  // Unused without.
  uint64_t window_line = 0;
};

// Finds this part's next data line. Shared by every RecordReader.
class ShardedLines {
 public:
  // InvalidArgument for a malformed share, or a shuffled `start` that is not in a window it can resume;
  // NotFound for a missing file.
  [[nodiscard]] static absl::StatusOr<ShardedLines> Open(std::vector<std::string> files, const ReaderOptions& options,
                                           const ReaderPosition& start);
  // The next line of this part (true), or the end of the data (false). `line` stays valid until the next call.
  [[nodiscard]] absl::StatusOr<bool> Next(absl::string_view* line);
  // "file:line" of the line last returned.
  std::string Where() const { return WhereOf(mark()); }
  // The line last returned, to name it later (WhereOf) when it is no longer the last.
  struct LineMark {
    size_t file = 0;
    uint64_t file_line = 0;
  };
  LineMark mark() const { return {last_file_, last_file_line_}; }
  // "file:line" of a line marked earlier.
  std::string WhereOf(LineMark mark) const;
  // The global index of the line last returned (its place in the files, whatever the order).
  uint64_t line() const { return last_line_; }
  const ReaderPosition& position() const { return position_; }

 private:
  // A place in the files: file, byte offset, file lines, and the global index of the next data line.
  struct Cursor {
    size_t file = 0;
    uint64_t byte_offset = 0;
    uint64_t file_line = 0;
    uint64_t line = 0;
  };
  // A line of the window being read that belongs to this part.
  struct Kept {
    uint64_t position = 0;
    uint64_t line = 0;
    size_t file = 0;
    uint64_t file_line = 0;
    const char* text = nullptr;  // in blocks_
    size_t size = 0;
  };
  // Holds kept lines' text: filled, emptied whole, reused (a growing string would copy the text over and over).
  struct Block {
    std::unique_ptr<char[]> data;
    size_t size = 0;
    size_t used = 0;
  };

  ShardedLines(std::vector<std::string> files, const ReaderOptions& options, const ReaderPosition& start);

  // Reads the data line at cursor_ into data_ and moves past it (and past the header and blank lines before it);
  // false at the end of the files.
  [[nodiscard]] absl::StatusOr<bool> ReadDataLine();
  [[nodiscard]] absl::StatusOr<bool> NextInFileOrder(absl::string_view* line);
  [[nodiscard]] absl::StatusOr<bool> NextShuffled(absl::string_view* line);
  // Reads the window at cursor_ (a window's first line), keeping this part's lines from position_.global_line
  // on, in increasing position; false at the end of the files.
  [[nodiscard]] absl::StatusOr<bool> LoadWindow();
  // A copy of `text` in blocks_, valid until the blocks are emptied.
  const char* Keep(absl::string_view text);

  std::vector<std::string> files_;
  ReaderOptions options_;
  LineAssignment share_;
  std::optional<LineShuffle> shuffle_;
  ReaderPosition position_;
  Cursor cursor_;
  std::unique_ptr<std::ifstream> in_;  // open at cursor_
  std::string text_;                   // the physical line last read
  absl::string_view data_;             // the data line ReadDataLine found (in text_)
  // The line last returned.
  size_t last_file_ = 0;
  uint64_t last_file_line_ = 0;
  uint64_t last_line_ = 0;
  // Shuffling: this part's lines of the window being read, in increasing position; the next to return.
  std::vector<Kept> window_;
  std::vector<Block> blocks_;
  size_t block_ = 0;  // the first block with room
  size_t next_ = 0;
  bool window_loaded_ = false;
  Cursor window_end_;  // the cursor after the window
};

// The data lines of `files` (with `header`, the first line of each file is not one): the global indices run
// from 0 to that count - 1, and a reader's lines are ShareOf(options).CountBelow(that count), malformed ones
// included. One pass over the files.
[[nodiscard]] absl::StatusOr<uint64_t> CountDataLines(const std::vector<std::string>& files, bool header,
                                                     const ReaderOptions::Holdout& holdout = {});

// Whether a reader with `holdout` reads the data line `text` (without its '\r').
bool HoldoutKeeps(const ReaderOptions::Holdout& holdout, absl::string_view text);

template <typename Example>
class RecordReader {
 public:
  // Parses one line (without its newline); InvalidArgument describes the problem (the reader adds file:line).
  using ParseFn = absl::Status (*)(absl::string_view line, Example* out);

  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RecordReader>> Open(std::vector<std::string> files, ParseFn parse,
                                                             const ReaderOptions& options = {},
                                                             const ReaderPosition& start = {}) {
    auto lines = ShardedLines::Open(std::move(files), options, start);
    if (!lines.ok()) return lines.status();
    return std::unique_ptr<RecordReader>(new RecordReader(std::move(lines).value(), parse, options));
  }

  // The next record of this part: true, or false at the end of the data.
  [[nodiscard]] absl::StatusOr<bool> Next(Example* out) {
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
  // The global index of the record last returned.
  uint64_t line() const { return lines_.line(); }
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
