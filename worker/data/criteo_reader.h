// Criteo TSV: label, 13 integer features, 26 categorical hex tokens, tab-separated; an empty column is a
// missing value. Read through RecordReader (record_reader.h): streaming, sharded, resumable.
#ifndef KESTREL_WORKER_DATA_CRITEO_READER_H_
#define KESTREL_WORKER_DATA_CRITEO_READER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/data/feature_map.h"
#include "worker/data/record_reader.h"

namespace kestrel {

struct CriteoExample {
  float label = 0;
  std::array<int64_t, kCriteoIntegerFields> integers{};
  std::array<bool, kCriteoIntegerFields> integer_missing{};
  std::array<uint64_t, kCriteoCategoricalFields> categories{};  // kMissingValue when missing
};

// Parses one line (without its newline). InvalidArgument describes the problem (the reader adds file:line).
[[nodiscard]] absl::Status ParseCriteoLine(absl::string_view line, CriteoExample* out);

// Streams Criteo TSV files (see record_reader.h for sharding, positions and the error policy).
using CriteoReader = RecordReader<CriteoExample>;
[[nodiscard]] inline absl::StatusOr<std::unique_ptr<CriteoReader>> OpenCriteoReader(std::vector<std::string> files,
                                                                       const ReaderOptions& options = {},
                                                                       const ReaderPosition& start = {}) {
  return CriteoReader::Open(std::move(files), &ParseCriteoLine, options, start);
}

}  // namespace kestrel

#endif  // KESTREL_WORKER_DATA_CRITEO_READER_H_
