// LineParser: one line of a job's data turned into one example of a Batch, as the job's Schema
// (worker/data/schema.h) says: its label and weight, one bag per field, its dense inputs.
//
// DELIMITED and CRITEO lines are split into columns (quoting per FeatureSchema.quote: a quoted column runs to
// its closing quote, which a doubled one escapes, and must be followed by the delimiter or the end of the line),
// then each feature reads its column: a categorical token becomes value v by its encoding (HASH: common/hash.h
// Hash64 of its bytes, FNV-1a finished with SplitMix64, stable across runs and machines; INTEGER: the decimal
// integer as 64 bits; HEX: up to 16 hex digits), v mod hash_buckets when set, and the key FieldFeatureKey(its
// vocabulary's namespace, v); a multi-valued column splits on the separator, empty and missing tokens dropped,
// and keeps max_length tokens (KEEP_LAST, KEEP_FIRST, or FAIL); numbers are parsed exactly as integers when they
// are ones. LIBSVM lines go through worker/data/libsvm_reader.h. Steady state allocates nothing: buffers are
// kept between lines.
//
// Thread-compatible: one LineParser per reader; the Schema is shared.
#ifndef KESTREL_WORKER_DATA_SCHEMA_PARSER_H_
#define KESTREL_WORKER_DATA_SCHEMA_PARSER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/data/batch.h"
#include "worker/data/libsvm_reader.h"
#include "worker/data/schema.h"

namespace kestrel {

// The columns of `line` split on `delimiter`, unquoted when `quote` (a character, or -1 for none) opens a
// column. InvalidArgument for a quoted column without its closing quote or with text after it.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> SplitDelimitedLine(absl::string_view line, char delimiter, int quote);

class LineParser {
 public:
  explicit LineParser(std::shared_ptr<const Schema> schema);

  // Appends the example of `line` (without its newline; a final '\r' is ignored) to `batch`, which holds
  // examples of schema->fields() bags and schema->dense_dim() dense inputs (Batch::Reset). InvalidArgument
  // names the problem and, where one column is at fault, the column (its name and 1-based index): a wrong
  // number of columns, an unparsable label, weight or number, a token that is not INTEGER or HEX when so
  // encoded, more than max_length values with overflow FAIL; then `batch` is left exactly as it was.
  [[nodiscard]] absl::Status Append(absl::string_view line, Batch* batch);

  // After an OK Append of a DELIMITED or CRITEO line: feature i's number before its transform (NUMERIC,
  // BUCKETIZED), NaN when missing or when feature i reads no number.
  double raw_number(int feature) const { return raw_[feature]; }

 private:
  [[nodiscard]] absl::Status AppendColumns(absl::string_view line, Batch* batch);
  [[nodiscard]] absl::Status AppendLibsvmLine(absl::string_view line, Batch* batch);
  [[nodiscard]] absl::Status AppendCategorical(const Schema::Feature& f, Batch* batch);
  // A single-valued feature's value v (hash_buckets applied; kMissingValue when missing), or an InvalidArgument.
  [[nodiscard]] absl::Status SingleValue(const Schema::Feature& f, uint64_t* v) const;
  // A multi-valued feature's tokens: tokens_[tokens_begin_ ..] are the ones kept (max_length, overflow).
  [[nodiscard]] absl::Status SplitValues(const Schema::Feature& f);
  // The token's value v (before hash_buckets), or an InvalidArgument.
  [[nodiscard]] absl::Status Encode(const Schema::Feature& f, absl::string_view token, uint64_t* v) const;
  // A column's number, parsed once per line however many features read it.
  struct ParsedNumber {
    uint64_t line = 0;     // the line (lines_) it was parsed for
    bool present = false;  // false: missing
    bool is_integer = false;
    int64_t integer = 0;   // when is_integer
    double value = 0;
  };
  // Feature f's column as a number (present false when it is missing), or an InvalidArgument when it is not one.
  [[nodiscard]] absl::Status Number(const Schema::Feature& f, const ParsedNumber** number);
  bool IsMissing(absl::string_view token) const;
  // "column 'name' (3)" (and ", feature 'f'" when the feature's name differs) + ": " + problem.
  [[nodiscard]] absl::Status ColumnError(int column, const Schema::Feature* feature, absl::string_view problem) const;

  const std::shared_ptr<const Schema> schema_;
  std::vector<absl::string_view> columns_;  // the line's, into the line or unquoted_
  std::string unquoted_;                    // quoted columns with doubled quotes, unescaped
  std::vector<absl::string_view> tokens_;   // a multi-valued column's
  size_t tokens_begin_ = 0;                 // the first of tokens_ kept
  std::vector<double> raw_;                 // per feature
  std::vector<ParsedNumber> numbers_;       // per column
  uint64_t lines_ = 0;                      // lines parsed (numbers_ of earlier lines are stale)
  LibsvmExample libsvm_;
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_DATA_SCHEMA_PARSER_H_
