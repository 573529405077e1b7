// JSON in Kestrel goes through protobuf's JSON printer and parser (google/protobuf/util/json_util.h) and
// nothing else: records, reports and configuration read from JSON are proto messages, printed and parsed
// with the proto field names (preserve_proto_field_names), so a key is spelled as in the .proto file.
//
// proto3 JSON rules to keep in mind when declaring such a message: a 64-bit integer prints as a JSON string
// (declare counts meant for JSON numbers as double: exact up to 2^53); a non-optional scalar equal to 0 / ""
// / false is left out (declare fields that must always appear `optional` and set them); a non-finite double
// prints as "NaN", "Infinity" or "-Infinity".
//
//   Record r;
//   r.set_kind("train");
//   std::string line = ToJson(r);                  // {"kind":"train"}
//   absl::Status s = FromJson(line, &r);           // InvalidArgument, on one line, when not JSON of a Record
#ifndef KESTREL_COMMON_JSON_H_
#define KESTREL_COMMON_JSON_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace kestrel {

struct ToJsonOptions {
  // Indented over several lines (for files people read) instead of one line. Default: one line.
  bool multiline = false;
};

// `message` as JSON: its present fields in field-number order, with the proto field names; no newline at
// the end.
std::string ToJson(const google::protobuf::Message& message, const ToJsonOptions& options = {});

struct FromJsonOptions {
  // Accept (and drop) object keys the message does not declare. Default: they are errors.
  bool ignore_unknown_fields = false;
};

// Parses `json` into `message` (cleared first). InvalidArgument when it is not JSON or does not fit the
// message (a wrong type, an unknown key), with protobuf's reason on one line: for a syntax error, up to 20
// characters from where it stopped (Expected , or } after key:value pair. at "\"index\": 1}"); for a type
// error, the field ((task.type): invalid value 3 for type TYPE_STRING).
//
// protobuf 3.21's parser is more lenient than RFC 8259: it accepts a trailing comma, single-quoted strings,
// unknown escapes ("\x" reads "x"), an integer field written 1e2 or "1", and a repeated key (the last wins).
[[nodiscard]] absl::Status FromJson(absl::string_view json, google::protobuf::Message* message,
                      const FromJsonOptions& options = {});

}  // namespace kestrel

#endif  // KESTREL_COMMON_JSON_H_
