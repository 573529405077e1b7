// TimeSplitFrom: where a validation split by time starts (DataConfig.validation_column and validation_from, set
// by `kestrel init --time_column`): the first value of the last 1/`every` of the training lines ordered by a
// time column. A job validated on its latest lines measures what a model trained on the past does on the future,
// which a random holdout overstates when the data drifts.
//
// One pass over every training file keeping the column's values (a few bytes per line): for `kestrel init`, run
// once before a job.
#ifndef KESTREL_WORKER_DATA_TIME_SPLIT_H_
#define KESTREL_WORKER_DATA_TIME_SPLIT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kestrel {

struct TimeSplit {
  std::string from;        // DataConfig.validation_from: lines at or after it validate (worker/batch_reader.h AtOrAfter)
  int64_t lines = 0;       // lines with a value
  int64_t held = 0;        // of which at or after `from`
  std::string first, last;  // the column's smallest and largest value
};

// `files` (each with a header line) split on `delimiter` (quote '"'); `column`: the time column's index; every
// >= 2. The values must all read as numbers (compared as such) or none (compared byte by byte: ISO dates and
// times); empty values and lines without the column are skipped. FailedPrecondition when the column has fewer
// than two distinct values or mixes numbers and text; NotFound for a file that cannot be read.
[[nodiscard]] absl::StatusOr<TimeSplit> TimeSplitFrom(const std::vector<std::string>& files, int column,
                                                      char delimiter, uint32_t every);

}  // namespace kestrel

#endif  // KESTREL_WORKER_DATA_TIME_SPLIT_H_
