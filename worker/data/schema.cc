#include "worker/data/schema.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/hash.h"
#include "common/status.h"
#include "worker/data/feature_map.h"
#include "worker/data/libsvm_reader.h"
#include "worker/data/record_reader.h"
#include "worker/data/schema_parser.h"

namespace kestrel {
namespace {

constexpr char kDefaultTable[] = "emb";

// [A-Za-z0-9_.-]{1,64}: feature, vocabulary and table names.
bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return false;
  }
  return true;
}

// "a, b, c" (the first 40 names, then how many in all).
std::string NameList(const std::vector<std::string>& names) {
  constexpr size_t kShown = 40;
  if (names.size() <= kShown) return absl::StrJoin(names, ", ");
  return absl::StrCat(absl::StrJoin(names.begin(), names.begin() + kShown, ", "), ", ... (", names.size(),
                      " in all)");
}

// The first line of `file` (its newline, a final '\r' and a UTF-8 byte order mark removed).
[[nodiscard]] absl::StatusOr<std::string> FirstLine(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in.good()) return absl::NotFoundError(absl::StrCat("cannot open data file ", file));
  std::string line;
  if (!std::getline(in, line)) {
    return absl::InvalidArgumentError(absl::StrCat(file, " is empty, but data.schema.header says its first line "
                                                         "names the columns"));
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (absl::StartsWith(line, "\xEF\xBB\xBF")) line.erase(0, 3);
  return line;
}

// Calls on_line for every data line of `files` (in file order; ReaderOptions.header passes over the header lines),
// turning its failure into "file:line: problem" unless `skip_malformed` (then the line is passed over).
template <typename OnLine>
[[nodiscard]] absl::Status ForEachRecord(const std::vector<std::string>& files, bool header, bool skip_malformed,
                           OnLine on_line) {
  ReaderOptions options;
  options.header = header;
  KESTREL_ASSIGN_OR_RETURN(ShardedLines lines, ShardedLines::Open(files, options, {}));
  absl::string_view line;
  while (true) {
    KESTREL_ASSIGN_OR_RETURN(bool more, lines.Next(&line));
    if (!more) return absl::OkStatus();
    absl::Status status = on_line(line);
    if (!status.ok() && !skip_malformed) {
      return absl::InvalidArgumentError(absl::StrCat(lines.Where(), ": ", status.message()));
    }
  }
}

// A DELIMITED schema's columns by name, for the label, the weight and the features to find theirs: a name that
// appears twice cannot be referred to. Holds `columns`, which must outlive it.
class ColumnLookup {
 public:
  explicit ColumnLookup(const std::vector<std::string>& columns) : columns_(columns) {
    for (int c = 0; c < static_cast<int>(columns_.size()); ++c) {
      if (!index_.emplace(columns_[c], c).second) repeated_.emplace(columns_[c], c);
    }
  }

  // The column `name`, read by `who` (which the error names).
  absl::StatusOr<int> Find(const std::string& name, const std::string& who) const {
    auto it = index_.find(name);
    if (it == index_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(who, " reads column '", name, "', which is not one of the ",
                                                     columns_.size(), " columns: ", NameList(columns_)));
    }
    if (auto r = repeated_.find(name); r != repeated_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(who, " reads column '", name, "', which is the name of columns ",
                                                     it->second + 1, " and ", r->second + 1, ": rename one"));
    }
    return it->second;
  }

 private:
  const std::vector<std::string>& columns_;
  absl::flat_hash_map<std::string, int> index_;
  absl::flat_hash_map<std::string, int> repeated_;  // name -> its second column
};

// What the features of a DELIMITED schema added so far claim, for the next ones to be checked against.
struct FeatureClaims {
  struct Vocabulary {
    int table;
    std::string first;  // the first feature naming it
  };
  absl::flat_hash_set<std::string> names;
  absl::flat_hash_map<std::string, Vocabulary> vocabularies;
  absl::flat_hash_map<uint32_t, std::string> namespace_owner;
  std::vector<bool> table_used;  // per table: some feature looks it up
  std::vector<int> statistics;   // features whose STANDARDIZE statistics come from the data
};

}  // namespace

// Builds Schemas: the checks of proto/schema.proto's rules and the defaults, in one place for the user schemas
// and the Criteo preset.
class SchemaBuilder {
 public:
  // A DELIMITED schema from `fs`; `namespaces` (optional) gives vocabularies their namespaces (the presets').
  static absl::StatusOr<std::shared_ptr<Schema>> Delimited(
      const FeatureSchema& fs, const DataConfig& data, const ModelConfig& model,
      const absl::flat_hash_map<std::string, uint32_t>* namespaces = nullptr);
  static absl::StatusOr<std::shared_ptr<Schema>> Criteo(const ModelConfig& model);
  static absl::StatusOr<std::shared_ptr<Schema>> Libsvm(const DataConfig& data);
  static absl::StatusOr<DelimitedLayout> Layout(const DataConfig& data);  // ReadDelimitedLayout

 private:
  static absl::StatusOr<std::vector<std::string>> Columns(const FeatureSchema& fs, const DataConfig& data,
                                                          char delimiter, int quote);
  static absl::Status CheckFeature(const FeatureConfig& f, const std::string& name);
  // Delimited's steps, in order: how lines split, the label and weight columns with the missing tokens, the
  // embedding tables, every feature (a CATEGORICAL or BUCKETIZED one is a field too), the fields as a whole.
  static absl::Status SetDelimiterAndQuote(const FeatureSchema& fs, const DataConfig& data, Schema* s);
  static absl::Status SetLabelWeightAndMissing(const FeatureSchema& fs, const ColumnLookup& columns, Schema* s);
  static absl::Status SetTables(const FeatureSchema& fs, const ModelConfig& model, Schema* s,
                                absl::flat_hash_map<std::string, int>* table_index);
  static absl::Status AddFeature(const FeatureConfig& config, const ColumnLookup& columns,
                                 const absl::flat_hash_map<std::string, int>& table_index,
                                 const absl::flat_hash_map<std::string, uint32_t>* namespaces, FeatureClaims* claims,
                                 Schema* s);
  static absl::Status AddField(const FeatureConfig& config, const absl::flat_hash_map<std::string, int>& table_index,
                               const absl::flat_hash_map<std::string, uint32_t>* namespaces, FeatureClaims* claims,
                               Schema* s, Schema::Feature* f);
  // Points every match feature at the feature it matches (FeatureConfig.match), and gives it that one's encoding.
  static absl::Status LinkMatches(const FeatureSchema& fs, Schema* s);
  static absl::Status CheckFields(const ModelConfig& model, const std::vector<bool>& table_used, const Schema& s);
  // The STANDARDIZE statistics of features `which` over the training files.
  static absl::Status ComputeStatistics(const std::shared_ptr<Schema>& schema, const std::vector<int>& which,
                                        const DataConfig& data);
};

absl::StatusOr<std::vector<std::string>> SchemaBuilder::Columns(const FeatureSchema& fs, const DataConfig& data,
                                                                char delimiter, int quote) {
  if (!fs.header()) {
    if (fs.columns_size() == 0) {
      return absl::InvalidArgumentError(
          "data.schema names no columns: set columns, or header: true when the first line of each file names them");
    }
    return std::vector<std::string>(fs.columns().begin(), fs.columns().end());
  }
  if (data.train_files_size() == 0) {
    return absl::InvalidArgumentError("data.schema.header: true needs data.train_files to read the header from");
  }
  std::vector<std::string> columns;
  std::string first_file;
  for (const auto* files : {&data.train_files(), &data.test_files()}) {
    for (const std::string& file : *files) {
      KESTREL_ASSIGN_OR_RETURN(std::string line, FirstLine(file));
      absl::StatusOr<std::vector<std::string>> header = SplitDelimitedLine(line, delimiter, quote);
      if (!header.ok()) return absl::InvalidArgumentError(absl::StrCat(file, ":1: ", header.status().message()));
      if (first_file.empty()) {
        first_file = file;
        columns = std::move(header).value();
      } else if (*header != columns) {
        return absl::InvalidArgumentError(absl::StrCat("the header of ", file, " (", NameList(*header),
                                                       ") differs from that of ", first_file, " (",
                                                       NameList(columns), ")"));
      }
    }
  }
  if (fs.columns_size() > 0 && !std::equal(fs.columns().begin(), fs.columns().end(), columns.begin(), columns.end())) {
    return absl::InvalidArgumentError(absl::StrCat("data.schema.columns (", NameList({fs.columns().begin(),
                                                   fs.columns().end()}), ") differ from the header of ", first_file,
                                                   " (", NameList(columns), "); set one of them"));
  }
  return columns;
}

absl::Status SchemaBuilder::CheckFeature(const FeatureConfig& f, const std::string& name) {
  const std::string what = absl::StrCat("feature '", name, "' (", FeatureConfig::Kind_Name(f.kind()), ")");
  auto refuse = [&](absl::string_view field, absl::string_view kinds) {
    return absl::InvalidArgumentError(absl::StrCat(what, " sets ", field, ", which applies to ", kinds, " only"));
  };
  const bool categorical = f.kind() == FeatureConfig::CATEGORICAL;
  const bool numeric = f.kind() == FeatureConfig::NUMERIC;
  if (!categorical) {
    if (!f.separator().empty()) return refuse("separator", "CATEGORICAL features");
    if (f.pooling() != POOLING_SUM) return refuse("pooling", "CATEGORICAL features");
    if (f.max_length() != 0) return refuse("max_length", "CATEGORICAL features");
    if (f.overflow() != FeatureConfig::KEEP_LAST) return refuse("overflow", "CATEGORICAL features");
    if (f.encoding() != FeatureConfig::HASH) return refuse("encoding", "CATEGORICAL features");
    if (f.hash_buckets() != 0) return refuse("hash_buckets", "CATEGORICAL features");
  } else {
    if (f.transform() != FeatureConfig::IDENTITY) return refuse("transform", "NUMERIC and BUCKETIZED features");
    if (f.mean() != 0 || f.stddev() != 0) return refuse("mean/stddev", "STANDARDIZE transforms");
  }
  if (numeric) {
    if (!f.vocabulary().empty()) return refuse("vocabulary", "CATEGORICAL and BUCKETIZED features");
    if (!f.table().empty()) return refuse("table", "CATEGORICAL and BUCKETIZED features");
  }
  if (f.kind() != FeatureConfig::BUCKETIZED && f.boundaries_size() > 0) return refuse("boundaries", "BUCKETIZED features");
  if (!numeric && f.missing_value() != 0) return refuse("missing_value", "NUMERIC features");
  if (!f.match().empty()) {
    const std::string as_match = absl::StrCat(what, " matches '", f.match(), "'");
    auto refuse_match = [&](absl::string_view field) {
      return absl::InvalidArgumentError(absl::StrCat(as_match, " and sets ", field, ", which a match feature takes "
                                                     "from the feature it matches or does not have"));
    };
    if (!categorical || f.separator().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(as_match, ": only a multi-valued CATEGORICAL feature (with a "
                                                     "separator) can match one"));
    }
    if (f.match() == name) return absl::InvalidArgumentError(absl::StrCat(as_match, ": itself"));
    if (!f.vocabulary().empty() && f.vocabulary() != name) return refuse_match("vocabulary");
    if (f.pooling() != POOLING_SUM) return refuse_match("pooling");
    if (f.encoding() != FeatureConfig::HASH) return refuse_match("encoding");
    if (f.hash_buckets() != 0) return refuse_match("hash_buckets");
  }
  if (!FeatureConfig::Kind_IsValid(f.kind()) || !Pooling_IsValid(f.pooling()) ||
      !FeatureConfig::Overflow_IsValid(f.overflow()) || !FeatureConfig::Encoding_IsValid(f.encoding()) ||
      !FeatureConfig::Transform_IsValid(f.transform())) {
    return absl::InvalidArgumentError(absl::StrCat("feature '", name, "' has an unknown enum value"));
  }
  if (f.max_length() < 0 || f.max_length() > kMaxBagValues) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": max_length ", f.max_length(), " is not in [0, ", kMaxBagValues, "]"));
  }
  if (f.transform() == FeatureConfig::LOG2_BUCKET && f.kind() != FeatureConfig::BUCKETIZED) {
    return refuse("transform LOG2_BUCKET", "BUCKETIZED features");
  }
  if (f.kind() == FeatureConfig::BUCKETIZED) {
    if (f.boundaries_size() == 0 && f.transform() != FeatureConfig::IDENTITY &&
        f.transform() != FeatureConfig::LOG2_BUCKET) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": transform ", FeatureConfig::Transform_Name(f.transform()),
                                                     " needs boundaries (without them the buckets are LOG2_BUCKET's)"));
    }
    if (f.boundaries_size() > 0 && f.transform() == FeatureConfig::LOG2_BUCKET) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": LOG2_BUCKET makes its own buckets; remove the boundaries "
                                                     "or the transform"));
    }
    for (int i = 0; i < f.boundaries_size(); ++i) {
      if (!std::isfinite(f.boundaries(i)) || (i > 0 && !(f.boundaries(i - 1) < f.boundaries(i)))) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": boundaries must be finite and strictly ascending (boundaries[", i, "] = ",
                         f.boundaries(i), ")"));
      }
    }
  }
  if (f.transform() == FeatureConfig::STANDARDIZE) {
    if (!std::isfinite(f.mean()) || !std::isfinite(f.stddev()) || f.stddev() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": mean and stddev must be finite, stddev >= 0"));
    }
    if (f.stddev() == 0 && f.mean() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " sets mean without stddev: set both, or neither to compute them from the data"));
    }
  } else if (f.mean() != 0 || f.stddev() != 0) {
    return refuse("mean/stddev", "STANDARDIZE transforms");
  }
  if (!std::isfinite(f.missing_value())) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": missing_value must be finite"));
  }
  return absl::OkStatus();
}

absl::Status SchemaBuilder::SetDelimiterAndQuote(const FeatureSchema& fs, const DataConfig& data, Schema* s) {
  if (fs.delimiter().empty()) {
    s->delimiter_ = data.train_files_size() > 0 && absl::EndsWith(data.train_files(0), ".csv") ? ',' : '\t';
  } else if (fs.delimiter().size() != 1 || fs.delimiter() == "\n" || fs.delimiter() == "\r") {
    return absl::InvalidArgumentError(
        absl::StrCat("data.schema.delimiter '", fs.delimiter(), "' is not one character other than a line break"));
  } else {
    s->delimiter_ = fs.delimiter()[0];
  }
  const std::string quote = fs.has_quote() ? fs.quote() : "\"";
  if (!quote.empty() && (quote.size() > 1 || quote == "\n" || quote == "\r" || quote[0] == s->delimiter_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.schema.quote '", quote, "' is not empty or one character other than the delimiter and a line break"));
  }
  s->quote_ = quote.empty() ? -1 : static_cast<unsigned char>(quote[0]);
  return absl::OkStatus();
}

absl::Status SchemaBuilder::SetLabelWeightAndMissing(const FeatureSchema& fs, const ColumnLookup& columns,
                                                     Schema* s) {
  const std::string label = fs.label().empty() ? "label" : fs.label();
  KESTREL_ASSIGN_OR_RETURN(s->label_column_, columns.Find(label, "the label (data.schema.label)"));
  if (!fs.weight().empty()) {
    KESTREL_ASSIGN_OR_RETURN(s->weight_column_, columns.Find(fs.weight(), "the example weight (data.schema.weight)"));
  }
  for (const std::string& token : fs.missing_tokens()) {
    if (token.empty()) {
      return absl::InvalidArgumentError(
          "data.schema.missing_tokens holds an empty token (an empty column is always missing)");
    }
    s->missing_tokens_.push_back(token);
  }
  return absl::OkStatus();
}

absl::Status SchemaBuilder::SetTables(const FeatureSchema& fs, const ModelConfig& model, Schema* s,
                                      absl::flat_hash_map<std::string, int>* table_index) {
  s->table_names_ = {kDefaultTable};
  *table_index = {{kDefaultTable, 0}};
  for (const EmbeddingTableConfig& t : fs.tables()) {
    if (!ValidName(t.name()) || t.name() == "wide" || t.name() == "emb" || t.name() == "dense") {
      return absl::InvalidArgumentError(absl::StrCat("table '", t.name(),
                                                     "' needs a name of 1 to 64 letters, digits, '_', '-' or '.', "
                                                     "other than wide, emb and dense"));
    }
    if (!table_index->emplace(t.name(), s->num_tables()).second) {
      return absl::InvalidArgumentError(absl::StrCat("table '", t.name(), "' is declared twice"));
    }
    if (t.dim() != 0 && t.dim() != model.embedding_dim()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", t.name(), "' has dim ", t.dim(), ", but every table has the model's embedding_dim (",
          model.embedding_dim(), "): the FM and DLRM terms multiply embeddings of different fields"));
    }
    s->table_names_.push_back(t.name());
    s->tables_.push_back(t);
  }
  return absl::OkStatus();
}

absl::Status SchemaBuilder::AddFeature(const FeatureConfig& config, const ColumnLookup& columns,
                                       const absl::flat_hash_map<std::string, int>& table_index,
                                       const absl::flat_hash_map<std::string, uint32_t>* namespaces,
                                       FeatureClaims* claims, Schema* s) {
  const std::string& name = config.name();
  if (!ValidName(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "feature '", name, "' needs a name of 1 to 64 letters, digits, '_', '-' or '.'"));
  }
  if (!claims->names.insert(name).second) {
    return absl::InvalidArgumentError(absl::StrCat("two features are named '", name, "'"));
  }
  KESTREL_RETURN_IF_ERROR(CheckFeature(config, name));
  Schema::Feature f;
  f.name = name;
  f.kind = config.kind();
  KESTREL_ASSIGN_OR_RETURN(f.column, columns.Find(config.column().empty() ? name : config.column(),
                                                  absl::StrCat("feature '", name, "'")));
  if (f.column == s->label_column_) {
    return absl::InvalidArgumentError(absl::StrCat("feature '", name, "' reads the label column '",
                                                   s->columns_[f.column], "'"));
  }
  f.separator = config.separator();
  if (s->quote_ < 0 && absl::StrContains(f.separator, s->delimiter_)) {
    return absl::InvalidArgumentError(absl::StrCat("feature '", name, "': its separator '", f.separator,
                                                   "' holds the column delimiter, and columns are not quoted"));
  }
  f.pooling = config.pooling();
  f.max_length = config.max_length() > 0 ? config.max_length() : kMaxBagValues;
  f.overflow = config.overflow();
  f.encoding = config.encoding();
  f.hash_buckets = config.hash_buckets();
  f.transform = config.kind() == FeatureConfig::BUCKETIZED && config.boundaries_size() == 0
                    ? FeatureConfig::LOG2_BUCKET
                    : config.transform();
  f.boundaries.assign(config.boundaries().begin(), config.boundaries().end());
  f.missing_value = config.missing_value();
  if (f.transform == FeatureConfig::STANDARDIZE) {
    if (config.stddev() == 0) {
      claims->statistics.push_back(static_cast<int>(s->features_.size()));
    } else {
      f.mean = config.mean();
      f.stddev = config.stddev();
    }
  }
  if (f.kind == FeatureConfig::NUMERIC) {
    f.dense = s->dense_dim_++;
  } else {
    KESTREL_RETURN_IF_ERROR(AddField(config, table_index, namespaces, claims, s, &f));
  }
  s->features_.push_back(std::move(f));
  return absl::OkStatus();
}

absl::Status SchemaBuilder::AddField(const FeatureConfig& config,
                                     const absl::flat_hash_map<std::string, int>& table_index,
                                     const absl::flat_hash_map<std::string, uint32_t>* namespaces,
                                     FeatureClaims* claims, Schema* s, Schema::Feature* f) {
  const std::string& name = config.name();
  const std::string vocabulary = config.vocabulary().empty() ? name : config.vocabulary();
  if (!ValidName(vocabulary)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "feature '", name, "': vocabulary '", vocabulary, "' needs a name of 1 to 64 letters, digits, '_', '-' "
        "or '.'"));
  }
  const std::string table = config.table().empty() ? kDefaultTable : config.table();
  auto t = table_index.find(table);
  if (t == table_index.end()) {
    return absl::InvalidArgumentError(absl::StrCat("feature '", name, "' looks up table '", table,
                                                   "', which is neither emb nor one of data.schema.tables (",
                                                   NameList(s->table_names_), ")"));
  }
  f->table = t->second;
  claims->table_used[f->table] = true;
  auto [v, added] = claims->vocabularies.emplace(vocabulary, FeatureClaims::Vocabulary{f->table, name});
  if (!added && v->second.table != f->table) {
    return absl::InvalidArgumentError(absl::StrCat(
        "features '", v->second.first, "' and '", name, "' share vocabulary '", vocabulary,
        "' (so its keys) but look up different tables (", s->table_names_[v->second.table], ", ", table,
        "): a vocabulary lives in one table"));
  }
  if (namespaces != nullptr && namespaces->contains(vocabulary)) {
    f->key_namespace = namespaces->at(vocabulary);
  } else {
    f->key_namespace = static_cast<uint32_t>(Hash64(vocabulary));
  }
  auto [owner, fresh] = claims->namespace_owner.emplace(f->key_namespace, vocabulary);
  if (!fresh && owner->second != vocabulary) {
    return absl::InvalidArgumentError(absl::StrCat("vocabularies '", owner->second, "' and '", vocabulary,
                                                   "' have the same 32-bit key namespace: rename one"));
  }
  f->field = static_cast<int>(s->field_names_.size());
  s->field_names_.push_back(name);
  s->field_tables_.push_back(f->table);
  return absl::OkStatus();
}

absl::Status SchemaBuilder::LinkMatches(const FeatureSchema& fs, Schema* s) {
  absl::flat_hash_map<std::string, int> index;
  for (int i = 0; i < static_cast<int>(s->features_.size()); ++i) index.emplace(s->features_[i].name, i);
  for (int i = 0; i < fs.features_size(); ++i) {
    const std::string& target = fs.features(i).match();
    if (target.empty()) continue;
    Schema::Feature& f = s->features_[i];
    auto t = index.find(target);
    const Schema::Feature* matched = t == index.end() ? nullptr : &s->features_[t->second];
    if (matched == nullptr || matched->kind != FeatureConfig::CATEGORICAL || !matched->separator.empty() ||
        !fs.features(t->second).match().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "feature '", f.name, "' matches '", target, "', which is ",
          matched == nullptr ? "no feature of data.schema" : "not a single-valued CATEGORICAL feature",
          ": a match feature counts its values equal to such a feature's value"));
    }
    f.match = t->second;
    f.encoding = matched->encoding;
    f.hash_buckets = matched->hash_buckets;
  }
  return absl::OkStatus();
}

absl::Status SchemaBuilder::CheckFields(const ModelConfig& model, const std::vector<bool>& table_used,
                                        const Schema& s) {
  if (s.field_names_.empty()) {
    return absl::InvalidArgumentError(
        "data.schema has no CATEGORICAL or BUCKETIZED feature: a model needs at least one field");
  }
  if (s.dense_dim_ > 0 && model.no_dense_inputs()) {
    return absl::InvalidArgumentError(absl::StrCat("model.no_dense_inputs is set, but data.schema has ", s.dense_dim_,
                                                   " NUMERIC features (dense inputs)"));
  }
  for (size_t t = 1; t < table_used.size(); ++t) {
    if (!table_used[t]) {
      return absl::InvalidArgumentError(absl::StrCat("table '", s.table_names_[t], "' is looked up by no feature"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<DelimitedLayout> SchemaBuilder::Layout(const DataConfig& data) {
  if (data.format() != DataConfig::DELIMITED) {
    return absl::InvalidArgumentError(absl::StrCat("data.format is ", DataConfig::Format_Name(data.format()),
                                                   ", not DELIMITED: its lines have no named columns"));
  }
  Schema s;
  KESTREL_RETURN_IF_ERROR(SetDelimiterAndQuote(data.schema(), data, &s));
  KESTREL_ASSIGN_OR_RETURN(std::vector<std::string> columns, Columns(data.schema(), data, s.delimiter_, s.quote_));
  return DelimitedLayout{s.delimiter_, s.quote_, std::move(columns)};
}
absl::StatusOr<DelimitedLayout> ReadDelimitedLayout(const DataConfig& data) { return SchemaBuilder::Layout(data); }

absl::Status CheckHeaders(const Schema& schema, const std::vector<std::string>& files) {
  for (size_t i = 0; schema.format() == Schema::Format::kDelimited && schema.header() && i < files.size(); ++i) {
    KESTREL_ASSIGN_OR_RETURN(std::string line, FirstLine(files[i]));
    absl::StatusOr<std::vector<std::string>> header = SplitDelimitedLine(line, schema.delimiter(), schema.quote());
    if (!header.ok()) return absl::InvalidArgumentError(absl::StrCat(files[i], ":1: ", header.status().message()));
    if (*header == schema.columns()) continue;
    return absl::InvalidArgumentError(absl::StrCat("the header of ", files[i], " (", NameList(*header), ") differs "
                                                   "from the schema's columns (", NameList(schema.columns()),
                                                   "): its columns are not read by position"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Schema>> SchemaBuilder::Delimited(
    const FeatureSchema& fs, const DataConfig& data, const ModelConfig& model,
    const absl::flat_hash_map<std::string, uint32_t>* namespaces) {
  std::shared_ptr<Schema> schema(new Schema());
  Schema& s = *schema;
  s.format_ = Schema::Format::kDelimited;
  KESTREL_RETURN_IF_ERROR(SetDelimiterAndQuote(fs, data, &s));
  s.header_ = fs.header();
  KESTREL_ASSIGN_OR_RETURN(s.columns_, Columns(fs, data, s.delimiter_, s.quote_));
  const ColumnLookup columns(s.columns_);
  KESTREL_RETURN_IF_ERROR(SetLabelWeightAndMissing(fs, columns, &s));
  absl::flat_hash_map<std::string, int> table_index;  // table 0 is the model's "emb"
  KESTREL_RETURN_IF_ERROR(SetTables(fs, model, &s, &table_index));

  if (fs.features_size() == 0) return absl::InvalidArgumentError("data.schema has no features");
  FeatureClaims claims;
  claims.table_used.assign(s.table_names_.size(), false);
  for (const FeatureConfig& config : fs.features()) {
    KESTREL_RETURN_IF_ERROR(AddFeature(config, columns, table_index, namespaces, &claims, &s));
  }
  KESTREL_RETURN_IF_ERROR(LinkMatches(fs, &s));
  KESTREL_RETURN_IF_ERROR(CheckFields(model, claims.table_used, s));
  if (!claims.statistics.empty()) KESTREL_RETURN_IF_ERROR(ComputeStatistics(schema, claims.statistics, data));
  return schema;
}

absl::Status SchemaBuilder::ComputeStatistics(const std::shared_ptr<Schema>& schema, const std::vector<int>& which,
                                              const DataConfig& data) {
  if (data.train_files_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("feature '", schema->features_[which[0]].name,
                                                   "' is STANDARDIZE without a stddev, which needs data.train_files "
                                                   "to compute it from"));
  }
  // Welford's running mean and sum of squared deviations, per feature, over the numbers present.
  std::vector<int64_t> n(which.size(), 0);
  std::vector<double> mean(which.size(), 0.0), m2(which.size(), 0.0);
  LineParser parser(schema);  // until the statistics are set: mean 0, stddev 1
  Batch batch;
  const std::vector<std::string> files(data.train_files().begin(), data.train_files().end());
  KESTREL_RETURN_IF_ERROR(ForEachRecord(files, schema->header_, data.skip_malformed(), [&](absl::string_view line) {
    batch.Reset(schema->fields(), schema->dense_dim());
    KESTREL_RETURN_IF_ERROR(parser.Append(line, &batch));
    for (size_t i = 0; i < which.size(); ++i) {
      const double x = parser.raw_number(which[i]);
      if (std::isnan(x)) continue;
      ++n[i];
      const double delta = x - mean[i];
      mean[i] += delta / static_cast<double>(n[i]);
      m2[i] += delta * (x - mean[i]);
    }
    return absl::OkStatus();
  }));
  for (size_t i = 0; i < which.size(); ++i) {
    Schema::Feature& f = schema->features_[which[i]];
    const double stddev = n[i] > 0 ? std::sqrt(m2[i] / static_cast<double>(n[i])) : 0.0;
    // Rounded to the config's floats, so a config with them written in (Pinned) transforms exactly alike.
    f.mean = static_cast<float>(mean[i]);
    const float rounded = static_cast<float>(stddev);
    f.stddev = rounded > 0 && std::isfinite(rounded) ? rounded : 1.0f;  // a constant column: shifted only
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Schema>> SchemaBuilder::Criteo(const ModelConfig& model) {
  FeatureSchema fs;
  fs.set_delimiter("\t");
  fs.set_quote("");
  fs.add_columns("label");
  absl::flat_hash_map<std::string, uint32_t> namespaces;
  // A column and the feature reading it, whose vocabulary (its name) has namespace `key_namespace`.
  auto add = [&](const std::string& name, uint32_t key_namespace) {
    fs.add_columns(name);
    namespaces[name] = key_namespace;
    FeatureConfig* f = fs.add_features();
    f->set_name(name);
    return f;
  };
  for (int j = 0; j < kCriteoIntegerFields; ++j) {
    FeatureConfig* f = add(absl::StrCat("I", j + 1), kIntegerFieldBase + static_cast<uint32_t>(j));
    f->set_kind(FeatureConfig::BUCKETIZED);
    f->set_transform(FeatureConfig::LOG2_BUCKET);
  }
  for (int c = 0; c < kCriteoCategoricalFields; ++c) {
    add(absl::StrCat("C", c + 1), static_cast<uint32_t>(c))->set_encoding(FeatureConfig::HEX);
  }
  if (!model.no_dense_inputs()) {
    for (int j = 1; j <= kCriteoIntegerFields; ++j) {
      FeatureConfig* f = fs.add_features();
      f->set_name(absl::StrCat("I", j, "_log1p"));
      f->set_column(absl::StrCat("I", j));
      f->set_kind(FeatureConfig::NUMERIC);
      f->set_transform(FeatureConfig::LOG1P);
    }
  }
  KESTREL_ASSIGN_OR_RETURN(std::shared_ptr<Schema> schema, Delimited(fs, DataConfig(), model, &namespaces));
  schema->format_ = Schema::Format::kCriteo;
  schema->binary_label_ = true;
  for (Schema::Feature& f : schema->features_) {
    if (f.kind != FeatureConfig::CATEGORICAL) f.integers_only = true;
  }
  return schema;
}

absl::StatusOr<std::shared_ptr<Schema>> SchemaBuilder::Libsvm(const DataConfig& data) {
  int slots = data.libsvm_slots();
  if (slots < 0) return absl::InvalidArgumentError(absl::StrCat("data.libsvm_slots is ", slots, ", below 0"));
  if (slots == 0) {
    // The most features of any line.
    std::vector<std::string> files(data.train_files().begin(), data.train_files().end());
    files.insert(files.end(), data.test_files().begin(), data.test_files().end());
    if (files.empty()) {
      return absl::InvalidArgumentError("data.libsvm_slots 0 counts the features of the data files: there are none");
    }
    LibsvmExample example;
    size_t most = 0;
    KESTREL_RETURN_IF_ERROR(ForEachRecord(files, /*header=*/false, data.skip_malformed(), [&](absl::string_view line) {
      KESTREL_RETURN_IF_ERROR(ParseLibsvmLine(line, &example));
      most = std::max(most, example.indices.size());
      return absl::OkStatus();
    }));
    if (most == 0) {
      return absl::InvalidArgumentError("no line of the data files has a feature (data.libsvm_slots 0 counts them)");
    }
    slots = static_cast<int>(most);
  }
  std::shared_ptr<Schema> schema(new Schema());
  schema->format_ = Schema::Format::kLibsvm;
  schema->table_names_ = {kDefaultTable};
  for (int i = 1; i <= slots; ++i) schema->field_names_.push_back(absl::StrCat("slot", i));
  schema->field_tables_.assign(slots, 0);
  return schema;
}

absl::StatusOr<std::shared_ptr<const Schema>> Schema::Resolve(const DataConfig& data, const ModelConfig& model) {
  if (data.has_schema() && data.format() != DataConfig::DELIMITED) {
    return absl::InvalidArgumentError(absl::StrCat("data.schema is set, but data.format is ",
                                                   DataConfig::Format_Name(data.format()),
                                                   ": a schema describes DELIMITED data"));
  }
  switch (data.format()) {
    case DataConfig::CRITEO:
      return SchemaBuilder::Criteo(model);
    case DataConfig::LIBSVM:
      return SchemaBuilder::Libsvm(data);
    case DataConfig::DELIMITED:
      if (!data.has_schema()) {
        return absl::InvalidArgumentError("data.format DELIMITED needs data.schema (the columns and features)");
      }
      return SchemaBuilder::Delimited(data.schema(), data, model);
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown data.format ", static_cast<int>(data.format())));
  }
}

DataConfig Schema::Pinned(DataConfig data) const {
  if (format_ == Format::kLibsvm) data.set_libsvm_slots(fields());
  if (format_ == Format::kDelimited && data.schema().features_size() == static_cast<int>(features_.size())) {
    for (size_t i = 0; i < features_.size(); ++i) {
      if (features_[i].transform != FeatureConfig::STANDARDIZE) continue;
      FeatureConfig* config = data.mutable_schema()->mutable_features(static_cast<int>(i));
      config->set_mean(static_cast<float>(features_[i].mean));
      config->set_stddev(static_cast<float>(features_[i].stddev));
    }
  }
  return data;
}

std::vector<TableConfig> Schema::ExtraTableConfigs(const ModelConfig& model) const {
  std::vector<TableConfig> configs;
  for (size_t i = 0; i < tables_.size(); ++i) {
    const EmbeddingTableConfig& t = tables_[i];
    const int index = static_cast<int>(i) + 1;
    TableConfig c;
    c.set_name(t.name());
    c.set_kind(TableConfig::SPARSE);
    c.set_dim(model.embedding_dim());
    c.set_seed(model.seed() + 2 + static_cast<uint64_t>(index));
    *c.mutable_initializer() = t.has_initializer() ? t.initializer() : model.embedding_initializer();
    *c.mutable_optimizer() = t.has_optimizer() ? t.optimizer() : model.embedding_optimizer();
    if (t.has_capacity()) {
      *c.mutable_capacity() = t.capacity();
    } else if (model.has_sparse_capacity()) {
      *c.mutable_capacity() = model.sparse_capacity();
    }
    c.set_wire_type(t.has_wire_type() ? t.wire_type() : model.wire_type());
    if (t.has_storage()) {
      *c.mutable_storage() = t.storage();
    } else if (model.has_embedding_storage()) {
      *c.mutable_storage() = model.embedding_storage();
    }
    c.set_checkpoint_codec(t.has_checkpoint_codec() ? t.checkpoint_codec() : model.embedding_checkpoint_codec());
    configs.push_back(std::move(c));
  }
  return configs;
}

}  // namespace kestrel
