// The files a worker writes besides its logs: JSON-lines records (proto/records.proto), one Record per line,
// written and read with protobuf's JSON printer and parser (common/json.h; field names as in the proto: "kind",
// "worker", "step", ...), and prediction files, one probability per line.
//
//   RecordWriter out("metrics.jsonl");
//   Record r;
//   r.set_kind("eval");
//   r.set_auc(0.79);
//   out.Write(r);  // {"kind":"eval","auc":0.79}
//
//   absl::StatusOr<Record> back = ParseRecord(line);
#ifndef KESTREL_WORKER_RECORDS_H_
#define KESTREL_WORKER_RECORDS_H_

#include <cstdint>
#include <fstream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/records.pb.h"

namespace kestrel {

// `record` as one line of JSON, without the newline: only its set fields, in field-number order, with the
// proto field names.
std::string RecordJson(const Record& record);

// One line of JSON back into a Record. InvalidArgument (naming the line) when it is not JSON or has a field
// of the wrong type or one that proto/records.proto does not define.
[[nodiscard]] absl::StatusOr<Record> ParseRecord(absl::string_view line);

// A fingerprint (common/evaluation.h PredictionFingerprint) as a record writes it: 16 lowercase hex digits.
std::string FingerprintHex(uint64_t fingerprint);

// Starts a records file for a run: creates it, emptied unless `append` (then records are added after what it
// holds). `path` empty: nothing. InvalidArgument naming the path when it cannot be created or opened.
[[nodiscard]] absl::Status StartRecordFile(const std::string& path, bool append);

// Writes `probs` to `path` (created or replaced), one per line as "%.9g" (a float's shortest form that reads
// back bit-exact), in order: what kestrel_predict --output and kestrel_worker --predictions_out write.
// Unavailable naming the path when it cannot be written.
[[nodiscard]] absl::Status WritePredictions(const std::string& path, absl::Span<const float> probs);

// Appends one record per line to a file, flushing each. Not thread-safe.
class RecordWriter {
 public:
  // `path` empty: Write does nothing. The file is opened for appending (created when absent); a file that
  // cannot be opened is not an error (the records are an aid, not the result).
  explicit RecordWriter(const std::string& path);

  void Write(const Record& record);

 private:
  std::ofstream out_;
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_RECORDS_H_
