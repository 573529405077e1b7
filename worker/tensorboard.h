// TensorBoard event files for workers: scalars (loss, AUC, samples/s, ...) per training step, written in the
// format TensorBoard's scalar dashboard reads, and read back by tests and tools.
//
// Format: a file named events.out.tfevents.<unix seconds, 10 digits>.<hostname>.<pid>.<suffix> holding a
// sequence of TFRecords, each one serialized kestrel.tensorboard.Event (proto/tensorboard.proto, a
// wire-compatible subset of TensorFlow's Event and Summary). The first event has file_version "brain.Event:2";
// every later one carries a Summary of simple_value scalars. One TFRecord is
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes | length bytes of data |
//   uint32 masked CRC-32C of the data
// with both CRCs little-endian and masked by Crc32cMask (common/crc32c.h).
//
// Writes are buffered in memory and reach the file on Flush() (and whenever more than 64 KiB are pending, and
// in Close() or the destructor); Flush() hands the bytes to the kernel, it does not fsync. TensorBoard reads
// a file that is still growing, so a flushed step shows up while training runs.
//
// Thread-compatible: one EventWriter must not be used by two threads at once without external locking;
// distinct writers (on distinct files) are independent. The free functions are thread-safe.
#ifndef KESTREL_WORKER_TENSORBOARD_H_
#define KESTREL_WORKER_TENSORBOARD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/tensorboard.pb.h"

namespace kestrel {

// One scalar of a step: TensorBoard draws one chart per tag.
struct TensorBoardScalar {
  absl::string_view tag;
  float value = 0;
};

class EventWriter {
 public:
  // Creates `logdir` and its missing parents (mkdir -p), then the file
  // <logdir>/events.out.tfevents.<unix seconds>.<hostname>.<pid>.<tag_suffix> (without the last dot and suffix
  // when tag_suffix is empty), and writes and flushes the file_version event. The file is created exclusively:
  // AlreadyExists when it exists, which happens only to two writers of one process opened in the same second
  // with the same suffix, so give each writer of a process its own suffix (e.g. "worker3"). InvalidArgument
  // when tag_suffix contains '/' or a NUL. Every I/O error names the path (code from absl::ErrnoToStatus).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<EventWriter>> Open(const std::string& logdir, absl::string_view tag_suffix);

  // Flushes and closes; an error there is lost (call Close() first to see it).
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // One event at `step` stamped with the current time, holding one scalar.
  [[nodiscard]] absl::Status AddScalar(int64_t step, absl::string_view tag, float value);

  // One event at `step` holding all `scalars` (e.g. loss, AUC and samples/s of one step), stamped with the
  // current time, or with `wall_time` in the second form (for replaying logs, and tests).
  [[nodiscard]] absl::Status AddScalars(int64_t step, absl::Span<const TensorBoardScalar> scalars);
  [[nodiscard]] absl::Status AddScalars(int64_t step, absl::Span<const TensorBoardScalar> scalars, absl::Time wall_time);

  // Appends any event as it is.
  [[nodiscard]] absl::Status WriteEvent(const tensorboard::Event& event);

  // Writes the buffered events to the file.
  [[nodiscard]] absl::Status Flush();

  // Flushes and closes the file. Later writes return FailedPrecondition (or the earlier write error); a second
  // Close() returns the status of the first.
  [[nodiscard]] absl::Status Close();

  // The file being written.
  const std::string& path() const { return path_; }

 private:
  EventWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  // Returns the sticky error of an earlier failed write or of Close(), or OK.
  [[nodiscard]] absl::Status CheckWritable() const;

  const std::string path_;
  int fd_;                // -1 once closed
  std::string buffer_;    // framed records not yet written
  absl::Status error_;    // first write error; every later call returns it (the file may end mid-record)
  bool closed_ = false;
};

// Appends `data` framed as one TFRecord (see the header comment) to `out`.
void AppendTfRecord(absl::string_view data, std::string* out);

// The data of every TFRecord of the file at `path`, after checking both CRCs of each. DataLoss naming the path,
// the record index (from 0) and its byte offset when a CRC does not match or the file ends inside a record;
// I/O errors name the path.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> ReadTfRecordFile(const std::string& path);

// The events of the event file at `path`: ReadTfRecordFile, then each record parsed as an Event (DataLoss
// naming the path and record index when one does not parse).
[[nodiscard]] absl::StatusOr<std::vector<tensorboard::Event>> ReadEventFile(const std::string& path);

}  // namespace kestrel

#endif  // KESTREL_WORKER_TENSORBOARD_H_
