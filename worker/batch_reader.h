// BatchReader: one worker's share of a job's data files read as Batches, each line parsed as the job's Schema
// (worker/data/schema.h) says. Lines come from ShardedLines (worker/data/record_reader.h: sharding, shuffling,
// header lines, resumable positions); a malformed line fails the read with "file:line: problem" or, with
// ReaderOptions::OnError::kSkip, is skipped and counted. With ReaderOptions::parse_threads > 1 a batch's lines are
// copied out, parsed in contiguous chunks on a pool the reader owns and joined in order (Batch::Append), so the
// result is the one thread's, bit for bit. Thread-compatible.
#ifndef KESTREL_WORKER_BATCH_READER_H_
#define KESTREL_WORKER_BATCH_READER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/thread_pool.h"
#include "proto/job.pb.h"
#include "worker/data/batch.h"
#include "worker/data/record_reader.h"
#include "worker/data/schema.h"
#include "worker/data/schema_parser.h"

namespace kestrel {

// data.parse_threads 0: a quarter of the usable cores (common/usable_cores.h), from 1 to 4 (one on a small
// machine, where the parse shares the cores with the model and the servers; more on a GPU host, where the host
// side feeds the card).
int DefaultParseThreads();
// The most parse threads a reader starts (ReaderOptions::parse_threads, data.parse_threads).
inline constexpr int kMaxParseThreads = 64;
// The reader options a job's data asks for: its malformed-line rule (skip_malformed) and its parse threads.
ReaderOptions ReaderOptionsFor(const DataConfig& data);
// What `data`'s training reads leave out: the validation split held out of the training files, without
// validation_files: DataConfig.validation_every's lines, or those at or after validation_from by
// validation_column. InvalidArgument for a validation_column that `data` does not have (or with validation_every
// or validation_files, or without validation_from); reading the header may fail.
[[nodiscard]] absl::StatusOr<ReaderOptions::Holdout> TrainingHoldout(const DataConfig& data);
// Whether `value` is at or after `from` (DataConfig.validation_from): as numbers when both read as numbers,
// else byte by byte.
bool AtOrAfter(absl::string_view value, absl::string_view from);

class BatchReader {
 public:
  // Reads `files` as `schema` says; options.header is taken from schema->header(). `start`: where to continue
  // (a position() saved earlier with the same files and options). NotFound for a missing file; InvalidArgument
  // for parse_threads outside [1, kMaxParseThreads].
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<BatchReader>> Open(std::shared_ptr<const Schema> schema,
                                                           const std::vector<std::string>& files,
                                                           const ReaderOptions& options,
                                                           const ReaderPosition& start = {});

  // Replaces `batch` with up to `size` next examples (with `append`, adds them until it holds `size`);
  // returns how many examples the batch holds (fewer than `size` at the end of the data). `lines` (optional):
  // the global index of each example's line is appended to it.
  [[nodiscard]] absl::StatusOr<int64_t> Fill(int64_t size, Batch* batch, bool append = false, std::vector<uint64_t>* lines = nullptr);
  // Where the reader is (to resume from; checkpointed with the worker's state).
  const ReaderPosition& position() const { return lines_.position(); }
  // Malformed lines skipped so far (OnError::kSkip).
  uint64_t skipped() const { return skipped_; }

 private:
  BatchReader(std::shared_ptr<const Schema> schema, ShardedLines lines, ReaderOptions::OnError on_error,
              int parse_threads);

  // Fill with parse_threads > 1: rounds of (the lines still wanted, copied out; parsed in chunks; joined).
  [[nodiscard]] absl::StatusOr<int64_t> FillParallel(int64_t size, Batch* batch, std::vector<uint64_t>* lines);
  // The lines copied out for a round, and what their parse found.
  struct Round {
    std::string text;               // the lines, one after another
    std::vector<size_t> ends;       // where each line ends in `text`
    std::vector<ShardedLines::LineMark> marks;
    std::vector<uint64_t> global;   // each line's global index
  };
  // A chunk's parse: its examples, its good lines' global indices, its skipped lines, its first error's line.
  struct Chunk {
    std::unique_ptr<LineParser> parser;
    Batch batch;
    std::vector<uint64_t> lines;
    uint64_t skipped = 0;
    size_t failed = SIZE_MAX;  // index in the round of its first malformed line (OnError::kFail)
    absl::Status error;
  };
  // Parses lines [begin, end) of round_ into `chunk`.
  void ParseChunk(size_t begin, size_t end, bool log_lines, Chunk* chunk);

  const std::shared_ptr<const Schema> schema_;
  ShardedLines lines_;
  LineParser parser_;
  const ReaderOptions::OnError on_error_;
  uint64_t skipped_ = 0;
  // parse_threads > 1 only. The pool runs chunks 1.., the caller chunk 0.
  std::unique_ptr<ThreadPool> pool_;
  std::vector<Chunk> chunks_;
  Round round_;
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_BATCH_READER_H_
