#include "worker/data/schema_guess.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "worker/data/schema.h"

namespace kestrel {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Write(const std::string& name, const std::string& text) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// 400 rows of every kind of column (deterministic, no draws): the label, an id, a heavy-tailed price, a
// symmetric temperature, a count with many distinct values, an hour, "|"- and " "-separated lists, a device
// name that CSV quotes (a comma, a doubled quote), a constant, and a score missing as "NA" in some rows.
std::string SampleCsv() {
  std::string text = "clicked,user_id,price,temp,count,hour,tags,words,device,const,score\r\n";
  const char* devices[] = {"\"phone,android\"", "tablet", "\"desk\"\"top\""};
  for (int i = 0; i < 400; ++i) {
    absl::StrAppendFormat(&text, "%d,%d,%.2f,%.1f,%d,%d,t%d|t%d,%s,%s,x,%s\r\n", i % 3 == 0, 1000 + i,
                          std::exp((i % 37) / 5.0), (i % 101) - 50.5, (i * 7) % 1000, i % 24, i % 5, i % 7,
                          i % 4 == 0 ? "w1 w2" : "w3", devices[i % 3],
                          i % 10 == 0 ? "NA" : absl::StrFormat("%.3f", i / 7.0));
  }
  return text;
}

std::map<std::string, FeatureConfig> ByName(const JobConfig& job) {
  std::map<std::string, FeatureConfig> features;
  for (const FeatureConfig& f : job.data().schema().features()) features[f.name()] = f;
  return features;
}

TEST(SchemaGuessTest, KindsOfASampleCsv) {
  SchemaGuessOptions options;
  options.train_files = {Write("sample.csv", SampleCsv())};
  options.test_files = {
      Write("sample_test.csv", "clicked,user_id,price,temp,count,hour,tags,words,device,const,score\n")};
  options.label = "clicked";
  options.max_integer_vocabulary = 50;
  auto guess = GuessJobConfig(options);
  ASSERT_TRUE(guess.ok()) << guess.status();
  EXPECT_EQ(guess->sampled_rows, 400);
  EXPECT_EQ(guess->positive_rows, 134);
  const JobConfig& job = guess->job;
  EXPECT_EQ(job.model().type(), ModelConfig::DEEPFM);
  EXPECT_EQ(job.model().embedding_dim(), 16);
  EXPECT_EQ(job.data().format(), DataConfig::DELIMITED);
  EXPECT_THAT(job.data().train_files(), ElementsAre(options.train_files[0]));
  EXPECT_THAT(job.data().test_files(), ElementsAre(options.test_files[0]));
  const FeatureSchema& schema = job.data().schema();
  EXPECT_EQ(schema.delimiter(), ",");
  EXPECT_TRUE(schema.header());
  EXPECT_EQ(schema.label(), "clicked");
  EXPECT_EQ(schema.weight(), "");
  EXPECT_THAT(schema.missing_tokens(), ElementsAre("NA"));

  std::map<std::string, FeatureConfig> f = ByName(job);
  EXPECT_EQ(f.size(), 9u) << "every column but the label and the constant";
  EXPECT_EQ(f.count("const"), 0u);
  EXPECT_EQ(f["user_id"].kind(), FeatureConfig::CATEGORICAL) << "named like an id, though all numbers";
  EXPECT_EQ(f["user_id"].encoding(), FeatureConfig::HASH);
  EXPECT_EQ(f["price"].kind(), FeatureConfig::NUMERIC);
  EXPECT_EQ(f["price"].transform(), FeatureConfig::LOG1P) << "non-negative and heavy-tailed";
  EXPECT_EQ(f["temp"].kind(), FeatureConfig::NUMERIC);
  EXPECT_EQ(f["temp"].transform(), FeatureConfig::STANDARDIZE) << "negative values";
  EXPECT_EQ(f["temp"].stddev(), 0) << "computed before training";
  EXPECT_EQ(f["count"].kind(), FeatureConfig::NUMERIC) << "integers, but more distinct ones than 50";
  EXPECT_EQ(f["count"].transform(), FeatureConfig::STANDARDIZE) << "no long tail";
  EXPECT_EQ(f["hour"].kind(), FeatureConfig::CATEGORICAL) << "24 distinct integers";
  EXPECT_EQ(f["hour"].separator(), "");
  EXPECT_EQ(f["tags"].kind(), FeatureConfig::CATEGORICAL);
  EXPECT_EQ(f["tags"].separator(), "|");
  EXPECT_EQ(f["tags"].pooling(), POOLING_MEAN);
  EXPECT_EQ(f["words"].separator(), "") << "two values, each in 200 rows: labels whose spaces are theirs";
  EXPECT_EQ(f["device"].kind(), FeatureConfig::CATEGORICAL);
  EXPECT_EQ(f["device"].separator(), "") << "the comma is the delimiter, quoted";
  EXPECT_EQ(f["score"].kind(), FeatureConfig::NUMERIC) << "numbers and a missing token";
  for (const auto& [name, feature] : f) EXPECT_EQ(feature.column(), "") << name << ": the name is the column";

  ASSERT_EQ(guess->notes.size(), 11u);
  EXPECT_EQ(guess->notes[0], "clicked: the label (134 of 400 rows positive)");
  EXPECT_THAT(guess->notes[8], HasSubstr("device: CATEGORICAL (3 distinct values"));
  EXPECT_THAT(guess->notes[9], HasSubstr("const: left out: one value in the sample, \"x\""));
  EXPECT_THAT(guess->notes[10], HasSubstr("10% missing"));
}

// Spaces separate the words of a text column, not those of a set of labels; integers are codes when they are
// few or repeat, quantities otherwise.
TEST(SchemaGuessTest, LabelsWithSpacesAndIntegerQuantities) {
  std::string text = "label,status,text,amount,code\n";
  const char* statuses[] = {"no checking", "real estate", "paid"};
  for (int i = 0; i < 300; ++i) {
    absl::StrAppendFormat(&text, "%d,%s,word%d other%d,%d,%d\n", i % 2, statuses[i % 3], i, i % 7, 1000 + 37 * i,
                          i % 60);
  }
  SchemaGuessOptions options;
  options.train_files = {Write("labels.csv", text)};
  auto guess = GuessJobConfig(options);
  ASSERT_TRUE(guess.ok()) << guess.status();
  std::map<std::string, FeatureConfig> f = ByName(guess->job);
  EXPECT_EQ(f["status"].separator(), "") << "3 values, each in 100 rows";
  EXPECT_EQ(f["text"].separator(), " ") << "300 distinct texts";
  EXPECT_EQ(f["text"].pooling(), POOLING_SQRT_N) << "a bag of words";
  EXPECT_EQ(f["amount"].kind(), FeatureConfig::NUMERIC) << "300 distinct integers, none repeated";
  EXPECT_EQ(f["code"].kind(), FeatureConfig::CATEGORICAL) << "60 distinct integers: few, though each in 5 rows";
  EXPECT_THAT(guess->notes[4], HasSubstr("CATEGORICAL (60 distinct integers, at most 100)"));
}

TEST(SchemaGuessTest, PrintsACommentedConfigThatParsesBack) {
  SchemaGuessOptions options;
  options.train_files = {Write("print.csv", SampleCsv())};
  options.label = "clicked";
  auto guess = GuessJobConfig(options);
  ASSERT_TRUE(guess.ok()) << guess.status();
  const std::string text = GuessedJobConfigText(*guess, options);
  EXPECT_THAT(text, StartsWith("# Guessed by `kestrel init`"));
  EXPECT_THAT(text, HasSubstr("all 400 rows of " + options.train_files[0]));
  EXPECT_THAT(text, HasSubstr("#   tags: CATEGORICAL multi-valued by \"|\""));
  JobConfig parsed;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &parsed));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(parsed, guess->job));
  // 400 rows: small data.
  EXPECT_EQ(parsed.train().batch_size(), 128);
  EXPECT_EQ(parsed.data().validation_every(), 20);
  EXPECT_FLOAT_EQ(parsed.model().wide_optimizer().learning_rate(), 0.05f);
  EXPECT_FLOAT_EQ(parsed.model().dense_optimizer().learning_rate(), 0.003f);
  EXPECT_EQ(parsed.train().epochs(), 30) << "400 rows: the most epochs";
  EXPECT_THAT(text, HasSubstr("epochs 30, a maximum: about 300000 examples over the 400 training rows. One training "
                              "line in 20 is held out"));
  EXPECT_THAT(parsed.model().hidden(), ElementsAre(64, 32));
}

TEST(SchemaGuessTest, EpochsFromTheTrainingRows) {
  SchemaGuessOptions options;
  const std::string file = Write("rows.csv", SampleCsv());
  options.train_files = {file};
  options.label = "clicked";
  options.sample_rows = 100;
  auto guess = GuessJobConfig(options);
  ASSERT_TRUE(guess.ok()) << guess.status();
  EXPECT_FALSE(guess->whole_file);
  EXPECT_NEAR(guess->train_rows, 400, 40) << "estimated from the file's size";
  EXPECT_THAT(GuessedJobConfigText(*guess, options), HasSubstr("the first 100 rows of"));
  // 50000 rows in 10 files: 1 epoch, and the larger data's batches, optimizers and validation split.
  options.sample_rows = 10000;
  std::string big = "clicked,a\n";
  for (int i = 0; i < 50000; ++i) absl::StrAppend(&big, i % 2, ",", i % 3, "\n");
  options.train_files.assign(10, Write("big.csv", big));
  guess = GuessJobConfig(options);
  ASSERT_TRUE(guess.ok()) << guess.status();
  EXPECT_EQ(guess->train_rows, 500000);
  EXPECT_EQ(guess->job.train().epochs(), 1);
  EXPECT_EQ(guess->job.train().batch_size(), 256);
  EXPECT_EQ(guess->job.data().validation_every(), 10);
  EXPECT_FALSE(guess->job.model().has_wide_optimizer()) << "the defaults";
  EXPECT_FALSE(guess->job.model().has_dense_optimizer());
  options.train_files.resize(1);
  guess = GuessJobConfig(options);
  ASSERT_TRUE(guess.ok()) << guess.status();
  EXPECT_EQ(guess->train_rows, 50000);
  EXPECT_EQ(guess->job.train().epochs(), 6);
  EXPECT_EQ(guess->job.train().batch_size(), 128);
}

TEST(SchemaGuessTest, ATimeColumnValidatesOnTheLatestLinesAndIsNoFeature) {
  SchemaGuessOptions options;
  options.train_files = {Write("time.csv", SampleCsv())};
  options.label = "clicked";
  options.time_column = "user_id";  // 1000..1399: as good a clock as any
  auto guess = GuessJobConfig(options);
  ASSERT_TRUE(guess.ok()) << guess.status();
  const DataConfig& data = guess->job.data();
  EXPECT_EQ(data.validation_column(), "user_id");
  EXPECT_EQ(data.validation_from(), "1380") << "400 rows: the last twentieth";
  EXPECT_EQ(data.validation_every(), 0u);
  EXPECT_EQ(ByName(guess->job).count("user_id"), 0u);
  const std::string text = GuessedJobConfigText(*guess, options);
  EXPECT_THAT(text, HasSubstr("#   user_id: the time: lines from 1380 on are the validation split"));
  EXPECT_THAT(text, HasSubstr("The lines from user_id 1380 on are held out\n#     as the validation split "
                              "(data.validation_from), and training stops"));
  JobConfig parsed;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &parsed));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(parsed, guess->job));

  for (const char* bad : {"nope", "clicked"}) {
    options.time_column = bad;
    EXPECT_EQ(GuessJobConfig(options).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  options.time_column = "const";  // one value: nothing later to validate on
  EXPECT_EQ(GuessJobConfig(options).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SchemaGuessTest, ModelsWithoutAnMlpBucketizeNumbers) {
  SchemaGuessOptions options;
  options.train_files = {Write("lr.csv", SampleCsv())};
  options.label = "clicked";
  options.model = ModelConfig::LOGISTIC_REGRESSION;
  auto guess = GuessJobConfig(options);
  ASSERT_TRUE(guess.ok()) << guess.status();
  EXPECT_EQ(guess->job.model().embedding_dim(), 0);
  EXPECT_EQ(guess->job.model().hidden_size(), 0);
  std::map<std::string, FeatureConfig> f = ByName(guess->job);
  for (const char* name : {"price", "temp", "score"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(f[name].kind(), FeatureConfig::BUCKETIZED);
    ASSERT_GE(f[name].boundaries_size(), 8);
    EXPECT_LE(f[name].boundaries_size(), 15);
    for (int i = 1; i < f[name].boundaries_size(); ++i) EXPECT_LT(f[name].boundaries(i - 1), f[name].boundaries(i));
  }
}

TEST(SchemaGuessTest, TheSchemaReaderAcceptsTheGuessForEveryModel) {
  SchemaGuessOptions options;
  options.train_files = {Write("resolve.csv", SampleCsv())};
  options.test_files = {Write("resolve_test.csv", SampleCsv())};
  options.label = "clicked";
  options.max_integer_vocabulary = 50;
  for (ModelConfig::Type model : {ModelConfig::LOGISTIC_REGRESSION, ModelConfig::FM, ModelConfig::DEEPFM,
                                  ModelConfig::WIDE_AND_DEEP, ModelConfig::DLRM}) {
    SCOPED_TRACE(ModelConfig::Type_Name(model));
    options.model = model;
    auto guess = GuessJobConfig(options);
    ASSERT_TRUE(guess.ok()) << guess.status();
    auto schema = Schema::Resolve(guess->job.data(), guess->job.model());
    ASSERT_TRUE(schema.ok()) << schema.status();
    const bool mlp = model != ModelConfig::LOGISTIC_REGRESSION && model != ModelConfig::FM;
    // price, temp, count and score are dense inputs of an MLP, else bucketized fields.
    EXPECT_EQ((*schema)->dense_dim(), mlp ? 4 : 0);
    EXPECT_EQ((*schema)->fields(), mlp ? 5 : 9);
    EXPECT_EQ((*schema)->label_column(), 0);
  }
}

TEST(SchemaGuessTest, TabsFromTheHeaderWeightsAndOddColumnNames) {
  SchemaGuessOptions options;
  options.train_files = {Write("odd.txt", "w\tlabel\tcity name\tuserId\n1.5\t1\tOslo\tu1\n0\t0\tRome\tu2\n"
                                          "2\t0\tOslo\tu3\n")};
  options.weight = "w";
  auto guess = GuessJobConfig(options);
  ASSERT_TRUE(guess.ok()) << guess.status();
  const FeatureSchema& schema = guess->job.data().schema();
  EXPECT_EQ(schema.delimiter(), "\t");
  EXPECT_EQ(schema.weight(), "w");
  ASSERT_EQ(schema.features_size(), 2);
  EXPECT_EQ(schema.features(0).name(), "city_name");
  EXPECT_EQ(schema.features(0).column(), "city name");
  EXPECT_EQ(schema.features(1).name(), "userId");
  EXPECT_THAT(guess->notes[3], HasSubstr("named like an id"));
}

TEST(SchemaGuessTest, AHistorySharesTheVocabularyOfItsTarget) {
  // hist holds item ids 0..59 as the item column does; hour's 24 values occur in hist too, but are 40% of its
  // tokens; few has under 20 values.
  std::string text = "label,item,hour,few,hist\n";
  for (int r = 0; r < 300; ++r) {
    absl::StrAppendFormat(&text, "%d,%d,%d,%d,%d|%d|%d\n", r % 2, (r * 13) % 60, r % 24, r % 5, r % 60,
                          (r + 1) % 60, (r + 2) % 60);
  }
  SchemaGuessOptions options;
  options.train_files = {Write("history.csv", text)};
  auto guess = GuessJobConfig(options);
  ASSERT_TRUE(guess.ok()) << guess.status();
  std::map<std::string, FeatureConfig> f = ByName(guess->job);
  EXPECT_EQ(f["hist"].separator(), "|");
  EXPECT_EQ(f["hist"].vocabulary(), "item");
  EXPECT_EQ(f["item"].vocabulary(), "item");
  EXPECT_EQ(f["hour"].vocabulary(), "");
  EXPECT_EQ(f["few"].vocabulary(), "");
  EXPECT_THAT(guess->notes[4], HasSubstr("shares vocabulary \"item\" (100% of the values in common)"));
  // And a match feature: how often the target item occurs in the history.
  ASSERT_EQ(f.count("hist_has_item"), 1u);
  EXPECT_EQ(f["hist_has_item"].column(), "hist");
  EXPECT_EQ(f["hist_has_item"].separator(), "|");
  EXPECT_EQ(f["hist_has_item"].match(), "item");
  EXPECT_EQ(f.count("hist_has_hour"), 0u);
  EXPECT_THAT(guess->notes[4], HasSubstr("feature \"hist_has_item\" counts its values equal to \"item\" (0 to 3)"));
  absl::StatusOr<std::shared_ptr<const Schema>> schema = Schema::Resolve(guess->job.data(), guess->job.model());
  EXPECT_TRUE(schema.ok()) << schema.status();
}

TEST(SchemaGuessTest, BadInputIsNamed) {
  const std::string good = Write("good.csv", "label,a\n1,x\n0,y\n");
  struct Case {
    std::string name, text, label, expected;
    absl::StatusCode code = absl::StatusCode::kInvalidArgument;
  };
  const std::vector<Case> cases = {
      {"empty.csv", "", "label", "is empty: kestrel init needs a header line"},
      {"noheader.csv", "1,0.5,3\n0,0.25,4\n", "label", "is all numbers, a row rather than a header"},
      {"nolabel.csv", "click,a,b\n1,x,y\n", "label",
       "has no label column \"label\"; its columns: \"click\", \"a\", \"b\". Name the label with --label"},
      {"rowfirst.csv", "1,x,0.5\n0,y,0.25\n", "label",
       "holds numbers (\"1\", \"0.5\"), a row rather than a header: kestrel init needs a header line"},
      {"headeronly.csv", "label,a\n", "label", "has a header but no rows"},
      {"short.csv", "label,a,b\n1,x,y\n0,x\n", "label", "short.csv:3: 2 columns, but the header names 3"},
      {"quote.csv", "label,a\n1,\"x\n", "label", "quote.csv:2: column 2 opens a quote that does not close"},
      {"afterquote.csv", "label,a\n1,\"x\"y\n", "label", "afterquote.csv:2: column 2 has text after its closing quote"},
      {"textlabel.csv", "label,a\nyes,x\n", "label", "the label \"label\" is \"yes\", not a number"},
      {"unnamed.csv", "label,,b\n1,x,y\n", "label", "leaves column 2 unnamed"},
      {"twice.csv", "label,a,a\n1,x,y\n", "label", "names two columns \"a\""},
      {"onecolumn.csv", "label\n1\n", "label", "names one column"},
      {"constant.csv", "label,a\n1,x\n0,x\n", "label", "no column of"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    SchemaGuessOptions options;
    options.train_files = {Write(c.name, c.text)};
    options.label = c.label;
    auto guess = GuessJobConfig(options);
    EXPECT_EQ(guess.status().code(), c.code);
    EXPECT_THAT(guess.status().message(), HasSubstr(c.expected));
  }
  SchemaGuessOptions options;
  options.train_files = {good};
  options.test_files = {Write("othertest.csv", "label,b\n1,x\n")};
  EXPECT_THAT(GuessJobConfig(options).status().message(), HasSubstr("othertest.csv differs from"));
  options.test_files = {"/nonexistent/test.csv"};
  EXPECT_EQ(GuessJobConfig(options).status().code(), absl::StatusCode::kNotFound);
  options.test_files = {};
  options.weight = "w";
  EXPECT_THAT(GuessJobConfig(options).status().message(), HasSubstr("no weight column \"w\""));
}

}  // namespace
}  // namespace kestrel
