#include "worker/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/crc32c.h"

namespace kestrel {
namespace {

constexpr absl::string_view kFileVersion = "brain.Event:2";
constexpr size_t kFlushThreshold = size_t{64} << 10;
constexpr size_t kHeaderBytes = 8 + 4;  // length, masked CRC of the length
constexpr size_t kFooterBytes = 4;      // masked CRC of the data

void AppendLittleEndian(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t LoadLittleEndian(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

double WallSeconds(absl::Time t) { return absl::ToDoubleSeconds(t - absl::UnixEpoch()); }

std::string Hostname() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// Writes all of `data` to `fd`, retrying short writes and EINTR.
[[nodiscard]] absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat("EventWriter: cannot write ", path));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  int fd;
  do {
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("ReadTfRecordFile: cannot open ", path));
  std::string contents;
  char buf[1 << 16];
  while (true) {
    const ssize_t got = read(fd, buf, sizeof(buf));
    if (got < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      close(fd);
      return absl::ErrnoToStatus(err, absl::StrCat("ReadTfRecordFile: cannot read ", path));
    }
    if (got == 0) break;
    contents.append(buf, static_cast<size_t>(got));
  }
  close(fd);
  return contents;
}

}  // namespace

void AppendTfRecord(absl::string_view data, std::string* out) {
  const size_t start = out->size();
  AppendLittleEndian(data.size(), 8, out);
  const uint32_t length_crc = Crc32cMask(Crc32cExtend(0, out->data() + start, 8));
  AppendLittleEndian(length_crc, 4, out);
  out->append(data.data(), data.size());
  AppendLittleEndian(Crc32cMask(Crc32c(data)), 4, out);
}

absl::StatusOr<std::vector<std::string>> ReadTfRecordFile(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadWholeFile(path);
  if (!contents.ok()) return contents.status();
  const std::string& file = *contents;
  std::vector<std::string> records;
  size_t offset = 0;
  while (offset < file.size()) {
    const size_t index = records.size();
    auto data_loss = [&](absl::string_view what) {
      return absl::DataLossError(
          absl::StrFormat("ReadTfRecordFile: %s: record %d at byte offset %d: %s", path, index, offset, what));
    };
    const size_t left = file.size() - offset;
    if (left < kHeaderBytes) {
      return data_loss(absl::StrFormat("truncated header (%d of %d bytes)", left, kHeaderBytes));
    }
    const char* p = file.data() + offset;
    const uint64_t length = LoadLittleEndian(p, 8);
    const uint32_t length_crc = static_cast<uint32_t>(LoadLittleEndian(p + 8, 4));
    if (Crc32cUnmask(length_crc) != Crc32cExtend(0, p, 8)) return data_loss("length CRC mismatch");
    if (length > left - kHeaderBytes || left - kHeaderBytes - length < kFooterBytes) {
      return data_loss(absl::StrFormat("truncated: %d-byte record, %d bytes left in the file", length, left));
    }
    const absl::string_view data(p + kHeaderBytes, length);
    const uint32_t data_crc = static_cast<uint32_t>(LoadLittleEndian(p + kHeaderBytes + length, 4));
    if (Crc32cUnmask(data_crc) != Crc32c(data)) return data_loss("data CRC mismatch");
    records.emplace_back(data);
    offset += kHeaderBytes + length + kFooterBytes;
  }
  return records;
}

absl::StatusOr<std::vector<tensorboard::Event>> ReadEventFile(const std::string& path) {
  absl::StatusOr<std::vector<std::string>> records = ReadTfRecordFile(path);
  if (!records.ok()) return records.status();
  std::vector<tensorboard::Event> events(records->size());
  for (size_t i = 0; i < records->size(); ++i) {
    if (!events[i].ParseFromString((*records)[i])) {
      return absl::DataLossError(
          absl::StrFormat("ReadEventFile: %s: record %d does not parse as an Event", path, i));
    }
  }
  return events;
}

absl::StatusOr<std::unique_ptr<EventWriter>> EventWriter::Open(const std::string& logdir,
                                                                 absl::string_view tag_suffix) {
  if (tag_suffix.find('/') != absl::string_view::npos || tag_suffix.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("EventWriter: tag suffix '", tag_suffix, "' contains '/' or NUL (logdir ", logdir, ")"));
  }
  if (logdir.empty()) return absl::InvalidArgumentError("EventWriter: empty logdir");
  std::error_code error;
  std::filesystem::create_directories(logdir, error);
  if (error) {
    return absl::ErrnoToStatus(error.value(),
                               absl::StrCat("EventWriter: cannot create directory ", logdir, ": ", error.message()));
  }
  const absl::Time now = absl::Now();
  std::string path = absl::StrFormat("%s/events.out.tfevents.%010d.%s.%d", logdir, absl::ToUnixSeconds(now),
                                     Hostname(), static_cast<int64_t>(getpid()));
  if (!tag_suffix.empty()) absl::StrAppend(&path, ".", tag_suffix);
  int fd;
  do {
    fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("EventWriter: cannot create ", path));

  std::unique_ptr<EventWriter> writer(new EventWriter(path, fd));
  tensorboard::Event first;
  first.set_wall_time(WallSeconds(now));
  first.set_file_version(std::string(kFileVersion));
  absl::Status status = writer->WriteEvent(first);
  if (status.ok()) status = writer->Flush();
  if (!status.ok()) {
    writer.reset();
    unlink(path.c_str());
    return status;
  }
  return writer;
}

EventWriter::~EventWriter() { Close().IgnoreError(); }

absl::Status EventWriter::CheckWritable() const {
  if (!error_.ok()) return error_;
  if (closed_) return absl::FailedPreconditionError(absl::StrCat("EventWriter: ", path_, " is closed"));
  return absl::OkStatus();
}

absl::Status EventWriter::AddScalar(int64_t step, absl::string_view tag, float value) {
  const TensorBoardScalar scalar{tag, value};
  return AddScalars(step, absl::MakeConstSpan(&scalar, 1), absl::Now());
}

absl::Status EventWriter::AddScalars(int64_t step, absl::Span<const TensorBoardScalar> scalars) {
  return AddScalars(step, scalars, absl::Now());
}

absl::Status EventWriter::AddScalars(int64_t step, absl::Span<const TensorBoardScalar> scalars,
                                     absl::Time wall_time) {
  tensorboard::Event event;
  event.set_wall_time(WallSeconds(wall_time));
  event.set_step(step);
  tensorboard::Summary* summary = event.mutable_summary();
  for (const TensorBoardScalar& scalar : scalars) {
    tensorboard::Summary::Value* value = summary->add_value();
    value->set_tag(std::string(scalar.tag));
    value->set_simple_value(scalar.value);
  }
  return WriteEvent(event);
}

absl::Status EventWriter::WriteEvent(const tensorboard::Event& event) {
  if (absl::Status s = CheckWritable(); !s.ok()) return s;
  std::string data;
  if (!event.SerializeToString(&data)) {
    return absl::InternalError(absl::StrCat("EventWriter: cannot serialize an event for ", path_));
  }
  AppendTfRecord(data, &buffer_);
  if (buffer_.size() >= kFlushThreshold) return Flush();
  return absl::OkStatus();
}

absl::Status EventWriter::Flush() {
  if (absl::Status s = CheckWritable(); !s.ok()) return s;
  if (buffer_.empty()) return absl::OkStatus();
  error_ = WriteAll(fd_, buffer_, path_);
  buffer_.clear();
  return error_;
}

absl::Status EventWriter::Close() {
  if (closed_) return error_;
  absl::Status status = Flush();
  closed_ = true;
  if (close(fd_) != 0 && status.ok()) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("EventWriter: cannot close ", path_));
  }
  fd_ = -1;
  if (error_.ok()) error_ = status;
  return status;
}

}  // namespace kestrel
