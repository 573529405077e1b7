// BatchReader: one worker's share of a job's data files read as Batches, each line parsed as the job's Schema
// (worker/data/schema.h) says. Lines come from ShardedLines (worker/data/record_reader.h: sharding, shuffling,
// header lines, resumable positions); a malformed line fails the read with "file:line: problem" or, with
// ReaderOptions::OnError::kSkip, is skipped and counted. Thread-compatible.
#ifndef KESTREL_WORKER_BATCH_READER_H_
#define KESTREL_WORKER_BATCH_READER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "worker/data/batch.h"
#include "worker/data/record_reader.h"
#include "worker/data/schema.h"
#include "worker/data/schema_parser.h"

namespace kestrel {

class BatchReader {
 public:
  // Reads `files` as `schema` says; options.header is taken from schema->header(). `start`: where to continue
  // (a position() saved earlier with the same files and options). NotFound for a missing file.
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
  BatchReader(std::shared_ptr<const Schema> schema, ShardedLines lines, ReaderOptions::OnError on_error);

  const std::shared_ptr<const Schema> schema_;
  ShardedLines lines_;
  LineParser parser_;
  const ReaderOptions::OnError on_error_;
  uint64_t skipped_ = 0;
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_BATCH_READER_H_
