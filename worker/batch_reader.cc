#include "worker/batch_reader.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "common/status.h"
#include "common/usable_cores.h"

namespace kestrel {

namespace {

// Fewer lines than this per chunk are not worth a thread's hand-off.
constexpr size_t kMinChunkLines = 256;

}  // namespace

int DefaultParseThreads() {
  return std::clamp(UsableCores() / 4, 1, 4);
}

ReaderOptions ReaderOptionsFor(const DataConfig& data) {
  ReaderOptions options;
  options.on_error = data.skip_malformed() ? ReaderOptions::OnError::kSkip : ReaderOptions::OnError::kFail;
  options.parse_threads = data.parse_threads() != 0 ? data.parse_threads() : DefaultParseThreads();
  return options;
}

bool AtOrAfter(absl::string_view value, absl::string_view from) {
  double v = 0;
  double f = 0;
  if (absl::SimpleAtod(value, &v) && absl::SimpleAtod(from, &f) && !std::isnan(v) && !std::isnan(f)) return v >= f;
  return value >= from;
}

namespace {

// Column `column` of `line` split on `delimiter` (quoted columns unquoted); nullopt for a line without it or
// with a broken quote (the parser reports it when the line is read). Lines without the quote character are
// scanned in place; the others are split whole.
std::optional<std::string> ColumnOf(absl::string_view line, int column, char delimiter, int quote) {
  if (quote >= 0 && line.find(static_cast<char>(quote)) != absl::string_view::npos) {
    absl::StatusOr<std::vector<std::string>> columns = SplitDelimitedLine(line, delimiter, quote);
    if (!columns.ok() || static_cast<int>(columns->size()) <= column) return std::nullopt;
    return std::move((*columns)[column]);
  }
  size_t begin = 0;
  for (int c = 0; c < column; ++c) {
    const size_t next = line.find(delimiter, begin);
    if (next == absl::string_view::npos) return std::nullopt;
    begin = next + 1;
  }
  const size_t end = line.find(delimiter, begin);
  return std::string(line.substr(begin, end == absl::string_view::npos ? line.size() - begin : end - begin));
}

}  // namespace

absl::StatusOr<ReaderOptions::Holdout> TrainingHoldout(const DataConfig& data) {
  ReaderOptions::Holdout holdout;
  if (data.validation_column().empty()) {
    if (!data.validation_from().empty()) {
      return absl::InvalidArgumentError("data.validation_from is set without data.validation_column");
    }
    if (data.validation_files().empty()) holdout.every = data.validation_every();
    return holdout;
  }
  const std::string& name = data.validation_column();
  if (data.validation_from().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("data.validation_column '", name, "' needs data.validation_from: "
                                                   "the first value of the validation split"));
  }
  if (data.validation_every() > 0 || data.validation_files_size() > 0) {
    return absl::InvalidArgumentError(absl::StrCat("data.validation_column '", name, "' chooses the validation split, "
                                                   "and so does data.", data.validation_every() > 0 ?
                                                   "validation_every" : "validation_files", ": set one of them"));
  }
  KESTREL_ASSIGN_OR_RETURN(DelimitedLayout layout, ReadDelimitedLayout(data));
  const auto found = std::find(layout.columns.begin(), layout.columns.end(), name);
  if (found == layout.columns.end()) {
    return absl::InvalidArgumentError(absl::StrCat("data.validation_column '", name, "' is not one of the ",
                                                   layout.columns.size(), " columns"));
  }
  const int column = static_cast<int>(found - layout.columns.begin());
  holdout.held = std::make_shared<const std::function<bool(absl::string_view)>>(
      [column, delimiter = layout.delimiter, quote = layout.quote, from = data.validation_from()](absl::string_view line) {
        const std::optional<std::string> value = ColumnOf(line, column, delimiter, quote);
        return value.has_value() && !value->empty() && AtOrAfter(*value, from);
      });
  return holdout;
}

BatchReader::BatchReader(std::shared_ptr<const Schema> schema, ShardedLines lines, ReaderOptions::OnError on_error,
                         int parse_threads)
    : schema_(schema), lines_(std::move(lines)), parser_(schema), on_error_(on_error) {
  if (parse_threads <= 1) return;
  pool_ = std::make_unique<ThreadPool>(parse_threads - 1);
  chunks_.resize(parse_threads);
  for (Chunk& chunk : chunks_) chunk.parser = std::make_unique<LineParser>(schema);
}

absl::StatusOr<std::unique_ptr<BatchReader>> BatchReader::Open(std::shared_ptr<const Schema> schema,
                                                               const std::vector<std::string>& files,
                                                               const ReaderOptions& options,
                                                               const ReaderPosition& start) {
  if (files.empty()) return absl::InvalidArgumentError("no data files given");
  if (options.parse_threads < 1 || options.parse_threads > kMaxParseThreads) {
    return absl::InvalidArgumentError(absl::StrCat("data.parse_threads is ", options.parse_threads,
                                                   ": it must be 0 (the default) or 1 to ", kMaxParseThreads));
  }
  KESTREL_RETURN_IF_ERROR(CheckHeaders(*schema, files));
  ReaderOptions with_header = options;
  with_header.header = schema->header();
  KESTREL_ASSIGN_OR_RETURN(ShardedLines lines, ShardedLines::Open(files, with_header, start));
  return std::unique_ptr<BatchReader>(
      new BatchReader(std::move(schema), std::move(lines), options.on_error, options.parse_threads));
}

absl::StatusOr<int64_t> BatchReader::Fill(int64_t size, Batch* batch, bool append, std::vector<uint64_t>* lines) {
  if (!append) batch->Reset(schema_->fields(), schema_->dense_dim());
  if (pool_ != nullptr) return FillParallel(size, batch, lines);
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

absl::StatusOr<int64_t> BatchReader::FillParallel(int64_t size, Batch* batch, std::vector<uint64_t>* lines) {
  while (batch->size < size) {
    // The lines one thread would read next if none were malformed; any that are leave a shortfall for the
    // next round, so exactly the lines one thread reads are read.
    round_.text.clear();
    round_.ends.clear();
    round_.marks.clear();
    round_.global.clear();
    absl::string_view line;
    for (int64_t want = size - batch->size; want > 0; --want) {
      KESTREL_ASSIGN_OR_RETURN(bool more, lines_.Next(&line));
      if (!more) break;
      round_.text.append(line.data(), line.size());
      round_.ends.push_back(round_.text.size());
      round_.marks.push_back(lines_.mark());
      round_.global.push_back(lines_.line());
    }
    const size_t n = round_.ends.size();
    if (n == 0) break;
    const size_t chunks = std::min(chunks_.size(), std::max<size_t>(1, n / kMinChunkLines));
    absl::BlockingCounter done(static_cast<int>(chunks) - 1);
    for (size_t c = 1; c < chunks; ++c) {
      pool_->Schedule([this, c, n, chunks, lines, &done] {
        ParseChunk(n * c / chunks, n * (c + 1) / chunks, lines != nullptr, &chunks_[c]);
        done.DecrementCount();
      });
    }
    ParseChunk(0, n / chunks, lines != nullptr, &chunks_[0]);
    done.Wait();
    for (size_t c = 0; c < chunks; ++c) {
      Chunk& chunk = chunks_[c];
      if (chunk.failed != SIZE_MAX) {  // the first malformed line in line order (chunks are in order)
        return absl::InvalidArgumentError(
            absl::StrCat(lines_.WhereOf(round_.marks[chunk.failed]), ": ", chunk.error.message()));
      }
      batch->Append(chunk.batch);
      skipped_ += chunk.skipped;
      if (lines != nullptr) lines->insert(lines->end(), chunk.lines.begin(), chunk.lines.end());
    }
  }
  return batch->size;
}

void BatchReader::ParseChunk(size_t begin, size_t end, bool log_lines, Chunk* chunk) {
  chunk->batch.Reset(schema_->fields(), schema_->dense_dim());
  chunk->lines.clear();
  chunk->skipped = 0;
  chunk->failed = SIZE_MAX;
  for (size_t i = begin; i < end; ++i) {
    const size_t from = i == 0 ? 0 : round_.ends[i - 1];
    absl::Status parsed =
        chunk->parser->Append(absl::string_view(round_.text).substr(from, round_.ends[i] - from), &chunk->batch);
    if (!parsed.ok()) {
      if (on_error_ == ReaderOptions::OnError::kFail) {
        chunk->failed = i;
        chunk->error = std::move(parsed);
        return;
      }
      ++chunk->skipped;
      continue;
    }
    if (log_lines) chunk->lines.push_back(round_.global[i]);
  }
}

}  // namespace kestrel
