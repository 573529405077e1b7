// Reading the workers' JSON-lines records (proto/records.proto, written by worker/records.h) in tests and
// benchmarks: each line parsed by protobuf's JSON parser into a Record.
#ifndef KESTREL_TESTS_RECORDS_H_
#define KESTREL_TESTS_RECORDS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/records.pb.h"

namespace kestrel {

// Every record of a JSON-lines file, in order. NotFound when the file cannot be opened; InvalidArgument
// (naming the file) for a line that is not a Record.
[[nodiscard]] absl::StatusOr<std::vector<Record>> ReadRecords(const std::string& path);

// The last record of `kind` ("train", "eval", "done") in a file; NotFound when there is none.
[[nodiscard]] absl::StatusOr<Record> LastRecord(const std::string& path, absl::string_view kind);

}  // namespace kestrel

#endif  // KESTREL_TESTS_RECORDS_H_
