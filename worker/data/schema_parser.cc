#include "worker/data/schema_parser.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/partition.h"
#include "worker/data/feature_map.h"
#include "worker/data/preset_examples.h"

namespace kestrel {
namespace {

// Appends the columns of `line` split on `delimiter` (no quoting) to `columns`. Columns are short (a CTR line has
// dozens of a few bytes each), so rather than a memchr call per column this compares 16 bytes at a time and walks
// the delimiters' bit mask.
void SplitUnquoted(absl::string_view line, char delimiter, std::vector<absl::string_view>* columns) {
  const char* const p = line.data();
  const size_t n = line.size();
  size_t start = 0;
  size_t i = 0;
#if defined(__SSE2__)
  const __m128i d = _mm_set1_epi8(delimiter);
  for (; i + 16 <= n; i += 16) {
    uint32_t mask = static_cast<uint32_t>(
        _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)), d)));
    while (mask != 0) {
      const size_t at = i + static_cast<size_t>(__builtin_ctz(mask));
      columns->emplace_back(p + start, at - start);
      start = at + 1;
      mask &= mask - 1;
    }
  }
#endif
  for (; i < n; ++i) {
    if (p[i] != delimiter) continue;
    columns->emplace_back(p + start, i - start);
    start = i + 1;
  }
  columns->emplace_back(p + start, n - start);
}

// Splits `line` into `columns` (views into `line` or into `buffer`, which must hold line.size() bytes: unescaped
// text is never longer than its quoted form).
[[nodiscard]] absl::Status Split(absl::string_view line, char delimiter, int quote, std::vector<absl::string_view>* columns,
                   char* buffer) {
  columns->clear();
  size_t pos = 0;
  if (quote < 0) {
    SplitUnquoted(line, delimiter, columns);
    return absl::OkStatus();
  }
  const char q = static_cast<char>(quote);
  size_t written = 0;
  while (true) {
    if (pos < line.size() && line[pos] == q) {
      // A quoted column: up to the first quote not doubled.
      const size_t begin = pos + 1;
      size_t close = begin;
      bool doubled = false;
      while (true) {
        close = line.find(q, close);
        if (close == absl::string_view::npos) {
          return absl::InvalidArgumentError(
              absl::StrCat("column ", columns->size() + 1, " opens a quote that does not close on its line"));
        }
        if (close + 1 < line.size() && line[close + 1] == q) {
          doubled = true;
          close += 2;
          continue;
        }
        break;
      }
      if (!doubled) {
        columns->push_back(line.substr(begin, close - begin));
      } else {
        char* out = buffer + written;
        size_t n = 0;
        for (size_t i = begin; i < close; ++i) {
          out[n++] = line[i];
          if (line[i] == q) ++i;  // the second of a doubled quote
        }
        columns->push_back(absl::string_view(out, n));
        written += n;
      }
      pos = close + 1;
      if (pos == line.size()) return absl::OkStatus();
      if (line[pos] != delimiter) {
        return absl::InvalidArgumentError(
            absl::StrCat("column ", columns->size(), " has text after its closing quote"));
      }
      ++pos;
      continue;
    }
    const size_t end = line.find(delimiter, pos);
    if (end == absl::string_view::npos) {
      columns->push_back(line.substr(pos));
      return absl::OkStatus();
    }
    columns->push_back(line.substr(pos, end - pos));
    pos = end + 1;
  }
}

// "'text'" for an error message: at most 32 bytes of it, escaped.
std::string Quoted(absl::string_view text) {
  constexpr size_t kShown = 32;
  return absl::StrCat("'", absl::CHexEscape(text.substr(0, kShown)), text.size() > kShown ? "...'" : "'");
}

// Where an example's entries, bags and dense inputs ended before it: Restore() truncates back to it. (Labels and
// weights change only when an example closes, after everything that can fail.)
struct BatchMark {
  explicit BatchMark(const Batch& batch)
      : entries(batch.keys.size()), bag_offsets(batch.bag_offsets.size()), dense(batch.dense.size()),
        closed_bags(batch.closed_bags) {}
  void Restore(Batch* batch) const {
    batch->keys.resize(entries);
    batch->values.resize(entries);
    batch->bag_offsets.resize(bag_offsets);  // 0 when the batch was compact: its earlier bags hold one entry each
    batch->dense.resize(dense);
    batch->closed_bags = closed_bags;
  }
  size_t entries, bag_offsets, dense;
  int64_t closed_bags;
};

// The common tokens of CTR data parsed without absl's general parsers (which accept whitespace, signs and
// prefixes, and cost several times as much per token): plain decimal integers of up to 18 digits (no overflow
// possible) and plain hex of up to 16 digits. Anything else goes to absl, so every token parses exactly as
// before.
bool ParseInt64(absl::string_view text, int64_t* out) {
  const bool negative = !text.empty() && text[0] == '-';
  const absl::string_view digits = negative ? text.substr(1) : text;
  if (digits.empty() || digits.size() > 18) return absl::SimpleAtoi(text, out);
  int64_t v = 0;
  for (const char c : digits) {
    const unsigned d = static_cast<unsigned char>(c) - '0';
    if (d > 9) return absl::SimpleAtoi(text, out);
    v = v * 10 + d;
  }
  *out = negative ? -v : v;
  return true;
}

bool ParseHex64(absl::string_view text, uint64_t* out) {
  if (text.empty() || text.size() > 16) return false;  // (absl refuses "" too)
  // A digit's value, 16 for a non-digit: no branch per character (hex tokens mix digits and letters at random).
  static constexpr auto kValue = [] {
    std::array<uint8_t, 256> value{};
    for (int c = 0; c < 256; ++c) {
      value[c] = c >= '0' && c <= '9'   ? c - '0'
                 : c >= 'a' && c <= 'f' ? c - 'a' + 10
                 : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                        : 16;
    }
    return value;
  }();
  uint64_t v = 0;
  uint8_t bad = 0;
  for (const char c : text) {
    const uint8_t d = kValue[static_cast<unsigned char>(c)];
    bad |= d;
    v = (v << 4) | (d & 15);
  }
  if (bad & 16) return absl::SimpleHexAtoi(text, out);
  *out = v;
  return true;
}

// log1p(max(x, 0)) of a number; of the small non-negative integers (most counts in CTR data) from a table that
// std::log1p filled, so bitwise the same.
double Log1pOfNonNegativePart(double x, bool is_integer, int64_t integer) {
  constexpr int64_t kTabled = 4096;
  static const std::vector<double>* const table = [] {
    auto* t = new std::vector<double>(kTabled);
    for (int64_t i = 0; i < kTabled; ++i) (*t)[i] = std::log1p(static_cast<double>(i));
    return t;
  }();
  if (is_integer && integer >= 0 && integer < kTabled) return (*table)[integer];
  return std::log1p(std::max(x, 0.0));
}

// LOG2_BUCKET of a number: 0 below 1, else 1 + floor(log2(x)) (IntegerBucket for integers).
uint64_t Log2Bucket(double x) { return x < 1.0 ? 0 : static_cast<uint64_t>(1 + std::ilogb(x)); }

}  // namespace

absl::StatusOr<std::vector<std::string>> SplitDelimitedLine(absl::string_view line, char delimiter, int quote) {
  std::vector<absl::string_view> views;
  std::string buffer(line.size(), '\0');
  absl::Status split = Split(line, delimiter, quote, &views, buffer.data());
  if (!split.ok()) return split;
  return std::vector<std::string>(views.begin(), views.end());
}

LineParser::LineParser(std::shared_ptr<const Schema> schema)
    : schema_(std::move(schema)),
      raw_(schema_->features().size(), std::numeric_limits<double>::quiet_NaN()),
      numbers_(schema_->columns().size()) {}

absl::Status LineParser::Append(absl::string_view line, Batch* batch) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (schema_->format() == Schema::Format::kLibsvm) return AppendLibsvmLine(line, batch);
  const BatchMark mark(*batch);
  absl::Status appended = AppendColumns(line, batch);
  if (!appended.ok()) mark.Restore(batch);
  return appended;
}

absl::Status LineParser::AppendLibsvmLine(absl::string_view line, Batch* batch) {
  absl::Status parsed = ParseLibsvmLine(line, &libsvm_);
  if (!parsed.ok()) return parsed;
  // AppendLibsvm checks the slots before it appends anything.
  return AppendLibsvm(libsvm_, batch);
}

absl::Status LineParser::AppendColumns(absl::string_view line, Batch* batch) {
  const Schema& schema = *schema_;
  ++lines_;
  if (unquoted_.size() < line.size()) unquoted_.resize(line.size());
  absl::Status split = Split(line, schema.delimiter(), schema.quote(), &columns_, unquoted_.data());
  if (!split.ok()) return split;
  if (columns_.size() != schema.columns().size()) {
    const char delimiter = schema.delimiter();
    return absl::InvalidArgumentError(absl::StrCat("expected ", schema.columns().size(), " columns separated by ",
                                                   Quoted(absl::string_view(&delimiter, 1)), ", found ",
                                                   columns_.size()));
  }

  float label;
  const absl::string_view label_text = columns_[schema.label_column()];
  if (label_text.size() == 1 && (label_text[0] == '0' || label_text[0] == '1')) {
    label = label_text[0] == '1' ? 1.0f : 0.0f;
  } else {
    double x;
    if (schema.binary_label() || !absl::SimpleAtod(label_text, &x) || !std::isfinite(x)) {
      return ColumnError(schema.label_column(), nullptr,
                         absl::StrCat("the label ", Quoted(label_text), " is not ",
                                      schema.binary_label() ? "0 or 1" : "a number"));
    }
    label = x > 0 ? 1.0f : 0.0f;
  }
  float weight = 1.0f;
  if (schema.weight_column() >= 0) {
    const absl::string_view text = columns_[schema.weight_column()];
    if (!absl::SimpleAtof(text, &weight) || !std::isfinite(weight) || weight < 0) {
      return ColumnError(schema.weight_column(), nullptr,
                         absl::StrCat("the weight ", Quoted(text), " is not a finite number >= 0"));
    }
  }

  const std::vector<Schema::Feature>& features = schema.features();
  for (size_t i = 0; i < features.size(); ++i) {
    const Schema::Feature& f = features[i];
    if (f.kind == FeatureConfig::CATEGORICAL) {
      absl::Status appended = AppendCategorical(f, batch);
      if (!appended.ok()) return appended;
      continue;
    }
    const ParsedNumber* number;
    absl::Status parsed = Number(f, &number);
    if (!parsed.ok()) return parsed;
    double x = number->present ? number->value : std::numeric_limits<double>::quiet_NaN();
    raw_[i] = x;
    if (f.kind == FeatureConfig::NUMERIC) {
      if (!number->present) x = f.missing_value;
      if (f.transform == FeatureConfig::LOG1P) {
        x = Log1pOfNonNegativePart(x, number->is_integer, number->integer);  // (is_integer: present)
      } else if (f.transform == FeatureConfig::STANDARDIZE) {
        x = (x - f.mean) / f.stddev;
      }
      const float input = static_cast<float>(x);
      if (!std::isfinite(input)) {
        return ColumnError(f.column, &f, absl::StrCat(Quoted(columns_[f.column]), " is beyond a float's range after ",
                                                      FeatureConfig::Transform_Name(f.transform)));
      }
      batch->dense.push_back(input);
      continue;
    }
    // BUCKETIZED.
    uint64_t bucket = kMissingValue;
    if (number->present) {
      if (f.transform == FeatureConfig::LOG2_BUCKET) {
        bucket = number->is_integer ? IntegerBucket(number->integer) : Log2Bucket(x);
      } else {
        if (f.transform == FeatureConfig::LOG1P) {
          x = Log1pOfNonNegativePart(x, number->is_integer, number->integer);
        } else if (f.transform == FeatureConfig::STANDARDIZE) {
          x = (x - f.mean) / f.stddev;
        }
        bucket = std::upper_bound(f.boundaries.begin(), f.boundaries.end(), x) - f.boundaries.begin();
      }
    }
    batch->AddEntry(Partition::FieldFeatureKey(f.key_namespace, bucket), 1.0f);
    batch->CloseBag();
  }
  batch->CloseExample(label, weight);
  return absl::OkStatus();
}

absl::Status LineParser::SingleValue(const Schema::Feature& f, uint64_t* v) const {
  const absl::string_view text = columns_[f.column];
  *v = kMissingValue;
  if (IsMissing(text)) return absl::OkStatus();
  absl::Status encoded = Encode(f, text, v);
  if (!encoded.ok()) return encoded;
  if (f.hash_buckets != 0) *v %= f.hash_buckets;
  return absl::OkStatus();
}

absl::Status LineParser::AppendCategorical(const Schema::Feature& f, Batch* batch) {
  if (f.separator.empty()) {
    uint64_t v;
    absl::Status read = SingleValue(f, &v);
    if (!read.ok()) return read;
    batch->AddEntry(Partition::FieldFeatureKey(f.key_namespace, v), 1.0f);
    batch->CloseBag(f.pooling);
    return absl::OkStatus();
  }
  absl::Status split = SplitValues(f);
  if (!split.ok()) return split;
  uint64_t target = kMissingValue;
  bool has_target = false;  // a match feature's target value is present
  if (f.match >= 0) {
    const Schema::Feature& matched = schema_->features()[f.match];
    absl::Status read = SingleValue(matched, &target);
    if (!read.ok()) return read;
    has_target = !IsMissing(columns_[matched.column]);
  }
  int matches = 0;
  for (size_t t = tokens_begin_; t < tokens_.size(); ++t) {
    uint64_t v;
    absl::Status encoded = Encode(f, tokens_[t], &v);
    if (!encoded.ok()) return encoded;
    if (f.hash_buckets != 0) v %= f.hash_buckets;
    if (f.match < 0) {
      batch->AddEntry(Partition::FieldFeatureKey(f.key_namespace, v), 1.0f);
    } else {
      matches += has_target && v == target;
    }
  }
  if (f.match >= 0) {
    batch->AddEntry(Partition::FieldFeatureKey(f.key_namespace, std::min(matches, kMatchCountCap)), 1.0f);
  }
  batch->CloseBag(f.pooling);
  return absl::OkStatus();
}

absl::Status LineParser::SplitValues(const Schema::Feature& f) {
  const absl::string_view text = columns_[f.column];
  tokens_.clear();
  const bool keep_first = f.overflow == FeatureConfig::KEEP_FIRST;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = f.separator.size() == 1 ? text.find(f.separator[0], pos) : text.find(f.separator, pos);
    if (end == absl::string_view::npos) end = text.size();
    const absl::string_view token = text.substr(pos, end - pos);
    pos = end + f.separator.size();
    if (token.empty() || IsMissing(token)) continue;
    if (keep_first && tokens_.size() == static_cast<size_t>(f.max_length)) break;
    tokens_.push_back(token);
  }
  size_t begin = 0;
  if (tokens_.size() > static_cast<size_t>(f.max_length)) {
    if (f.overflow == FeatureConfig::FAIL) {
      return ColumnError(f.column, &f,
                         absl::StrCat(tokens_.size(), " values, more than max_length ", f.max_length,
                                      " (overflow FAIL)"));
    }
    begin = tokens_.size() - f.max_length;  // KEEP_LAST
  }
  tokens_begin_ = begin;
  return absl::OkStatus();
}

absl::Status LineParser::Encode(const Schema::Feature& f, absl::string_view token, uint64_t* v) const {
  switch (f.encoding) {
    case FeatureConfig::INTEGER: {
      int64_t x;
      if (!ParseInt64(token, &x)) {
        return ColumnError(f.column, &f, absl::StrCat(Quoted(token), " is not an integer (encoding INTEGER)"));
      }
      *v = static_cast<uint64_t>(x);
      return absl::OkStatus();
    }
    case FeatureConfig::HEX:
      if (!ParseHex64(token, v)) {
        return ColumnError(f.column, &f,
                           absl::StrCat(Quoted(token), " is not a hex token of up to 16 digits (encoding HEX)"));
      }
      return absl::OkStatus();
    default:
      *v = Hash64(token);
      return absl::OkStatus();
  }
}

absl::Status LineParser::Number(const Schema::Feature& f, const ParsedNumber** number) {
  ParsedNumber& n = numbers_[f.column];
  const absl::string_view text = columns_[f.column];
  if (n.line != lines_) {
    n.line = lines_;
    n.present = !IsMissing(text);
    n.is_integer = n.present && ParseInt64(text, &n.integer);
    if (n.is_integer) {
      n.value = static_cast<double>(n.integer);
    } else if (n.present && (!absl::SimpleAtod(text, &n.value) || !std::isfinite(n.value))) {
      n.line = 0;  // not a number: the line fails
      return ColumnError(f.column, &f, absl::StrCat(Quoted(text), " is not a finite number"));
    }
  }
  if (f.integers_only && n.present && !n.is_integer) {
    return ColumnError(f.column, &f, absl::StrCat(Quoted(text), " is not an integer"));
  }
  *number = &n;
  return absl::OkStatus();
}

bool LineParser::IsMissing(absl::string_view token) const {
  if (token.empty()) return true;
  for (const std::string& missing : schema_->missing_tokens()) {
    if (token == missing) return true;
  }
  return false;
}

absl::Status LineParser::ColumnError(int column, const Schema::Feature* feature, absl::string_view problem) const {
  const std::string& name = schema_->columns()[column];
  std::string where = absl::StrCat("column '", name, "' (", column + 1, ")");
  if (feature != nullptr && feature->name != name) absl::StrAppend(&where, ", feature '", feature->name, "'");
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", problem));
}

}  // namespace kestrel
