#include "worker/data/record_reader.h"

#include <algorithm>

#include "absl/functional/function_ref.h"
#include "common/status.h"

namespace kestrel {

absl::StatusOr<ShardedLines> ShardedLines::Open(std::vector<std::string> files, const ReaderOptions& options,
                                                const ReaderPosition& start) {
  if (options.assignment != nullptr) {
    const ShardAssignment& a = *options.assignment;
    if (a.count < 1 || a.index < 0 || a.index >= a.count ||
        !std::is_sorted(a.leftovers.begin(), a.leftovers.end()) ||
        (!a.leftovers.empty() && a.leftovers.back() >= a.watermark)) {
      return absl::InvalidArgumentError("a malformed share of the lines (common/reshard.h)");
    }
  } else if (options.num_parts < 1 || options.part < 0 || options.part >= options.num_parts) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shard %d of %d is not a shard", options.part, options.num_parts));
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
    if (options_.assignment != nullptr ? !options_.assignment->Contains(global)
                                       : static_cast<int64_t>(global % options_.num_parts) != options_.part) {
      continue;
    }
    absl::string_view view = line_;
    if (!view.empty() && view.back() == '\r') view.remove_suffix(1);
    if (view.empty()) continue;
    *line = view;
    return true;
  }
  return false;
}

namespace {

// Calls on_line(global index) for every non-blank line of `files` (as ShardedLines::Next sees them): one pass.
absl::Status ForEachLine(const std::vector<std::string>& files, absl::FunctionRef<void(uint64_t)> on_line) {
  std::vector<char> buffer(1 << 20);
  uint64_t global = 0;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in.good()) return absl::NotFoundError(absl::StrFormat("cannot open data file %s", f));
    // A line is blank when it holds nothing but an optional '\r' (as ShardedLines::Next sees it).
    uint64_t line_chars = 0;
    bool only_cr = true;
    auto end_line = [&] {
      if (line_chars > 0 && !(only_cr && line_chars == 1)) on_line(global);
      ++global;
      line_chars = 0;
      only_cr = true;
    };
    while (in.read(buffer.data(), buffer.size()) || in.gcount() > 0) {
      const std::streamsize got = in.gcount();
      for (std::streamsize i = 0; i < got; ++i) {
        const char c = buffer[i];
        if (c == '\n') {
          end_line();
        } else {
          ++line_chars;
          if (c != '\r') only_cr = false;
        }
      }
    }
    if (line_chars > 0) end_line();  // a last line without a newline
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<uint64_t>> CountPartLines(const std::vector<std::string>& files, int num_parts) {
  if (num_parts < 1) return absl::InvalidArgumentError(absl::StrFormat("%d shards", num_parts));
  std::vector<uint64_t> counts(num_parts, 0);
  KESTREL_RETURN_IF_ERROR(ForEachLine(files, [&](uint64_t global) { ++counts[global % num_parts]; }));
  return counts;
}

absl::StatusOr<std::vector<uint64_t>> CountAssignmentLines(const std::vector<std::string>& files,
                                                           absl::Span<const ShardAssignment> shares) {
  std::vector<uint64_t> counts(shares.size(), 0);
  KESTREL_RETURN_IF_ERROR(ForEachLine(files, [&](uint64_t global) {
    for (size_t v = 0; v < shares.size(); ++v) {
      if (shares[v].Contains(global)) {
        ++counts[v];
        break;
      }
    }
  }));
  return counts;
}

std::string ShardedLines::Where() const {
  return absl::StrFormat("%s:%d", files_[std::min(position_.file, files_.size() - 1)], position_.file_line);
}

}  // namespace kestrel
