// Schema: a job's data format resolved once, before training: which columns of a line become the label, the
// example weight, the model's fields (categorical and bucketized features, each with its key namespace and
// embedding table) and its dense inputs (numeric features with their transforms). Every format is one:
// DELIMITED from DataConfig.schema (proto/schema.proto), and the CRITEO and LIBSVM presets. The line parser
// (worker/data/schema_parser.h) applies it; docs/data.md describes the formats.
//
// Keys: value v of a vocabulary whose namespace is N is Partition::FieldFeatureKey(N, v), and a missing value is
// FieldFeatureKey(N, kMissingValue) (worker/data/feature_map.h). A vocabulary of a user schema has namespace
// Hash64(name) mod 2^32 (common/hash.h; Resolve refuses two vocabularies of one schema with the same namespace).
// The Criteo preset keeps worker/data/feature_map.h's keys: integer feature j (0..12) is vocabulary
// kIntegerFieldBase + j, categorical feature f (0..25) vocabulary f. libsvm index i is the key FeatureKey(i).
//
// Immutable once resolved: thread-safe, shared by every reader of a job (std::shared_ptr<const Schema>).
#ifndef KESTREL_WORKER_DATA_SCHEMA_H_
#define KESTREL_WORKER_DATA_SCHEMA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "proto/schema.pb.h"
#include "proto/table.pb.h"

namespace kestrel {

// The most values a multi-valued column keeps (FeatureConfig.max_length 0 means this many).
inline constexpr int kMaxBagValues = 4096;
// A match feature's largest count (FeatureConfig.match): its keys are the counts 0 .. kMatchCountCap, the last
// one "this many or more".
inline constexpr int kMatchCountCap = 3;

// A DELIMITED config's line layout, as Schema::Resolve reads it: the delimiter, the quote (-1: none) and the
// column names (data.schema.columns, or the training files' header line). InvalidArgument as Resolve's.
struct DelimitedLayout {
  char delimiter = '\t';
  int quote = -1;
  std::vector<std::string> columns;
};
[[nodiscard]] absl::StatusOr<DelimitedLayout> ReadDelimitedLayout(const DataConfig& data);

class Schema;
// DELIMITED data with a header line (Schema::header): InvalidArgument unless the first line of every one of
// `files` names `schema`'s columns in its order, naming the file and both lists. Every reader checks the files
// it opens so, whatever named them: a file whose columns stand in another order is refused, never read by
// position. OK for other schemas; NotFound for a file that cannot be opened.
[[nodiscard]] absl::Status CheckHeaders(const Schema& schema, const std::vector<std::string>& files);

class Schema {
 public:
  enum class Format { kCriteo, kLibsvm, kDelimited };

  // A feature as the parser applies it: its FeatureConfig with every default applied, and where it goes.
  struct Feature {
    std::string name;
    FeatureConfig::Kind kind = FeatureConfig::CATEGORICAL;
    int column = 0;      // 0-based index of the column it reads
    int field = -1;      // CATEGORICAL, BUCKETIZED: its field (bag) of an example; else -1
    int dense = -1;      // NUMERIC: its dense input; else -1
    int table = 0;       // CATEGORICAL, BUCKETIZED: its embedding table (0: "emb")
    uint32_t key_namespace = 0;  // CATEGORICAL, BUCKETIZED: the namespace of its vocabulary
    // CATEGORICAL.
    std::string separator;  // empty: single-valued
    Pooling pooling = POOLING_SUM;
    int max_length = kMaxBagValues;  // 1..kMaxBagValues
    FeatureConfig::Overflow overflow = FeatureConfig::KEEP_LAST;
    FeatureConfig::Encoding encoding = FeatureConfig::HASH;
    uint64_t hash_buckets = 0;  // 0: none
    // A match feature (FeatureConfig.match): the index in features() of the single-valued feature whose value
    // its values are counted against; its encoding and hash_buckets are that feature's. Else -1.
    int match = -1;
    // NUMERIC, BUCKETIZED.
    FeatureConfig::Transform transform = FeatureConfig::IDENTITY;
    double mean = 0;
    double stddev = 1;
    std::vector<double> boundaries;  // BUCKETIZED: ascending; empty with LOG2_BUCKET
    double missing_value = 0;
    // Numbers must be integers (the Criteo preset's integer columns).
    bool integers_only = false;
  };

  // Resolves `data`'s format for `model` (its defaults applied: worker/model.h WithDefaults). InvalidArgument
  // names what is wrong with the configuration; reading the data files may also fail (NotFound, or a malformed
  // line's "file:line: problem" when !data.skip_malformed()).
  //   DELIMITED: checks data.schema against proto/schema.proto's rules; reads the header line of every training
  //     and test file when schema.header (they must all be equal); computes the statistics of STANDARDIZE
  //     features without a stddev over the training files (one pass, in file order: every worker gets the same).
  //   CRITEO: the preset (label, I1..I13 bucketized by LOG2_BUCKET, C1..C26 hex categories, and I1..I13 through
  //     LOG1P as dense inputs unless model.no_dense_inputs()).
  //   LIBSVM: data.libsvm_slots fields, or when 0 the most features of any line of the training and test files
  //     (one pass over them).
  [[nodiscard]] static absl::StatusOr<std::shared_ptr<const Schema>> Resolve(const DataConfig& data, const ModelConfig& model);

  Format format() const { return format_; }
  // Fields (bags) and dense inputs per example.
  int fields() const { return static_cast<int>(field_names_.size()); }
  int dense_dim() const { return dense_dim_; }
  // The fields' names: the features' (DELIMITED), I1..I13 C1..C26 (CRITEO), slot1.. (LIBSVM).
  const std::vector<std::string>& field_names() const { return field_names_; }
  // Embedding tables: table 0 is the model's "emb", tables 1.. are FeatureSchema.tables in order.
  int num_tables() const { return static_cast<int>(table_names_.size()); }
  // The embedding table of each field.
  const std::vector<int>& field_tables() const { return field_tables_; }
  const std::string& table_name(int t) const { return table_names_[t]; }
  // The TableConfigs of tables 1.. for a model with its defaults applied: each unset field takes the model's
  // (its embedding_dim, embedding_optimizer, embedding_initializer, sparse_capacity, wire_type,
  // embedding_storage and embedding_checkpoint_codec, as "emb" does); table t's initializer seed is model.seed() + 2 + t ("wide", "emb" and "dense" have seed + 0, 1, 2).
  std::vector<TableConfig> ExtraTableConfigs(const ModelConfig& model_with_defaults) const;
  // `data` (the config this schema was resolved from) with what Resolve read from the data files written in:
  // LIBSVM's counted slots as libsvm_slots, and each computed STANDARDIZE mean and stddev. Resolving the result
  // needs no training file and gives the same schema (an export stores it, so scoring needs only its inputs).
  DataConfig Pinned(DataConfig data) const;
  // Whether the first line of every file is a header (ReaderOptions.header).
  bool header() const { return header_; }

  // DELIMITED and CRITEO: how a line splits into columns, and what the columns are.
  const std::vector<std::string>& columns() const { return columns_; }
  char delimiter() const { return delimiter_; }
  // The quote character, or -1 without quoting.
  int quote() const { return quote_; }
  int label_column() const { return label_column_; }
  // -1 without a weight column.
  int weight_column() const { return weight_column_; }
  // The label must read "0" or "1" (the Criteo preset); otherwise any number, above 0 a positive.
  bool binary_label() const { return binary_label_; }
  const std::vector<std::string>& missing_tokens() const { return missing_tokens_; }
  // The features in the schema's order.
  const std::vector<Feature>& features() const { return features_; }

 private:
  friend class SchemaBuilder;
  Schema() = default;

  Format format_ = Format::kDelimited;
  std::vector<std::string> field_names_;
  int dense_dim_ = 0;
  std::vector<std::string> table_names_;
  std::vector<EmbeddingTableConfig> tables_;  // tables 1..
  std::vector<int> field_tables_;
  bool header_ = false;
  std::vector<std::string> columns_;
  char delimiter_ = '\t';
  int quote_ = -1;
  int label_column_ = 0;
  int weight_column_ = -1;
  bool binary_label_ = false;
  std::vector<std::string> missing_tokens_;
  std::vector<Feature> features_;
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_DATA_SCHEMA_H_
