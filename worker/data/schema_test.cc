#include "worker/data/schema.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/partition.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "worker/data/feature_map.h"

namespace kestrel {
namespace {

DataConfig Data(const std::string& text) {
  DataConfig data;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &data)) << text;
  return data;
}

ModelConfig Model(int embedding_dim = 8) {
  ModelConfig model;
  model.set_type(ModelConfig::DEEPFM);
  model.set_embedding_dim(embedding_dim);
  model.set_seed(7);
  return model;
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/", name);
  std::ofstream(path) << text;
  return path;
}

// The status message of resolving `data`, which must fail with InvalidArgument.
std::string Refusal(const DataConfig& data, const ModelConfig& model = Model()) {
  absl::StatusOr<std::shared_ptr<const Schema>> schema = Schema::Resolve(data, model);
  EXPECT_FALSE(schema.ok());
  if (schema.ok()) return "";
  EXPECT_EQ(schema.status().code(), absl::StatusCode::kInvalidArgument) << schema.status();
  return std::string(schema.status().message());
}

constexpr char kSchema[] = R"pb(
  format: DELIMITED
  schema {
    columns: [ "label", "user", "history", "price", "age" ]
    features { name: "user" }
    features { name: "history" separator: "|" pooling: POOLING_MEAN max_length: 50 vocabulary: "item" }
    features { name: "price" kind: NUMERIC transform: LOG1P }
    features { name: "age" kind: BUCKETIZED boundaries: [ 18, 30, 50 ] table: "small" }
    tables { name: "small" }
  }
)pb";

TEST(SchemaTest, DelimitedFieldsTablesAndDenseInputs) {
  auto schema = Schema::Resolve(Data(kSchema), Model());
  ASSERT_TRUE(schema.ok()) << schema.status();
  const Schema& s = **schema;
  EXPECT_EQ(s.format(), Schema::Format::kDelimited);
  EXPECT_EQ(s.fields(), 3);
  EXPECT_EQ(s.dense_dim(), 1);
  EXPECT_EQ(s.field_names(), (std::vector<std::string>{"user", "history", "age"}));
  EXPECT_EQ(s.num_tables(), 2);
  EXPECT_EQ(s.table_name(0), "emb");
  EXPECT_EQ(s.table_name(1), "small");
  EXPECT_EQ(s.field_tables(), (std::vector<int>{0, 0, 1}));
  EXPECT_FALSE(s.header());
  EXPECT_EQ(s.delimiter(), '\t');
  EXPECT_EQ(s.quote(), '"');
  EXPECT_EQ(s.label_column(), 0);
  EXPECT_EQ(s.weight_column(), -1);
  // Namespaces: the low 32 bits of the vocabulary's Hash64; "history" reads vocabulary "item".
  EXPECT_EQ(s.features()[0].key_namespace, static_cast<uint32_t>(Hash64("user")));
  EXPECT_EQ(s.features()[1].key_namespace, static_cast<uint32_t>(Hash64("item")));
  EXPECT_EQ(s.features()[1].max_length, 50);
  EXPECT_EQ(s.features()[0].max_length, kMaxBagValues);
  EXPECT_EQ(s.features()[2].dense, 0);
  EXPECT_EQ(s.features()[3].field, 2);
}

TEST(SchemaTest, ExtraTableConfigsTakeTheModelsDefaults) {
  DataConfig data = Data(kSchema);
  EmbeddingTableConfig* own = data.mutable_schema()->add_tables();
  own->set_name("own");
  own->mutable_optimizer()->set_type(OptimizerConfig::SGD);
  own->set_wire_type(VALUE_TYPE_BFLOAT16);
  own->set_checkpoint_codec(CHECKPOINT_FP32);
  data.mutable_schema()->mutable_features(0)->set_table("own");
  ModelConfig model = Model(16);
  model.mutable_embedding_optimizer()->set_type(OptimizerConfig::ADAGRAD);
  model.mutable_embedding_initializer()->set_type(InitializerConfig::NORMAL);
  model.mutable_sparse_capacity()->set_ttl_clocks(9);
  model.set_wire_type(VALUE_TYPE_FLOAT16);
  model.set_embedding_checkpoint_codec(CHECKPOINT_Q8);
  auto schema = Schema::Resolve(data, model);
  ASSERT_TRUE(schema.ok()) << schema.status();
  const std::vector<TableConfig> tables = (*schema)->ExtraTableConfigs(model);
  ASSERT_EQ(tables.size(), 2u);
  EXPECT_EQ(tables[0].name(), "small");
  EXPECT_EQ(tables[1].name(), "own");
  for (const TableConfig& t : tables) {
    EXPECT_EQ(t.kind(), TableConfig::SPARSE);
    EXPECT_EQ(t.dim(), 16);
    EXPECT_EQ(t.initializer().type(), InitializerConfig::NORMAL);
    EXPECT_EQ(t.capacity().ttl_clocks(), 9);
  }
  EXPECT_EQ(tables[0].optimizer().type(), OptimizerConfig::ADAGRAD);
  EXPECT_EQ(tables[0].wire_type(), VALUE_TYPE_FLOAT16);
  EXPECT_EQ(tables[1].optimizer().type(), OptimizerConfig::SGD);
  EXPECT_EQ(tables[1].wire_type(), VALUE_TYPE_BFLOAT16);
  EXPECT_EQ(tables[0].checkpoint_codec(), CHECKPOINT_Q8);
  EXPECT_EQ(tables[1].checkpoint_codec(), CHECKPOINT_FP32);  // set, so not the model's
  // Seeds differ from each other and from wide (seed), emb (seed + 1) and dense (seed + 2).
  EXPECT_EQ(tables[0].seed(), 7u + 3);
  EXPECT_EQ(tables[1].seed(), 7u + 4);
  EXPECT_EQ((*schema)->field_tables(), (std::vector<int>{2, 0, 1}));
}

TEST(SchemaTest, UnknownColumnNamesTheFeatureTheColumnAndTheColumns) {
  DataConfig data = Data(kSchema);
  data.mutable_schema()->mutable_features(2)->set_column("cost");
  const std::string message = Refusal(data);
  EXPECT_NE(message.find("feature 'price'"), std::string::npos) << message;
  EXPECT_NE(message.find("'cost'"), std::string::npos) << message;
  EXPECT_NE(message.find("label, user, history, price, age"), std::string::npos) << message;
}

TEST(SchemaTest, RefusesWhatTheRulesForbid) {
  struct Case {
    std::string edit;  // appended to kSchema's schema
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"features { name: \"user\" }", "two features are named 'user'"},
      {"features { name: \"bad name\" column: \"user\" }", "needs a name"},
      {"features { name: \"l\" column: \"label\" }", "reads the label column"},
      {"tables { name: \"emb\" }", "other than wide, emb and dense"},
      {"tables { name: \"small\" }", "declared twice"},
      {"tables { name: \"t2\" dim: 4 }", "embedding_dim"},
      {"tables { name: \"unused\" }", "looked up by no feature"},
      {"features { name: \"b\" column: \"age\" kind: BUCKETIZED boundaries: [ 3, 2 ] }", "strictly ascending"},
      {"features { name: \"b\" column: \"age\" kind: BUCKETIZED boundaries: [ 1 ] transform: LOG2_BUCKET }",
       "LOG2_BUCKET makes its own buckets"},
      {"features { name: \"b\" column: \"age\" kind: BUCKETIZED transform: LOG1P }", "needs boundaries"},
      {"features { name: \"n\" column: \"age\" kind: NUMERIC separator: \",\" }", "separator"},
      {"features { name: \"n\" column: \"age\" kind: NUMERIC table: \"small\" }", "table"},
      {"features { name: \"n\" column: \"age\" kind: NUMERIC transform: LOG2_BUCKET }", "LOG2_BUCKET"},
      {"features { name: \"n\" column: \"age\" kind: NUMERIC mean: 1 }", "mean/stddev"},
      {"features { name: \"n\" column: \"age\" kind: NUMERIC transform: STANDARDIZE mean: 1 }",
       "mean without stddev"},
      {"features { name: \"n\" column: \"age\" kind: NUMERIC transform: STANDARDIZE stddev: -1 mean: 1 }",
       "stddev >= 0"},
      {"features { name: \"c\" column: \"age\" transform: LOG1P }", "transform"},
      {"features { name: \"c\" column: \"age\" missing_value: 1 }", "missing_value"},
      {"features { name: \"c\" column: \"age\" max_length: 5000 }", "max_length 5000"},
      {"quote: \"\" features { name: \"c\" column: \"age\" separator: \"\\t\" }", "delimiter"},
      {"features { name: \"c\" column: \"age\" table: \"nope\" }", "table 'nope'"},
      {"features { name: \"c\" column: \"age\" vocabulary: \"user\" table: \"small\" }", "a vocabulary lives in one"},
      {"weight: \"w\"", "example weight"},
      {"label: \"click\"", "the label"},
      {"missing_tokens: \"\"", "empty token"},
      {"delimiter: \"ab\"", "delimiter"},
      {"quote: \"\\t\"", "quote"},
      {"features { name: \"m\" column: \"history\" match: \"nope\" separator: \"|\" }", "'nope', which is no feature"},
      {"features { name: \"m\" column: \"history\" match: \"history\" separator: \"|\" }",
       "not a single-valued CATEGORICAL feature"},
      {"features { name: \"m\" column: \"history\" match: \"price\" separator: \"|\" }",
       "not a single-valued CATEGORICAL feature"},
      {"features { name: \"m\" column: \"history\" match: \"user\" }", "only a multi-valued CATEGORICAL"},
      {"features { name: \"m\" column: \"history\" match: \"m\" separator: \"|\" }", "itself"},
      {"features { name: \"m\" column: \"history\" match: \"user\" separator: \"|\" vocabulary: \"item\" }",
       "sets vocabulary"},
      {"features { name: \"m\" column: \"history\" match: \"user\" separator: \"|\" pooling: POOLING_MEAN }",
       "sets pooling"},
      {"features { name: \"m\" column: \"history\" match: \"user\" separator: \"|\" encoding: INTEGER }",
       "sets encoding"},
      {"features { name: \"m\" column: \"history\" match: \"user\" separator: \"|\" hash_buckets: 9 }",
       "sets hash_buckets"},
  };
  for (const Case& c : cases) {
    DataConfig data = Data(kSchema);
    FeatureSchema edit;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(c.edit, &edit)) << c.edit;
    data.mutable_schema()->MergeFrom(edit);
    const std::string message = Refusal(data);
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.edit << " -> " << message;
  }
}

TEST(SchemaTest, RefusesConfigurationsOfTheWrongShape) {
  EXPECT_NE(Refusal(Data("format: DELIMITED")).find("needs data.schema"), std::string::npos);
  EXPECT_NE(Refusal(Data("format: CRITEO schema { label: \"x\" }")).find("data.format is CRITEO"), std::string::npos);
  EXPECT_NE(Refusal(Data("format: DELIMITED schema { columns: \"label\" }")).find("no features"), std::string::npos);
  EXPECT_NE(Refusal(Data("format: DELIMITED schema { features { name: \"a\" } }")).find("names no columns"),
            std::string::npos);
  EXPECT_NE(Refusal(Data(R"pb(format: DELIMITED
                             schema { columns: [ "label", "x" ] features { name: "x" kind: NUMERIC } })pb"))
                .find("at least one field"),
            std::string::npos);
  ModelConfig no_dense = Model();
  no_dense.set_no_dense_inputs(true);
  EXPECT_NE(Refusal(Data(kSchema), no_dense).find("no_dense_inputs"), std::string::npos);
  EXPECT_NE(Refusal(Data(R"pb(format: DELIMITED
                             schema { columns: [ "label", "a", "a" ] features { name: "a" } })pb"))
                .find("columns 2 and 3"),
            std::string::npos);
  EXPECT_NE(Refusal(Data("format: LIBSVM")).find("there are none"), std::string::npos);
  EXPECT_NE(Refusal(Data("format: LIBSVM libsvm_slots: -1")).find("below 0"), std::string::npos);
}

TEST(SchemaTest, CriteoPreset) {
  auto schema = Schema::Resolve(Data("format: CRITEO"), Model());
  ASSERT_TRUE(schema.ok()) << schema.status();
  const Schema& s = **schema;
  EXPECT_EQ(s.format(), Schema::Format::kCriteo);
  EXPECT_EQ(s.fields(), kCriteoIntegerFields + kCriteoCategoricalFields);
  EXPECT_EQ(s.dense_dim(), kCriteoIntegerFields);
  EXPECT_EQ(s.field_names().front(), "I1");
  EXPECT_EQ(s.field_names()[13], "C1");
  EXPECT_EQ(s.field_names().back(), "C26");
  EXPECT_EQ(s.num_tables(), 1);
  EXPECT_TRUE(s.binary_label());
  EXPECT_EQ(s.features()[0].key_namespace, kIntegerFieldBase);
  EXPECT_EQ(s.features()[13].key_namespace, 0u);
  EXPECT_EQ(s.features()[13].encoding, FeatureConfig::HEX);
  ModelConfig no_dense = Model();
  no_dense.set_no_dense_inputs(true);
  auto without = Schema::Resolve(Data("format: CRITEO"), no_dense);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_EQ((*without)->dense_dim(), 0);
  EXPECT_TRUE((*without)->ExtraTableConfigs(Model()).empty());
}

TEST(SchemaTest, PinnedLibsvmSlotsNeedNoFiles) {
  DataConfig data = Data("format: LIBSVM");
  data.add_train_files(WriteFile("pin.svm", "1 1:1 2:1 3:1\n0 2:1\n"));
  auto schema = Schema::Resolve(data, Model());
  ASSERT_TRUE(schema.ok()) << schema.status();
  DataConfig pinned = (*schema)->Pinned(data);
  EXPECT_EQ(pinned.libsvm_slots(), 3);
  pinned.clear_train_files();
  auto again = Schema::Resolve(pinned, Model());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->fields(), 3);
}

TEST(SchemaTest, LibsvmSlotsAreExplicitOrTheMostFeaturesOfAnyLine) {
  const std::string train = WriteFile("slots_train.svm", "1 1:1 2:1\n0 3:1\n\n1 4:1 5:1 6:0.5 # three\n");
  const std::string test = WriteFile("slots_test.svm", "0 1:1 2:1 3:1 4:1\n");
  auto explicit_slots = Schema::Resolve(Data("format: LIBSVM libsvm_slots: 12"), Model());
  ASSERT_TRUE(explicit_slots.ok()) << explicit_slots.status();
  EXPECT_EQ((*explicit_slots)->fields(), 12);
  EXPECT_EQ((*explicit_slots)->field_names()[0], "slot1");
  EXPECT_EQ((*explicit_slots)->dense_dim(), 0);
  DataConfig data = Data("format: LIBSVM");
  data.add_train_files(train);
  data.add_test_files(test);
  auto counted = Schema::Resolve(data, Model());
  ASSERT_TRUE(counted.ok()) << counted.status();
  EXPECT_EQ((*counted)->fields(), 4);
  EXPECT_EQ((*counted)->field_tables(), std::vector<int>(4, 0));

  // A malformed line: the file and line, or passed over.
  data.add_train_files(WriteFile("slots_bad.svm", "1 1:1\nnot a line\n"));
  const std::string message = Refusal(data);
  EXPECT_NE(message.find("slots_bad.svm:2:"), std::string::npos) << message;
  data.set_skip_malformed(true);
  auto skipped = Schema::Resolve(data, Model());
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_EQ((*skipped)->fields(), 4);
}

TEST(SchemaTest, StandardizeStatisticsComeFromTheTrainingFiles) {
  // x: 1, 2, 3, 4 (and one missing): mean 2.5, population stddev sqrt(1.25). Constant c: stddev 1.
  const std::string a = WriteFile("std_a.tsv", "1\t1\t5\n0\t2\t5\n");
  const std::string b = WriteFile("std_b.tsv", "1\t\t5\n1\t3\t5\n0\t4\t5\n");
  DataConfig data = Data(R"pb(
    format: DELIMITED
    schema {
      columns: [ "label", "x", "c" ]
      features { name: "x" kind: NUMERIC transform: STANDARDIZE }
      features { name: "c" kind: NUMERIC transform: STANDARDIZE }
      features { name: "given" column: "x" kind: NUMERIC transform: STANDARDIZE mean: 1 stddev: 2 }
      features { name: "xb" column: "x" kind: BUCKETIZED transform: STANDARDIZE boundaries: [ 0 ] }
    }
  )pb");
  data.add_train_files(a);
  data.add_train_files(b);
  auto schema = Schema::Resolve(data, Model());
  ASSERT_TRUE(schema.ok()) << schema.status();
  const std::vector<Schema::Feature>& f = (*schema)->features();
  EXPECT_DOUBLE_EQ(f[0].mean, 2.5);
  EXPECT_DOUBLE_EQ(f[0].stddev, static_cast<float>(std::sqrt(1.25)));  // rounded to the config's float
  EXPECT_DOUBLE_EQ(f[1].mean, 5);
  EXPECT_DOUBLE_EQ(f[1].stddev, 1);
  EXPECT_DOUBLE_EQ(f[2].mean, 1);
  EXPECT_DOUBLE_EQ(f[2].stddev, 2);
  EXPECT_DOUBLE_EQ(f[3].mean, 2.5);

  // Pinned: the statistics written into the config, which then resolves alike without any training file.
  DataConfig pinned = (*schema)->Pinned(data);
  pinned.clear_train_files();
  auto again = Schema::Resolve(pinned, Model());
  ASSERT_TRUE(again.ok()) << again.status();
  for (size_t i = 0; i < f.size(); ++i) {
    EXPECT_EQ((*again)->features()[i].mean, f[i].mean) << i;
    EXPECT_EQ((*again)->features()[i].stddev, f[i].stddev) << i;
  }

  // A malformed training line fails the statistics pass with its place, or is passed over.
  data.add_train_files(WriteFile("std_bad.tsv", "1\tseven\t5\n1\t100\n"));
  const std::string message = Refusal(data);
  EXPECT_NE(message.find("std_bad.tsv:1:"), std::string::npos) << message;
  data.set_skip_malformed(true);
  auto skipped = Schema::Resolve(data, Model());
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_DOUBLE_EQ((*skipped)->features()[0].mean, 2.5);

  DataConfig no_files = Data(R"pb(
    format: DELIMITED
    schema { columns: [ "label", "x" ] features { name: "x" kind: BUCKETIZED transform: STANDARDIZE boundaries: 0 } }
  )pb");
  EXPECT_NE(Refusal(no_files).find("data.train_files"), std::string::npos);
}

TEST(SchemaTest, HeaderNamesTheColumnsOfEveryFile) {
  const std::string train = WriteFile("header_train.csv", "\xEF\xBB\xBFlabel,\"user id\",city\r\n1,u1,paris\n");
  const std::string test = WriteFile("header_test.csv", "label,user id,city\n0,u2,rome\n");
  DataConfig data = Data(R"pb(
    format: DELIMITED
    schema { header: true features { name: "user" column: "user id" } features { name: "city" } }
  )pb");
  data.add_train_files(train);
  data.add_test_files(test);
  auto schema = Schema::Resolve(data, Model());
  ASSERT_TRUE(schema.ok()) << schema.status();
  EXPECT_TRUE((*schema)->header());
  EXPECT_EQ((*schema)->delimiter(), ',');  // from the .csv name
  EXPECT_EQ((*schema)->columns(), (std::vector<std::string>{"label", "user id", "city"}));
  EXPECT_EQ((*schema)->features()[0].column, 1);

  data.mutable_schema()->add_columns("label");
  EXPECT_NE(Refusal(data).find("differ from the header"), std::string::npos);
  data.mutable_schema()->clear_columns();
  data.add_test_files(WriteFile("header_other.csv", "label,user,city\n"));
  const std::string message = Refusal(data);
  EXPECT_NE(message.find("header_other.csv"), std::string::npos) << message;
  EXPECT_NE(message.find("differs"), std::string::npos) << message;
  data.clear_test_files();
  data.add_test_files(WriteFile("header_empty.csv", ""));
  EXPECT_NE(Refusal(data).find("is empty"), std::string::npos);
  data.clear_train_files();
  EXPECT_NE(Refusal(data).find("needs data.train_files"), std::string::npos);
}

}  // namespace
}  // namespace kestrel
