#include "worker/train_stream.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "common/status.h"

namespace kestrel {

namespace fs = std::filesystem;

absl::StatusOr<std::vector<std::string>> TrainStream::List() const {
  std::error_code error;
  fs::directory_iterator it(dir_, error);
  if (error) {
    if (error == std::errc::no_such_file_or_directory) {
      return absl::NotFoundError(absl::StrCat("the training directory ", dir_, " does not exist"));
    }
    return absl::UnavailableError(absl::StrCat("cannot list the training directory ", dir_, ": ", error.message()));
  }
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.' || name[0] == '_') continue;
    if (!entry.is_regular_file(error)) continue;
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<std::optional<std::string>> TrainStream::StopName() const {
  const std::string path = absl::StrCat(dir_, "/", kStreamStopFile);
  std::error_code error;
  if (const uintmax_t size = fs::file_size(path, error); !error && size > kMaxStopFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is ", size, " bytes; a stop file holds one file name (at most ", kMaxStopFileBytes, ")"));
  }
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (absl::IsNotFound(text.status())) return std::nullopt;
  if (!text.ok()) return text.status();
  return std::string(absl::StripAsciiWhitespace(*text));
}

absl::StatusOr<std::optional<std::string>> TrainStream::WaitFor(int64_t index,
                                                                const std::function<bool()>& cancelled) const {
  while (true) {
    // The stop file first: a file listed after it was read is still taken when it is at or before the name.
    KESTREL_ASSIGN_OR_RETURN(const std::optional<std::string> stop, StopName());
    KESTREL_ASSIGN_OR_RETURN(const std::vector<std::string> names, List());
    if (static_cast<size_t>(index) < names.size() &&
        (!stop.has_value() || stop->empty() || names[index] <= *stop)) {
      return absl::StrCat(dir_, "/", names[index]);
    }
    if (stop.has_value()) {
      const int64_t last = stop->empty() ? static_cast<int64_t>(names.size())
                                         : std::upper_bound(names.begin(), names.end(), *stop) - names.begin();
      if (index >= last) return std::nullopt;  // the stream ends before it
    }
    if (cancelled && cancelled()) return absl::CancelledError("stopped while waiting for the next training file");
    absl::SleepFor(poll_);
  }
}

absl::StatusOr<std::string> TrainStream::Stop(const std::string& dir) {
  KESTREL_ASSIGN_OR_RETURN(const std::vector<std::string> names, TrainStream(dir, absl::ZeroDuration()).List());
  const std::string last = names.empty() ? "" : names.back();
  KESTREL_RETURN_IF_ERROR(WriteFileAtomically(absl::StrCat(dir, "/", kStreamStopFile), last + "\n"));
  return last;
}

}  // namespace kestrel
