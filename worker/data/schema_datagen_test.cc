#include "worker/data/schema_datagen.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "worker/data/datagen_testing.h"
#include "worker/data/batch.h"
#include "worker/data/schema.h"
#include "worker/data/schema_parser.h"
#include "common/evaluation.h"

namespace kestrel {
namespace {

std::vector<std::string> Lines(const std::string& path) {
  std::vector<std::string> lines = absl::StrSplit(Slurp(path), '\n');
  EXPECT_EQ(lines.back(), "") << path << " ends with a newline";
  lines.pop_back();
  return lines;
}

// The columns of a line, as the job's line parser splits them.
std::vector<std::string> Columns(const std::string& line, char delimiter) {
  absl::StatusOr<std::vector<std::string>> columns = SplitDelimitedLine(line, delimiter, '"');
  EXPECT_TRUE(columns.ok()) << columns.status() << ": " << line;
  return columns.ok() ? *columns : std::vector<std::string>();
}

int64_t Id(absl::string_view token, absl::string_view prefix) {
  EXPECT_TRUE(absl::ConsumePrefix(&token, prefix)) << token;
  int64_t id = -1;
  EXPECT_TRUE(absl::SimpleAtoi(token, &id)) << token;
  return id;
}

// The example of a line's columns (SchemaDatagenColumns without the weight column).
SchemaExample Parse(const std::vector<std::string>& c) {
  SchemaExample e;
  e.label = c[0] == "1" ? 1 : 0;
  e.user = Id(c[1], "u");
  e.item = Id(c[2], "");
  e.category = Id(c[3], "c");
  if (!c[4].empty()) {
    for (absl::string_view t : absl::StrSplit(c[4], '|')) e.hist_items.push_back(Id(t, ""));
    for (absl::string_view t : absl::StrSplit(c[5], '|')) e.hist_categories.push_back(Id(t, "c"));
  }
  const auto& devices = SchemaDatagenDevices();
  e.device = -1;
  for (size_t d = 0; d < devices.size(); ++d) {
    if (devices[d] == c[6]) e.device = static_cast<int>(d);
  }
  double price = -1;
  if (!c[7].empty()) {
    EXPECT_TRUE(absl::SimpleAtod(c[7], &price)) << c[7];
  }
  e.price_cents = price < 0 ? -1 : std::llround(price * 100);
  e.hour = static_cast<int>(Id(c[8], ""));
  return e;
}

SchemaDatagenOptions Small() {
  SchemaDatagenOptions o;
  o.train_rows = 3000;
  o.test_rows = 6000;
  o.users = 2000;
  o.items = 5000;
  o.categories = 40;
  return o;
}

// Small() written as TSV, or as CSV with a weight column; histories of up to 12.
SchemaDatagenOptions Formatted(bool csv) {
  SchemaDatagenOptions options = Small();
  options.csv = csv;
  options.weight_column = csv;
  options.max_history = 12;
  return options;
}

TEST(SchemaDatagenTest, ReproducibleByteForByte) {
  const std::string a = Dir("schema_a"), b = Dir("schema_b"), c = Dir("schema_c");
  ASSERT_TRUE(GenerateSchemaData(Small(), ModelConfig::DEEPFM, a).ok());
  ASSERT_TRUE(GenerateSchemaData(Small(), ModelConfig::DEEPFM, b).ok());
  for (const char* f : {"/train.tsv", "/test.tsv", "/truth.txt"}) EXPECT_EQ(Slurp(a + f), Slurp(b + f)) << f;
  SchemaDatagenOptions other = Small();
  other.seed = 2;
  ASSERT_TRUE(GenerateSchemaData(other, ModelConfig::DEEPFM, c).ok());
  EXPECT_NE(Slurp(a + "/train.tsv"), Slurp(c + "/train.tsv"));
  // Any row can be regenerated alone.
  const std::vector<std::string> lines = Lines(a + "/train.tsv");
  const HistoryModel model(Small());
  SchemaExample e;
  model.Draw(0, 1234, &e);
  EXPECT_EQ(lines[1 + 1234], model.FormatLine(e, '\t'));
}

TEST(SchemaDatagenTest, HeaderColumnsAndHistories) {
  for (bool csv : {false, true}) {
    SCOPED_TRACE(csv ? "csv" : "tsv");
    SchemaDatagenOptions options = Formatted(csv);
    const char delimiter = csv ? ',' : '\t';
    const std::string dir = Dir(csv ? "schema_csv" : "schema_tsv");
    ASSERT_TRUE(GenerateSchemaData(options, ModelConfig::DEEPFM, dir).ok());
    const std::vector<std::string> lines = Lines(dir + (csv ? "/train.csv" : "/train.tsv"));
    ASSERT_EQ(lines.size(), 1u + options.train_rows);
    const std::vector<std::string> header = Columns(lines[0], delimiter);
    EXPECT_EQ(header, SchemaDatagenColumns(options));
    EXPECT_EQ(header.size(), csv ? 10u : 9u);
    int64_t longest = 0, empty = 0, quoted = 0;
    for (size_t i = 1; i < lines.size(); ++i) {
      std::vector<std::string> c = Columns(lines[i], delimiter);
      ASSERT_EQ(c.size(), header.size()) << lines[i];
      if (csv) {
        EXPECT_TRUE(c[1] == "0.5" || c[1] == "1" || c[1] == "2") << c[1];
        c.erase(c.begin() + 1);
      }
      quoted += lines[i].find("\"tv,console\"") != std::string::npos;
      const SchemaExample e = Parse(c);
      ASSERT_EQ(e.hist_items.size(), e.hist_categories.size()) << lines[i];
      EXPECT_LE(e.hist_items.size(), 12u);
      longest = std::max<int64_t>(longest, e.hist_items.size());
      empty += e.hist_items.empty();
      for (size_t j = 0; j < e.hist_items.size(); ++j) {
        EXPECT_EQ(e.hist_items[j] % options.categories, e.hist_categories[j]) << "an item's category";
      }
      EXPECT_EQ(e.item % options.categories, e.category);
      EXPECT_GE(e.hour, 0);
      EXPECT_LT(e.hour, 24);
    }
    EXPECT_EQ(longest, 12);
    EXPECT_GT(empty, 0);
    EXPECT_EQ(quoted > 0, csv) << "only CSV quotes the device holding a comma";
  }
}

TEST(SchemaDatagenTest, PlantedHistorySignalAndTruth) {
  const std::string dir = Dir("schema_truth");
  auto truth = GenerateSchemaData(Small(), ModelConfig::DEEPFM, dir);
  ASSERT_TRUE(truth.ok()) << truth.status();
  EXPECT_GT(truth->bayes.bayes_auc, 0.70);
  EXPECT_LT(truth->bayes.bayes_auc, 0.95);
  EXPECT_GT(truth->bayes.positive_rate, 0.1);
  EXPECT_LT(truth->bayes.positive_rate, 0.5);
  EXPECT_GT(truth->signal.in_history_fraction, 0.2);
  EXPECT_LT(truth->signal.in_history_fraction, 0.9);

  // Re-scoring the parsed test file reproduces the truth, and the click rate with the target's category in
  // the history is much higher than without.
  const HistoryModel model(Small());
  const std::vector<std::string> lines = Lines(dir + "/test.tsv");
  ASSERT_EQ(lines.size(), 1u + Small().test_rows);
  std::vector<float> probabilities, labels;
  double clicks[2] = {0, 0}, rows[2] = {0, 0};
  for (size_t i = 1; i < lines.size(); ++i) {
    const SchemaExample e = Parse(Columns(lines[i], '\t'));
    probabilities.push_back(static_cast<float>(model.Probability(e)));
    labels.push_back(e.label);
    const bool in_history =
        std::find(e.hist_categories.begin(), e.hist_categories.end(), e.category) != e.hist_categories.end();
    clicks[in_history] += e.label;
    rows[in_history] += 1;
  }
  EXPECT_NEAR(LogLoss(probabilities, labels), truth->bayes.bayes_logloss, 1e-6);
  EXPECT_NEAR(ExactAuc(probabilities, labels), truth->bayes.bayes_auc, 1e-9);
  EXPECT_NEAR(clicks[1] / rows[1], truth->signal.click_rate_in_history, 1e-9);
  EXPECT_NEAR(clicks[0] / rows[0], truth->signal.click_rate_not_in_history, 1e-9);
  EXPECT_GT(clicks[1] / rows[1], 2.5 * (clicks[0] / rows[0]));
  EXPECT_NE(Slurp(dir + "/truth.txt").find("bayes_auc: "), std::string::npos);

  // Without the history term the click rates are about the same.
  SchemaDatagenOptions flat = Small();
  flat.history_weight = 0;
  auto flat_truth = GenerateSchemaData(flat, ModelConfig::DEEPFM, Dir("schema_flat"));
  ASSERT_TRUE(flat_truth.ok());
  EXPECT_LT(flat_truth->signal.click_rate_in_history, 1.5 * flat_truth->signal.click_rate_not_in_history);
  EXPECT_LT(flat_truth->bayes.bayes_auc, truth->bayes.bayes_auc - 0.05);
}

TEST(SchemaDatagenTest, JobConfigDescribesTheFiles) {
  SchemaDatagenOptions options = Small();
  options.csv = true;
  options.weight_column = true;
  const std::string dir = Dir("schema_config");
  ASSERT_TRUE(GenerateSchemaData(options, ModelConfig::FM, dir).ok());
  JobConfig job;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(Slurp(dir + "/job.pbtxt"), &job));
  EXPECT_EQ(job.model().type(), ModelConfig::FM);
  EXPECT_EQ(job.data().format(), DataConfig::DELIMITED);
  ASSERT_EQ(job.data().train_files_size(), 1);
  EXPECT_EQ(job.data().train_files(0), dir + "/train.csv");
  EXPECT_EQ(job.data().test_files(0), dir + "/test.csv");
  const FeatureSchema& schema = job.data().schema();
  EXPECT_EQ(schema.delimiter(), ",");
  EXPECT_TRUE(schema.header());
  EXPECT_EQ(schema.label(), "label");
  EXPECT_EQ(schema.weight(), "weight");
  ASSERT_EQ(schema.tables_size(), 2);
  EXPECT_EQ(schema.tables(0).name(), "items");
  EXPECT_EQ(schema.tables(1).name(), "categories");
  // Every feature reads a written column; the histories and targets share their vocabulary and table.
  const std::vector<std::string> columns = SchemaDatagenColumns(options);
  std::map<std::string, const FeatureConfig*> features;
  for (const FeatureConfig& f : schema.features()) {
    EXPECT_NE(std::find(columns.begin(), columns.end(), f.name()), columns.end()) << f.name();
    features[f.name()] = &f;
  }
  EXPECT_EQ(features.size(), columns.size() - 2);  // all but label and weight
  EXPECT_EQ(features["hist_items"]->table(), "items");
  EXPECT_EQ(features["item_id"]->vocabulary(), features["hist_items"]->vocabulary());
  EXPECT_EQ(features["hist_categories"]->table(), "categories");
  EXPECT_EQ(features["item_category"]->vocabulary(), features["hist_categories"]->vocabulary());
  EXPECT_EQ(features["hist_items"]->separator(), "|");
  EXPECT_EQ(features["hist_items"]->pooling(), POOLING_MEAN);
  EXPECT_EQ(features["hist_categories"]->max_length(), options.max_history);
  EXPECT_EQ(features["price"]->kind(), FeatureConfig::NUMERIC);
  EXPECT_EQ(features["price"]->transform(), FeatureConfig::LOG1P);
  EXPECT_EQ(features["hour"]->kind(), FeatureConfig::BUCKETIZED);
  EXPECT_EQ(features["hour"]->boundaries_size(), 7);
}

// The job config resolves against the files it names (worker/data/schema.h), and every line parses into the
// example drawn for it: the histories' bags hold the history, price is the one dense input.
TEST(SchemaDatagenTest, ConfigResolvesAndEveryLineParses) {
  for (bool csv : {false, true}) {
    SCOPED_TRACE(csv ? "csv" : "tsv");
    SchemaDatagenOptions options = Formatted(csv);
    options.train_rows = 1000;
    const std::string dir = Dir(csv ? "schema_parse_csv" : "schema_parse_tsv");
    ASSERT_TRUE(GenerateSchemaData(options, ModelConfig::DEEPFM, dir).ok());
    JobConfig job;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(Slurp(dir + "/job.pbtxt"), &job));
    absl::StatusOr<std::shared_ptr<const Schema>> schema = Schema::Resolve(job.data(), job.model());
    ASSERT_TRUE(schema.ok()) << schema.status();
    EXPECT_TRUE((*schema)->header());
    EXPECT_EQ((*schema)->dense_dim(), 1);
    EXPECT_EQ((*schema)->num_tables(), 3);
    const std::vector<std::string>& fields = (*schema)->field_names();
    ASSERT_EQ(fields.size(), 7u);
    auto field = [&](const std::string& name) {
      return static_cast<int>(std::find(fields.begin(), fields.end(), name) - fields.begin());
    };
    const int hist_items = field("hist_items"), hist_categories = field("hist_categories");
    ASSERT_LT(hist_items, 7);
    ASSERT_LT(hist_categories, 7);
    const std::vector<int>& tables = (*schema)->field_tables();
    EXPECT_EQ(tables[hist_items], tables[field("item_id")]);
    EXPECT_EQ(tables[hist_categories], tables[field("item_category")]);
    EXPECT_NE(tables[hist_items], tables[hist_categories]);
    EXPECT_EQ(tables[field("user_id")], 0);

    LineParser parser(*schema);
    Batch batch;
    batch.Reset((*schema)->fields(), (*schema)->dense_dim());
    const std::vector<std::string> lines = Lines(dir + "/" + SchemaDatagenFile(options, 0));
    for (size_t i = 1; i < lines.size(); ++i) {
      const absl::Status status = parser.Append(lines[i], &batch);
      ASSERT_TRUE(status.ok()) << status << "\n" << lines[i];
    }
    ASSERT_EQ(batch.size, options.train_rows);
    const HistoryModel model(options);
    SchemaExample e;
    for (int64_t row = 0; row < options.train_rows; ++row) {
      model.Draw(0, row, &e);
      EXPECT_EQ(batch.labels[row], e.label);
      if (csv) { EXPECT_EQ(batch.weights[row], e.weight); }
      const int64_t bag = row * batch.fields;
      EXPECT_EQ(batch.bag_end(bag + hist_items) - batch.bag_begin(bag + hist_items), e.hist_items.size());
      EXPECT_EQ(batch.bag_end(bag + hist_categories) - batch.bag_begin(bag + hist_categories),
                e.hist_categories.size());
      const float price = e.price_cents < 0 ? 0.0f : static_cast<float>(std::log1p(e.price_cents / 100.0));
      EXPECT_NEAR(batch.dense[row], price, 1e-5);
    }
  }
}

// The committed example (examples/own_data, examples/README.md) is this generator's output, and its config the
// one it writes, commented.
TEST(SchemaDatagenTest, OwnDataExampleIsTheGeneratedData) {
  SchemaDatagenOptions options;
  options.csv = true;
  options.train_rows = 4000;
  options.test_rows = 1000;
  options.users = 500;
  options.items = 2000;
  options.categories = 20;
  options.max_history = 20;
  const std::string dir = Dir("own_data"), example = "examples/own_data";
  ASSERT_TRUE(GenerateSchemaData(options, ModelConfig::DEEPFM, dir).ok());
  for (const char* f : {"/train.csv", "/test.csv", "/truth.txt"}) {
    EXPECT_EQ(Slurp(dir + f), Slurp(example + f)) << f << ": regenerate the example (examples/README.md)";
  }
  JobConfig committed;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(Slurp(example + "/job.pbtxt"), &committed));
  const JobConfig generated =
      SchemaDatagenJobConfig(options, ModelConfig::DEEPFM, example + "/train.csv", example + "/test.csv");
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(committed.model(), generated.model()))
      << committed.model().DebugString();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(committed.data(), generated.data()))
      << committed.data().DebugString();
}

TEST(SchemaDatagenTest, RefusesOptionsOutOfRange) {
  const std::string dir = Dir("schema_invalid");
  auto expect_invalid = [&](const SchemaDatagenOptions& options, const std::string& name) {
    const absl::Status status = GenerateSchemaData(options, ModelConfig::DEEPFM, dir).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_NE(std::string(status.message()).find(name), std::string::npos) << status;
  };
  SchemaDatagenOptions o = Small();
  o.max_history = 0;
  expect_invalid(o, "max_history");
  o = Small();
  o.items = o.categories - 1;
  expect_invalid(o, "items");
  o = Small();
  o.test_rows = 0;
  expect_invalid(o, "test_rows");
  o = Small();
  o.missing_rate = 1;
  expect_invalid(o, "missing_rate");
  o = Small();
  o.target_favorite_rate = -0.1;
  expect_invalid(o, "target_favorite_rate");
}

}  // namespace
}  // namespace kestrel
