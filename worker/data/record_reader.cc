#include "worker/data/record_reader.h"

#include <algorithm>
#include <cstring>

#include "common/hash.h"
#include "common/status.h"

namespace kestrel {

LineAssignment ShareOf(const ReaderOptions& options) {
  return options.assignment != nullptr ? *options.assignment : PlainAssignment(options.part, options.num_parts);
}

absl::StatusOr<ShardedLines> ShardedLines::Open(std::vector<std::string> files, const ReaderOptions& options,
                                                const ReaderPosition& start) {
  if (options.assignment != nullptr) {
    const LineAssignment& a = *options.assignment;
    if (a.count < 1 || a.index < 0 || a.index >= a.count ||
        !std::is_sorted(a.leftovers.begin(), a.leftovers.end()) ||
        (!a.leftovers.empty() && a.leftovers.back() >= a.watermark)) {
      return absl::InvalidArgumentError("a malformed share of the lines (common/line_assignment.h)");
    }
  } else if (options.num_parts < 1 || options.part < 0 || options.part >= options.num_parts) {
    return absl::InvalidArgumentError(
        absl::StrFormat("part %d of %d does not exist (parts are 0 to num_parts - 1)", options.part, options.num_parts));
  }
  if (options.shuffle_window > 0 &&
      (start.window_line % options.shuffle_window != 0 || start.global_line < start.window_line)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "reader position (line %d of the window at line %d) is not in a shuffle window of %d lines: was it saved "
        "with other reader options?",
        start.global_line, start.window_line, options.shuffle_window));
  }
  for (const std::string& f : files) {
    if (!std::ifstream(f).good()) return absl::NotFoundError(absl::StrFormat("cannot open data file %s", f));
  }
  return ShardedLines(std::move(files), options, start);
}

ShardedLines::ShardedLines(std::vector<std::string> files, const ReaderOptions& options, const ReaderPosition& start)
    : files_(std::move(files)), options_(options), share_(ShareOf(options)), position_(start) {
  cursor_.file = start.file;
  cursor_.byte_offset = start.byte_offset;
  cursor_.file_line = start.file_line;
  if (options.shuffle_window > 0) {
    shuffle_.emplace(options.shuffle_window, options.shuffle_seed, options.epoch);
    cursor_.line = start.window_line;
  } else {
    cursor_.line = start.global_line;
    position_.window_line = 0;
  }
}

absl::StatusOr<bool> ShardedLines::ReadDataLine() {
  while (cursor_.file < files_.size()) {
    if (in_ == nullptr) {
      in_ = std::make_unique<std::ifstream>(files_[cursor_.file]);
      if (!in_->good()) return absl::NotFoundError(absl::StrFormat("cannot open data file %s", files_[cursor_.file]));
      in_->seekg(static_cast<std::streamoff>(cursor_.byte_offset));
    }
    if (!std::getline(*in_, text_)) {  // the end of this file (or a resume past it)
      if (in_->bad()) return absl::DataLossError(absl::StrFormat("cannot read data file %s", files_[cursor_.file]));
      in_.reset();
      ++cursor_.file;
      cursor_.byte_offset = 0;
      cursor_.file_line = 0;
      continue;
    }
    const bool header = options_.header && cursor_.file_line == 0;
    ++cursor_.file_line;
    // Counted by hand: tellg() is -1 after a last line without a newline.
    cursor_.byte_offset += text_.size() + 1;
    if (header) continue;
    absl::string_view view = text_;
    if (!view.empty() && view.back() == '\r') view.remove_suffix(1);
    if (view.empty() || !HoldoutKeeps(options_.holdout, view)) continue;
    data_ = view;
    ++cursor_.line;
    return true;
  }
  return false;
}

absl::StatusOr<bool> ShardedLines::Next(absl::string_view* line) {
  return shuffle_.has_value() ? NextShuffled(line) : NextInFileOrder(line);
}

absl::StatusOr<bool> ShardedLines::NextInFileOrder(absl::string_view* line) {
  while (true) {
    KESTREL_ASSIGN_OR_RETURN(const bool more, ReadDataLine());
    position_.file = cursor_.file;
    position_.byte_offset = cursor_.byte_offset;
    position_.file_line = cursor_.file_line;
    position_.global_line = cursor_.line;
    if (!more) return false;
    const uint64_t global = cursor_.line - 1;
    if (!share_.Contains(global)) continue;
    last_file_ = cursor_.file;
    last_file_line_ = cursor_.file_line;
    last_line_ = global;
    *line = data_;
    return true;
  }
}

absl::StatusOr<bool> ShardedLines::NextShuffled(absl::string_view* line) {
  while (true) {
    if (next_ < window_.size()) {
      const Kept& kept = window_[next_++];
      position_.global_line = kept.position + 1;
      last_file_ = kept.file;
      last_file_line_ = kept.file_line;
      last_line_ = kept.line;
      *line = absl::string_view(kept.text, kept.size);
      return true;
    }
    if (window_loaded_) {  // all of this part's lines of the window returned: the next window
      window_loaded_ = false;
      cursor_ = window_end_;
      position_.file = cursor_.file;
      position_.byte_offset = cursor_.byte_offset;
      position_.file_line = cursor_.file_line;
      position_.window_line = cursor_.line;
      position_.global_line = std::max(position_.global_line, cursor_.line);
    }
    KESTREL_ASSIGN_OR_RETURN(const bool loaded, LoadWindow());
    if (!loaded) return false;
  }
}

absl::StatusOr<bool> ShardedLines::LoadWindow() {
  const Cursor start = cursor_;
  const uint64_t window = shuffle_->window();
  // The window's line count decides its permutation: window lines, unless the data ends inside it, which shows
  // only at its end; then the window is read again with the count it has (once, at the end of the data).
  uint64_t lines = window;
  while (true) {
    window_.clear();
    for (Block& block : blocks_) block.used = 0;
    block_ = 0;
    next_ = 0;
    while (cursor_.line - start.line < window) {
      KESTREL_ASSIGN_OR_RETURN(const bool more, ReadDataLine());
      if (!more) break;
      const uint64_t global = cursor_.line - 1;
      const uint64_t position = shuffle_->Position(global, lines);
      if (position < position_.global_line || !share_.Contains(position)) continue;
      window_.push_back(Kept{position, global, cursor_.file, cursor_.file_line, Keep(data_), data_.size()});
    }
    const uint64_t read = cursor_.line - start.line;
    if (read == 0) return false;
    if (read == lines) break;
    lines = read;
    cursor_ = start;
    in_.reset();
  }
  std::sort(window_.begin(), window_.end(), [](const Kept& a, const Kept& b) { return a.position < b.position; });
  window_end_ = cursor_;
  window_loaded_ = true;
  return true;
}

const char* ShardedLines::Keep(absl::string_view text) {
  constexpr size_t kBlockBytes = size_t{1} << 20;
  while (block_ < blocks_.size() && blocks_[block_].size - blocks_[block_].used < text.size()) ++block_;
  if (block_ == blocks_.size()) {
    const size_t size = std::max(kBlockBytes, text.size());
    blocks_.push_back(Block{std::make_unique<char[]>(size), size, 0});
  }
  Block& block = blocks_[block_];
  char* out = block.data.get() + block.used;
  std::memcpy(out, text.data(), text.size());
  block.used += text.size();
  return out;
}

std::string ShardedLines::WhereOf(LineMark mark) const {
  return absl::StrFormat("%s:%d", files_[std::min(mark.file, files_.size() - 1)], mark.file_line);
}

bool HoldoutKeeps(const ReaderOptions::Holdout& holdout, absl::string_view text) {
  if (holdout.held != nullptr) return (*holdout.held)(text) == holdout.validation;
  if (holdout.every == 0) return true;
  return (Hash64(text) % holdout.every == 0) == holdout.validation;
}

absl::StatusOr<uint64_t> CountDataLines(const std::vector<std::string>& files, bool header,
                                        const ReaderOptions::Holdout& holdout) {
  if (holdout.active()) {  // every line's text is looked at: read line by line, as a reader does
    uint64_t lines = 0;
    std::string text;
    for (const std::string& f : files) {
      std::ifstream in(f, std::ios::binary);
      if (!in.good()) return absl::NotFoundError(absl::StrFormat("cannot open data file %s", f));
      for (bool first = true; std::getline(in, text); first = false) {
        absl::string_view view = text;
        if (!view.empty() && view.back() == '\r') view.remove_suffix(1);
        if (!(header && first) && !view.empty() && HoldoutKeeps(holdout, view)) ++lines;
      }
      if (in.bad()) return absl::DataLossError(absl::StrFormat("cannot read data file %s", f));
    }
    return lines;
  }
  std::vector<char> buffer(1 << 20);
  uint64_t lines = 0;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in.good()) return absl::NotFoundError(absl::StrFormat("cannot open data file %s", f));
    // A line is blank when it holds nothing but an optional '\r' (as ShardedLines sees it). Lines are found with
    // memchr (vectorised); a line may span buffers.
    uint64_t line_chars = 0;
    char first_char = 0;
    bool first = true;
    auto end_line = [&] {
      if (!(header && first) && line_chars > 0 && !(line_chars == 1 && first_char == '\r')) ++lines;
      first = false;
      line_chars = 0;
    };
    while (in.read(buffer.data(), buffer.size()) || in.gcount() > 0) {
      const char* p = buffer.data();
      const char* const end = p + in.gcount();
      while (p < end) {
        const char* newline = static_cast<const char*>(std::memchr(p, '\n', end - p));
        const char* const stop = newline == nullptr ? end : newline;
        if (line_chars == 0 && stop > p) first_char = *p;
        line_chars += stop - p;
        if (newline == nullptr) break;
        end_line();
        p = newline + 1;
      }
    }
    if (in.bad()) return absl::DataLossError(absl::StrFormat("cannot read data file %s", f));
    if (line_chars > 0) end_line();  // a last line without a newline
  }
  return lines;
}

}  // namespace kestrel
