#include "worker/batch_reader.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace kestrel {

BatchReader::BatchReader(std::shared_ptr<const Schema> schema, ShardedLines lines, ReaderOptions::OnError on_error)
    : schema_(schema), lines_(std::move(lines)), parser_(std::move(schema)), on_error_(on_error) {}

absl::StatusOr<std::unique_ptr<BatchReader>> BatchReader::Open(std::shared_ptr<const Schema> schema,
                                                               const std::vector<std::string>& files,
                                                               const ReaderOptions& options,
                                                               const ReaderPosition& start) {
  if (files.empty()) return absl::InvalidArgumentError("no data files given");
  ReaderOptions with_header = options;
  with_header.header = schema->header();
  KESTREL_ASSIGN_OR_RETURN(ShardedLines lines, ShardedLines::Open(files, with_header, start));
  return std::unique_ptr<BatchReader>(new BatchReader(std::move(schema), std::move(lines), options.on_error));
}

absl::StatusOr<int64_t> BatchReader::Fill(int64_t size, Batch* batch, bool append, std::vector<uint64_t>* lines) {
  if (!append) batch->Reset(schema_->fields(), schema_->dense_dim());
  absl::string_view line;
  while (batch->size < size) {
    KESTREL_ASSIGN_OR_RETURN(bool more, lines_.Next(&line));
    if (!more) break;
    absl::Status parsed = parser_.Append(line, batch);
    if (!parsed.ok()) {
      if (on_error_ == ReaderOptions::OnError::kFail) {
        return absl::InvalidArgumentError(absl::StrCat(lines_.Where(), ": ", parsed.message()));
      }
      ++skipped_;
      continue;
    }
    if (lines != nullptr) lines->push_back(lines_.line());
  }
  return batch->size;
}

}  // namespace kestrel
