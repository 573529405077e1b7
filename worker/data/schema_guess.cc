#include "worker/data/schema_guess.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "google/protobuf/text_format.h"
#include "worker/data/record_reader.h"
#include "worker/data/schema_parser.h"
#include "worker/data/time_split.h"

namespace kestrel {
namespace {

// Tokens that mean a missing value (besides the empty column) when they occur among numbers.
constexpr const char* kMissingTokens[] = {"NA", "N/A", "NaN", "nan", "null", "NULL", "None", "?"};
// Separators of a multi-valued column, in order of preference on a tie.
constexpr char kSeparators[] = {'|', ';', ' '};
constexpr int kNumSeparators = sizeof(kSeparators);
// A separator makes a column multi-valued when it occurs in at least this share of the column's values.
constexpr double kMultiValuedShare = 0.1;
// A column whose values repeat at least this many times each on average is a set of labels: its spaces are part
// of its values ("no checking", "real estate"), not a separator, and, when they are integers, they are
// CATEGORICAL. An integer column with more than kFewIntegers distinct values that repeat less is a quantity (an
// amount, a count): NUMERIC.
constexpr int64_t kLabelRepeats = 10;
constexpr int64_t kFewIntegers = 100;
// A column of non-negative numbers with a sample skewness above this is heavy-tailed: LOG1P.
constexpr double kHeavyTailSkewness = 1.0;
// BUCKETIZED columns (models without an MLP): at most this many quantile buckets.
constexpr int kQuantileBuckets = 16;
// A multi-valued column and a single-valued categorical one with at least kSharedVocabularyValues distinct
// values share a vocabulary when at least this share of each one's values (counted with repeats) occur in the
// other.
constexpr double kSharedVocabularyShare = 0.5;
constexpr int kSharedVocabularyValues = 20;
// Epochs, a maximum (early stopping on the held-out validation split ends training sooner): enough passes over
// the training rows for about this many examples, at most kMostEpochs.
constexpr int64_t kExamplesToTrain = 300000;
constexpr int kMostEpochs = 30;
// Below this many training rows the data is small (docs/tuning.md): smaller batches, slower wide and dense
// optimizers, and a larger validation split. One line in kValidationEvery (small: kSmallValidationEvery) of
// the training files is held out as the validation split (DataConfig.validation_every).
constexpr int64_t kSmallDataRows = 100000;
constexpr int kValidationEvery = 10;
constexpr int kSmallValidationEvery = 20;
constexpr int kBatchSize = 256;
constexpr int kSmallBatchSize = 128;
constexpr float kSmallWideLearningRate = 0.05f;   // FTRL's alpha (the default 0.1)
constexpr float kSmallDenseLearningRate = 0.003f;  // Adam's (the default 0.001)

bool IsMissingToken(absl::string_view value) {
  for (const char* token : kMissingTokens) {
    if (value == token) return true;
  }
  return false;
}

// What the sample showed of one column.
struct ColumnSample {
  int64_t missing = 0;                                // empty values and missing tokens
  absl::flat_hash_set<std::string> missing_tokens;    // the missing tokens seen
  absl::flat_hash_map<std::string, int64_t> distinct;  // the other values, with their counts
  int64_t values = 0;                                 // the other values, counted
  bool all_numbers = true;
  bool all_integers = true;
  std::vector<double> numbers;                        // while all_numbers
  int64_t with_separator[kNumSeparators] = {};        // values holding each separator
  int most_tokens[kNumSeparators] = {};               // the most tokens a value splits into, per separator

  void Add(absl::string_view value, char delimiter) {
    if (value.empty() || IsMissingToken(value)) {
      ++missing;
      if (!value.empty()) missing_tokens.emplace(value);
      return;
    }
    ++values;
    ++distinct[std::string(value)];
    if (all_numbers) {
      double x;
      if (absl::SimpleAtod(value, &x) && std::isfinite(x)) {
        numbers.push_back(x);
        int64_t i;
        if (all_integers && !absl::SimpleAtoi(value, &i)) all_integers = false;
      } else {
        all_numbers = false;
        all_integers = false;
        numbers.clear();
        numbers.shrink_to_fit();
      }
    }
    for (int s = 0; s < kNumSeparators; ++s) {
      const char sep = kSeparators[s];
      if (sep == delimiter) continue;
      // Spaces at either end of a value (", " after a comma) do not separate values.
      const absl::string_view inner = sep == ' ' ? absl::StripAsciiWhitespace(value) : value;
      const int tokens = 1 + static_cast<int>(std::count(inner.begin(), inner.end(), sep));
      if (tokens > 1) ++with_separator[s];
      most_tokens[s] = std::max(most_tokens[s], tokens);
    }
  }
};

bool LooksLikeId(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(name));
  if (lower == "id" || lower == "uuid" || lower == "guid") return true;
  for (absl::string_view suffix : {"_id", "-id", ".id", " id", "_uuid", "_guid"}) {
    if (absl::EndsWith(lower, suffix)) return true;
  }
  // camelCase: userId, userID.
  return name.size() > 2 && (absl::EndsWith(name, "Id") || absl::EndsWith(name, "ID")) &&
         absl::ascii_islower(static_cast<unsigned char>(name[name.size() - 3]));
}

// A feature name (letters, digits, '_', '-', '.', 1 to 64 characters) for a column name, unique among `taken`.
std::string FeatureName(absl::string_view column, absl::flat_hash_set<std::string>* taken) {
  std::string name(absl::StripAsciiWhitespace(column));
  for (char& c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') c = '_';
  }
  if (name.empty()) name = "column";
  name.resize(std::min<size_t>(name.size(), 60));
  std::string unique = name;
  for (int n = 2; taken->contains(unique); ++n) unique = absl::StrCat(name, "_", n);
  taken->insert(unique);
  return unique;
}

std::string Percent(int64_t part, int64_t whole) {
  return absl::StrFormat("%.0f%%", whole > 0 ? 100.0 * part / whole : 0.0);
}

std::string Quoted(absl::string_view s) { return absl::StrCat("\"", absl::CEscape(s), "\""); }

std::string DelimiterName(char delimiter) {
  return delimiter == '\t' ? "tab" : absl::StrCat("'", std::string(1, delimiter), "'");
}

bool HasMlp(ModelConfig::Type model) {
  return model == ModelConfig::DEEPFM || model == ModelConfig::WIDE_AND_DEEP || model == ModelConfig::DLRM;
}

// The first non-blank line of `file` (ShardedLines' view: without a trailing '\r').
[[nodiscard]] absl::StatusOr<std::string> HeaderLine(const std::string& file) {
  KESTREL_ASSIGN_OR_RETURN(ShardedLines lines, ShardedLines::Open({file}, ReaderOptions(), ReaderPosition()));
  absl::string_view line;
  KESTREL_ASSIGN_OR_RETURN(bool found, lines.Next(&line));
  if (!found) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s is empty: kestrel init needs a header line naming the columns, then rows", file));
  }
  if (absl::StartsWith(line, "\xEF\xBB\xBF")) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s starts with a UTF-8 byte-order mark, which would become part of the first column's name: remove it "
        "(sed -i '1s/^\\xEF\\xBB\\xBF//' %s)", file, file));
  }
  return std::string(line);
}

// The delimiter of `options`, or the guess from the first training file's name and header line.
char ChooseDelimiter(const SchemaGuessOptions& options, absl::string_view header) {
  if (options.delimiter != 0) return options.delimiter;
  const std::string lower = absl::AsciiStrToLower(options.train_files[0]);
  if (absl::EndsWith(lower, ".csv")) return ',';
  if (absl::EndsWith(lower, ".tsv") || absl::EndsWith(lower, ".tab")) return '\t';
  int64_t commas = 0, tabs = 0;
  bool quoted = false;
  for (char c : header) {
    if (c == '"') quoted = !quoted;
    if (!quoted) {
      commas += c == ',';
      tabs += c == '\t';
    }
  }
  return commas > tabs ? ',' : '\t';
}

// The header's columns, checked: named, unique, not all numbers (a file without a header).
[[nodiscard]] absl::StatusOr<std::vector<std::string>> HeaderColumns(const std::string& file, absl::string_view line,
                                                       char delimiter) {
  auto columns = SplitDelimitedLine(line, delimiter, '"');
  if (!columns.ok()) return absl::InvalidArgumentError(absl::StrCat(file, ":1: ", columns.status().message()));
  if (columns->size() < 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the header of %s names one column (%s) with delimiter %s: a job needs a label and at least one feature "
        "(choose the delimiter with --delimiter)", file, Quoted(line.substr(0, 80)), DelimiterName(delimiter)));
  }
  bool all_numbers = true;
  absl::flat_hash_set<absl::string_view> seen;
  for (size_t i = 0; i < columns->size(); ++i) {
    const std::string& name = (*columns)[i];
    double x;
    if (!absl::SimpleAtod(name, &x)) all_numbers = false;
    if (name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("the header of %s leaves column %d unnamed: name every column", file, i + 1));
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("the header of %s names two columns %s: column names must be unique", file, Quoted(name)));
    }
  }
  if (all_numbers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the first line of %s is all numbers, a row rather than a header: kestrel init needs a header line "
        "naming the columns (add one)", file));
  }
  return columns;
}

int ColumnIndex(const std::vector<std::string>& columns, absl::string_view name) {
  auto it = std::find(columns.begin(), columns.end(), name);
  return it == columns.end() ? -1 : static_cast<int>(it - columns.begin());
}

// Up to kQuantileBuckets - 1 ascending boundaries at the quantiles of `numbers`, above its minimum.
std::vector<float> QuantileBoundaries(std::vector<double> numbers) {
  std::sort(numbers.begin(), numbers.end());
  std::vector<float> boundaries;
  for (int k = 1; k < kQuantileBuckets; ++k) {
    const float b = static_cast<float>(numbers[numbers.size() * k / kQuantileBuckets]);
    if (b > numbers.front() && (boundaries.empty() || b > boundaries.back())) boundaries.push_back(b);
  }
  return boundaries;
}

double Skewness(const std::vector<double>& x) {
  double mean = 0;
  for (double v : x) mean += v;
  mean /= x.size();
  double m2 = 0, m3 = 0;
  for (double v : x) {
    const double d = v - mean;
    m2 += d * d;
    m3 += d * d * d;
  }
  m2 /= x.size();
  m3 /= x.size();
  return m2 > 0 ? m3 / std::pow(m2, 1.5) : 0;
}

// The feature a column becomes (false: left out), and the note saying why.
bool GuessFeature(const ColumnSample& c, absl::string_view column, const SchemaGuessOptions& options,
                  char delimiter, FeatureConfig* f, std::string* note) {
  const std::string missing =
      c.missing > 0 ? absl::StrCat(", ", Percent(c.missing, c.missing + c.values), " missing") : "";
  if (c.distinct.size() <= 1) {
    *note = c.distinct.empty() ? "left out: no values in the sample"
                               : absl::StrCat("left out: one value in the sample, ", Quoted(c.distinct.begin()->first));
    return false;
  }
  const std::string distinct = absl::StrFormat("%d distinct", c.distinct.size());
  const bool labels = c.values >= kLabelRepeats * static_cast<int64_t>(c.distinct.size());
  if (!c.all_numbers) {
    int best = -1;
    for (int s = 0; s < kNumSeparators; ++s) {
      if (kSeparators[s] == delimiter || c.with_separator[s] < kMultiValuedShare * c.values) continue;
      if (kSeparators[s] == ' ' && labels) continue;
      if (best < 0 || c.with_separator[s] > c.with_separator[best]) best = s;
    }
    if (best >= 0) {
      f->set_kind(FeatureConfig::CATEGORICAL);
      f->set_separator(std::string(1, kSeparators[best]));
      // Words of a text by sum / sqrt(n), as a bag of words is length-normalized; lists (histories, tags) by the mean.
      f->set_pooling(kSeparators[best] == ' ' ? POOLING_SQRT_N : POOLING_MEAN);
      const std::string empty =
          c.missing > 0 ? absl::StrCat(", ", Percent(c.missing, c.missing + c.values), " empty") : "";
      *note = absl::StrFormat("CATEGORICAL multi-valued by %s, %s-pooled (%s of the values hold several, up to %d "
                              "per row%s)", Quoted(f->separator()), f->pooling() == POOLING_MEAN ? "mean" : "sqrt-n",
                              Percent(c.with_separator[best], c.values),
                              c.most_tokens[best], empty);
      return true;
    }
  }
  f->set_kind(FeatureConfig::CATEGORICAL);
  f->set_encoding(FeatureConfig::HASH);
  if (LooksLikeId(column)) {
    *note = absl::StrFormat("CATEGORICAL: named like an id (%s values in %d%s)", distinct, c.values, missing);
    return true;
  }
  if (!c.all_numbers) {
    *note = absl::StrFormat("CATEGORICAL (%s values, not all numbers%s)", distinct, missing);
    return true;
  }
  const int64_t levels = static_cast<int64_t>(c.distinct.size());
  if (c.all_integers && levels <= options.max_integer_vocabulary && (labels || levels <= kFewIntegers)) {
    *note = absl::StrFormat("CATEGORICAL (%s integers, %s%s)", distinct,
                            labels ? absl::StrFormat("each in %d rows on average", c.values / levels)
                                   : absl::StrFormat("at most %d", kFewIntegers),
                            missing);
    return true;
  }
  f->clear_encoding();
  const double lowest = *std::min_element(c.numbers.begin(), c.numbers.end());
  const double skewness = Skewness(c.numbers);
  const std::string numbers = absl::StrFormat("%s numbers%s, skewness %.1f%s", distinct, lowest >= 0 ? " >= 0" : "",
                                              skewness, missing);
  if (!HasMlp(options.model)) {
    f->set_kind(FeatureConfig::BUCKETIZED);
    for (float b : QuantileBoundaries(c.numbers)) f->add_boundaries(b);
    *note = absl::StrFormat("BUCKETIZED by %d quantiles of the sample (%s; %s has no dense inputs)",
                            f->boundaries_size() + 1, numbers, ModelConfig::Type_Name(options.model));
    return true;
  }
  f->set_kind(FeatureConfig::NUMERIC);
  if (lowest >= 0 && skewness > kHeavyTailSkewness) {
    f->set_transform(FeatureConfig::LOG1P);
    *note = absl::StrFormat("NUMERIC LOG1P (%s)", numbers);
  } else {
    f->set_transform(FeatureConfig::STANDARDIZE);
    *note = absl::StrFormat("NUMERIC STANDARDIZE (%s; mean and stddev computed before training)", numbers);
  }
  return true;
}

using ValueCounts = absl::flat_hash_map<std::string, int64_t>;

// The share of `a`'s values, counted with repeats, that occur in `b`.
double SharedShare(const ValueCounts& a, const ValueCounts& b) {
  int64_t total = 0, shared = 0;
  for (const auto& [value, n] : a) {
    total += n;
    if (b.contains(value)) shared += n;
  }
  return total > 0 ? static_cast<double>(shared) / total : 0;
}

// Gives each multi-valued feature and the single-valued categorical feature whose values its tokens mostly are
// (a history of item ids and the target item id; kSharedVocabularyShare) one vocabulary, the latter's name: their
// equal tokens become one key with one embedding row. `feature_columns[i]` is feature i's column.
void ShareVocabularies(const std::vector<ColumnSample>& samples, const std::vector<int>& feature_columns,
                       FeatureSchema* schema, std::vector<std::string>* notes,
                       absl::flat_hash_set<std::string>* names) {
  std::vector<std::pair<int, int>> matches;  // (multi-valued feature, the single-valued one it shares with)
  const int features = schema->features_size();
  for (int m = 0; m < features; ++m) {
    FeatureConfig* multi = schema->mutable_features(m);
    if (multi->separator().empty()) continue;
    ValueCounts tokens;
    for (const auto& [value, n] : samples[feature_columns[m]].distinct) {
      for (absl::string_view token : absl::StrSplit(value, multi->separator(), absl::SkipEmpty())) {
        tokens[std::string(token)] += n;
      }
    }
    int best = -1;
    double best_share = kSharedVocabularyShare;
    for (int s = 0; s < features; ++s) {
      const FeatureConfig& single = schema->features(s);
      const ValueCounts& values = samples[feature_columns[s]].distinct;
      if (single.kind() != FeatureConfig::CATEGORICAL || !single.separator().empty() ||
          static_cast<int>(values.size()) < kSharedVocabularyValues) {
        continue;
      }
      const double share = std::min(SharedShare(tokens, values), SharedShare(values, tokens));
      if (share >= best_share) {
        best = s;
        best_share = share;
      }
    }
    if (best < 0) continue;
    const std::string& vocabulary = schema->features(best).name();
    multi->set_vocabulary(vocabulary);
    schema->mutable_features(best)->set_vocabulary(vocabulary);
    absl::StrAppend(&(*notes)[feature_columns[m]],
                    absl::StrFormat("; shares vocabulary %s (%.0f%% of the values in common)", Quoted(vocabulary),
                                    100 * best_share));
    matches.emplace_back(m, best);
  }
  // Then a match feature per pair: how often the single-valued feature's value occurs among the multi-valued one's.
  for (const auto& [m, single] : matches) {
    FeatureConfig match;
    const FeatureConfig& multi = schema->features(m);
    match.set_name(FeatureName(absl::StrCat(multi.name(), "_has_", schema->features(single).name()), names));
    match.set_column(multi.column().empty() ? multi.name() : multi.column());
    match.set_separator(multi.separator());
    match.set_match(schema->features(single).name());
    absl::StrAppend(&(*notes)[feature_columns[m]],
                    absl::StrFormat("; feature %s counts its values equal to %s (0 to %d)", Quoted(match.name()),
                                    Quoted(match.match()), kMatchCountCap));
    *schema->add_features() = std::move(match);
  }
}

// The label's column of the header `columns` of `file`; the error lists the columns, or says the first line is a
// row rather than a header.
[[nodiscard]] absl::StatusOr<int> LabelColumn(const std::string& file, const std::vector<std::string>& columns,
                                const SchemaGuessOptions& options) {
  const int label = ColumnIndex(columns, options.label);
  if (label >= 0) return label;
  std::vector<std::string> quoted, numbers;
  for (const std::string& c : columns) {
    quoted.push_back(Quoted(c));
    double x;
    if (absl::SimpleAtod(c, &x)) numbers.push_back(Quoted(c));
  }
  if (!numbers.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the first line of %s has no label column %s and holds numbers (%s), a row rather than a header: "
        "kestrel init needs a header line naming the columns (add one), and --label naming the label's",
        file, Quoted(options.label), absl::StrJoin(numbers, ", ")));
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "the header of %s has no label column %s; its columns: %s. Name the label with --label", file,
      Quoted(options.label), absl::StrJoin(quoted, ", ")));
}

// The weight's column of the header `columns` of `file` (-1 without a weight), other than the label's.
[[nodiscard]] absl::StatusOr<int> WeightColumn(const std::string& file, const std::vector<std::string>& columns,
                                 const SchemaGuessOptions& options, int label) {
  const int weight = options.weight.empty() ? -1 : ColumnIndex(columns, options.weight);
  if (!options.weight.empty() && weight < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the header of %s has no weight column %s", file, Quoted(options.weight)));
  }
  if (weight == label) return absl::InvalidArgumentError("the label and the weight are one column");
  return weight;
}

// Where the sample's columns are: the header's, the label's and the weight's (-1: none).
struct SampleColumns {
  const std::vector<std::string>& names;
  char delimiter;
  int label;
  int weight;
  int time = -1;  // SchemaGuessOptions::time_column's
};

// Checks one sampled row (`where`: its "file:line") split into `values`: the header's column count, a number for
// the label and a finite one >= 0 for the weight. Sets *positive to whether the label is above 0.
[[nodiscard]] absl::Status CheckSampleRow(const std::string& where, const std::vector<std::string>& values,
                            const SampleColumns& columns, const SchemaGuessOptions& options, bool* positive) {
  if (values.size() != columns.names.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d columns, but the header names %d (with delimiter %s; a quoted value may not span lines)", where,
        values.size(), columns.names.size(), DelimiterName(columns.delimiter)));
  }
  double y;
  if (!absl::SimpleAtod(values[columns.label], &y) || !std::isfinite(y)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: the label %s is %s, not a number (1/0, or any number: above 0 is a positive)", where,
        Quoted(options.label), Quoted(values[columns.label])));
  }
  *positive = y > 0;
  if (columns.weight >= 0) {
    double w;
    if (!absl::SimpleAtod(values[columns.weight], &w) || !std::isfinite(w) || w < 0) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: the weight %s is %s, not a finite number >= 0", where,
                                                        Quoted(options.weight), Quoted(values[columns.weight])));
    }
  }
  return absl::OkStatus();
}

// Samples the first options.sample_rows rows of `file` into `samples` (one per column), counting them, their
// positives and whether they are the whole file into `guess`, and their bytes (with newlines) into
// *sampled_bytes.
[[nodiscard]] absl::Status SampleRows(const std::string& file, const SampleColumns& columns, const SchemaGuessOptions& options,
                        std::vector<ColumnSample>* samples, SchemaGuess* guess, int64_t* sampled_bytes) {
  KESTREL_ASSIGN_OR_RETURN(ShardedLines lines, ShardedLines::Open({file}, ReaderOptions(), ReaderPosition()));
  absl::string_view line;
  KESTREL_ASSIGN_OR_RETURN(bool more, lines.Next(&line));  // the header
  while (guess->sampled_rows < options.sample_rows) {
    KESTREL_ASSIGN_OR_RETURN(more, lines.Next(&line));
    if (!more) break;
    *sampled_bytes += static_cast<int64_t>(line.size()) + 1;
    auto values = SplitDelimitedLine(line, columns.delimiter, '"');
    if (!values.ok()) return absl::InvalidArgumentError(absl::StrCat(lines.Where(), ": ", values.status().message()));
    bool positive = false;
    KESTREL_RETURN_IF_ERROR(CheckSampleRow(lines.Where(), *values, columns, options, &positive));
    guess->positive_rows += positive;
    for (size_t i = 0; i < columns.names.size(); ++i) (*samples)[i].Add((*values)[i], columns.delimiter);
    ++guess->sampled_rows;
  }
  if (guess->sampled_rows == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s has a header but no rows", file));
  }
  guess->whole_file = !more;
  return absl::OkStatus();
}

// The training files' rows: the sample's when it holds every row of the only training file, else the sampled
// rows' mean length (`sampled_bytes` over guess.sampled_rows) into the files' sizes less their header lines.
[[nodiscard]] absl::StatusOr<int64_t> TrainRows(const SchemaGuessOptions& options, const SchemaGuess& guess,
                                  const std::string& header_line, int64_t sampled_bytes) {
  if (guess.whole_file && options.train_files.size() <= 1) return guess.sampled_rows;
  double bytes = -static_cast<double>(options.train_files.size() * (header_line.size() + 1));
  for (const std::string& f : options.train_files) {
    std::error_code error;
    const uintmax_t size = std::filesystem::file_size(f, error);
    if (error) return absl::NotFoundError(absl::StrFormat("cannot read the size of %s: %s", f, error.message()));
    bytes += static_cast<double>(size);
  }
  return std::max<int64_t>(guess.sampled_rows,
                           std::llround(bytes * guess.sampled_rows / static_cast<double>(sampled_bytes)));
}

// InvalidArgument unless every training file but the first and every test file starts with the header
// `columns` of `file`.
[[nodiscard]] absl::Status CheckOtherHeaders(const SchemaGuessOptions& options, const std::string& file, char delimiter,
                               const std::vector<std::string>& columns) {
  std::vector<std::string> others(options.train_files.begin() + 1, options.train_files.end());
  others.insert(others.end(), options.test_files.begin(), options.test_files.end());
  for (const std::string& other : others) {
    KESTREL_ASSIGN_OR_RETURN(std::string other_line, HeaderLine(other));
    auto other_columns = SplitDelimitedLine(other_line, delimiter, '"');
    if (!other_columns.ok() || *other_columns != columns) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the header of %s differs from %s's (every file must start with the same header line)", other, file));
    }
  }
  return absl::OkStatus();
}

// The job around the features: the model, the files, how lines split and the training schedule for
// `train_rows` rows.
void SetJobFrame(const SchemaGuessOptions& options, char delimiter, bool weighted, int64_t train_rows,
                 JobConfig* job) {
  ModelConfig& model = *job->mutable_model();
  model.set_type(options.model);
  const bool small = train_rows < kSmallDataRows;
  if (options.model != ModelConfig::LOGISTIC_REGRESSION) model.set_embedding_dim(16);
  if (small) {
    model.mutable_wide_optimizer()->set_type(OptimizerConfig::FTRL);
    model.mutable_wide_optimizer()->set_learning_rate(kSmallWideLearningRate);
    model.mutable_dense_optimizer()->set_type(OptimizerConfig::ADAM);
    model.mutable_dense_optimizer()->set_learning_rate(kSmallDenseLearningRate);
  }
  if (options.wide_learning_rate > 0) {
    model.mutable_wide_optimizer()->set_type(OptimizerConfig::FTRL);
    model.mutable_wide_optimizer()->set_learning_rate(options.wide_learning_rate);
  }
  if (options.embedding_learning_rate > 0 && options.model != ModelConfig::LOGISTIC_REGRESSION) {
    model.mutable_embedding_optimizer()->set_type(OptimizerConfig::ADAGRAD);
    model.mutable_embedding_optimizer()->set_learning_rate(options.embedding_learning_rate);
  }
  if (HasMlp(options.model)) {
    model.add_hidden(64);
    model.add_hidden(32);
  }
  DataConfig& data = *job->mutable_data();
  data.set_format(DataConfig::DELIMITED);
  for (const std::string& f : options.train_files) data.add_train_files(f);
  for (const std::string& f : options.test_files) data.add_test_files(f);
  data.set_validation_every(small ? kSmallValidationEvery : kValidationEvery);
  FeatureSchema& schema = *data.mutable_schema();
  schema.set_delimiter(std::string(1, delimiter));
  schema.set_header(true);
  schema.set_label(options.label);
  if (weighted) schema.set_weight(options.weight);
  TrainConfig& train = *job->mutable_train();
  train.set_batch_size(small ? kSmallBatchSize : kBatchSize);
  train.set_epochs(static_cast<int>(std::clamp<int64_t>(
      std::llround(static_cast<double>(kExamplesToTrain) / train_rows), 1, kMostEpochs)));
  train.set_shuffle_buffer(100000);
}

// Every column but the label and the weight that GuessFeature keeps becomes a feature of the guess's schema;
// every column gets its note. Then the vocabularies the features share and the missing tokens of the numeric
// ones. InvalidArgument when no column is kept.
[[nodiscard]] absl::Status AddFeatures(const std::string& file, const SampleColumns& columns,
                         const std::vector<ColumnSample>& samples, const SchemaGuessOptions& options,
                         SchemaGuess* guess) {
  FeatureSchema& schema = *guess->job.mutable_data()->mutable_schema();
  absl::flat_hash_set<std::string> names, missing_tokens;
  std::vector<int> feature_columns;
  for (size_t i = 0; i < columns.names.size(); ++i) {
    const std::string& column = columns.names[i];
    std::string note;
    if (static_cast<int>(i) == columns.label) {
      note = absl::StrFormat("the label (%d of %d rows positive)", guess->positive_rows, guess->sampled_rows);
    } else if (static_cast<int>(i) == columns.weight) {
      note = "the example weight";
    } else if (static_cast<int>(i) == columns.time) {
      const DataConfig& data = guess->job.data();
      note = absl::StrCat("the time: lines from ", data.validation_from(), " on are the validation split");
    } else {
      FeatureConfig f;
      if (GuessFeature(samples[i], column, options, columns.delimiter, &f, &note)) {
        f.set_name(FeatureName(column, &names));
        if (f.name() != column) {
          f.set_column(column);
          absl::StrAppend(&note, "; feature ", Quoted(f.name()));
        }
        *schema.add_features() = std::move(f);
        feature_columns.push_back(static_cast<int>(i));
        const ColumnSample& c = samples[i];
        if (c.all_numbers) missing_tokens.insert(c.missing_tokens.begin(), c.missing_tokens.end());
      }
    }
    guess->notes.push_back(absl::StrCat(column, ": ", note));
  }
  if (schema.features_size() == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "no column of %s but the label carries information in its first %d rows", file, guess->sampled_rows));
  }
  ShareVocabularies(samples, feature_columns, &schema, &guess->notes, &names);
  for (const char* token : kMissingTokens) {
    if (missing_tokens.contains(token)) schema.add_missing_tokens(token);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SchemaGuess> GuessJobConfig(const SchemaGuessOptions& options) {
  if (options.train_files.empty()) return absl::InvalidArgumentError("no training file to guess from");
  if (options.sample_rows < 1) return absl::InvalidArgumentError("sample_rows must be at least 1");
  const std::string& file = options.train_files[0];
  KESTREL_ASSIGN_OR_RETURN(std::string header_line, HeaderLine(file));
  const char delimiter = ChooseDelimiter(options, header_line);
  KESTREL_ASSIGN_OR_RETURN(std::vector<std::string> names, HeaderColumns(file, header_line, delimiter));
  KESTREL_ASSIGN_OR_RETURN(const int label, LabelColumn(file, names, options));
  KESTREL_ASSIGN_OR_RETURN(const int weight, WeightColumn(file, names, options, label));
  SampleColumns columns{names, delimiter, label, weight};
  if (!options.time_column.empty()) {
    columns.time = ColumnIndex(names, options.time_column);
    if (columns.time < 0 || columns.time == label || columns.time == weight) {
      return absl::InvalidArgumentError(absl::StrFormat("the time column %s is %s of %s", Quoted(options.time_column),
                                                        columns.time < 0 ? "no column" : "the label or weight", file));
    }
  }

  SchemaGuess guess;
  std::vector<ColumnSample> samples(names.size());
  int64_t sampled_bytes = 0;
  KESTREL_RETURN_IF_ERROR(SampleRows(file, columns, options, &samples, &guess, &sampled_bytes));
  KESTREL_ASSIGN_OR_RETURN(guess.train_rows, TrainRows(options, guess, header_line, sampled_bytes));
  KESTREL_RETURN_IF_ERROR(CheckOtherHeaders(options, file, delimiter, names));

  SetJobFrame(options, delimiter, weight >= 0, guess.train_rows, &guess.job);
  if (columns.time >= 0) {
    DataConfig& data = *guess.job.mutable_data();
    KESTREL_ASSIGN_OR_RETURN(const TimeSplit split,
                             TimeSplitFrom(options.train_files, columns.time, delimiter, data.validation_every()));
    data.set_validation_column(options.time_column);
    data.set_validation_from(split.from);
    data.clear_validation_every();
  }
  KESTREL_RETURN_IF_ERROR(AddFeatures(file, columns, samples, options, &guess));
  return guess;
}

std::string GuessedJobConfigText(const SchemaGuess& guess, const SchemaGuessOptions& options) {
  const bool counted = guess.whole_file && options.train_files.size() == 1;
  std::string text = absl::StrFormat(
      "# Guessed by `kestrel init` (kestrel_schema_guess) from the header and %s %d rows of %s.\n"
      "# Check before training (proto/schema.proto has every field and its default):\n"
      "#   - each column's kind below: NUMERIC (a number, transformed) or CATEGORICAL (a key; with a separator,\n"
      "#     several keys pooled)%s;\n"
      "#   - the model, embedding_dim and hidden: first-run choices; batch_size, the wide and dense optimizers and\n"
      "#     the validation split by the data's size (docs/tuning.md says how they were chosen);\n"
      "#   - epochs %d, a maximum: about %d examples over the %s%d training rows. %s, and training stops after two epochs without a better\n"
      "#     validation logloss, keeping the best epoch's model (train.early_stopping_patience).\n"
      "# Columns:\n",
      guess.whole_file ? "all" : "the first", guess.sampled_rows, options.train_files[0],
      guess.whole_file ? "" : "; rows beyond the sample may hold values these kinds refuse",
      guess.job.train().epochs(), kExamplesToTrain, counted ? "" : "~", guess.train_rows,
      guess.job.data().validation_column().empty()
          ? absl::StrCat("One training line in ", guess.job.data().validation_every(),
                         " is held out\n#     as the validation split (data.validation_every)")
          : absl::StrCat("The lines from ", guess.job.data().validation_column(), " ",
                         guess.job.data().validation_from(), " on are held out\n#     as the validation split "
                         "(data.validation_from)"));
  for (const std::string& note : guess.notes) absl::StrAppend(&text, "#   ", note, "\n");
  std::string body;
  google::protobuf::TextFormat::PrintToString(guess.job, &body);
  return text + body;
}

}  // namespace kestrel
