// libsvm / svmlight text: "label index:value index:value ... [# comment]". Labels above 0 are positives
// (1), others negatives (0): "+1"/"-1" and "1"/"0" files both work. Indices are non-negative integers (they
// may repeat; the model sums them); values must be finite. Read through RecordReader (record_reader.h).
#ifndef KESTREL_WORKER_DATA_LIBSVM_READER_H_
#define KESTREL_WORKER_DATA_LIBSVM_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/data/record_reader.h"

namespace kestrel {

struct LibsvmExample {
  float label = 0;
  std::vector<uint64_t> indices;
  std::vector<float> values;
};

[[nodiscard]] absl::Status ParseLibsvmLine(absl::string_view line, LibsvmExample* out);

using LibsvmReader = RecordReader<LibsvmExample>;
[[nodiscard]] inline absl::StatusOr<std::unique_ptr<LibsvmReader>> OpenLibsvmReader(std::vector<std::string> files,
                                                                       const ReaderOptions& options = {},
                                                                       const ReaderPosition& start = {}) {
  return LibsvmReader::Open(std::move(files), &ParseLibsvmLine, options, start);
}

}  // namespace kestrel

#endif  // KESTREL_WORKER_DATA_LIBSVM_READER_H_
