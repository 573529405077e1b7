#include "worker/data/record_reader.h"

namespace kestrel {

absl::StatusOr<ShardedLines> ShardedLines::Open(std::vector<std::string> files, const ReaderOptions& options,
                                                const ReaderPosition& start) {
  if (options.num_shards < 1 || options.shard_index < 0 || options.shard_index >= options.num_shards) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shard %d of %d is not a shard", options.shard_index, options.num_shards));
  }
  for (const std::string& f : files) {
    if (!std::ifstream(f).good()) return absl::NotFoundError(absl::StrFormat("cannot open data file %s", f));
  }
  return ShardedLines(std::move(files), options, start);
}

absl::StatusOr<bool> ShardedLines::Next(absl::string_view* line) {
  while (position_.file < files_.size()) {
    if (in_ == nullptr) {
      in_ = std::make_unique<std::ifstream>(files_[position_.file]);
      if (!in_->good()) return absl::NotFoundError(absl::StrFormat("cannot open data file %s", files_[position_.file]));
      in_->seekg(static_cast<std::streamoff>(position_.byte_offset));
    }
    if (!std::getline(*in_, line_)) {  // the end of this file (or a resume past it)
      in_.reset();
      ++position_.file;
      position_.byte_offset = 0;
      position_.file_line = 0;
      continue;
    }
    ++position_.file_line;
    const uint64_t global = position_.global_line++;
    // Counted by hand: tellg() is -1 after a last line without a newline.
    position_.byte_offset += line_.size() + 1;
    if (static_cast<int64_t>(global % options_.num_shards) != options_.shard_index) continue;
    absl::string_view view = line_;
    if (!view.empty() && view.back() == '\r') view.remove_suffix(1);
    if (view.empty()) continue;
    *line = view;
    return true;
  }
  return false;
}

std::string ShardedLines::Where() const {
  return absl::StrFormat("%s:%d", files_[std::min(position_.file, files_.size() - 1)], position_.file_line);
}

}  // namespace kestrel
