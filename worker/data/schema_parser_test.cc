#include "worker/data/schema_parser.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/hash.h"
#include "common/partition.h"
#include "common/test_seed.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/preset_examples.h"
#include "worker/data/feature_map.h"

namespace kestrel {
namespace {

std::shared_ptr<const Schema> Resolve(const std::string& text, bool no_dense_inputs = false) {
  DataConfig data;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &data)) << text;
  ModelConfig model;
  model.set_embedding_dim(8);
  model.set_no_dense_inputs(no_dense_inputs);
  absl::StatusOr<std::shared_ptr<const Schema>> schema = Schema::Resolve(data, model);
  EXPECT_TRUE(schema.ok()) << schema.status();
  return schema.ok() ? *schema : nullptr;
}

void ExpectSameBatch(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.size, b.size);
  EXPECT_EQ(a.fields, b.fields);
  EXPECT_EQ(a.dense_dim, b.dense_dim);
  EXPECT_EQ(a.keys, b.keys);
  EXPECT_EQ(a.values, b.values);
  EXPECT_EQ(a.bag_offsets, b.bag_offsets);
  EXPECT_EQ(a.dense, b.dense);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.weights, b.weights);
  EXPECT_EQ(a.closed_bags, b.closed_bags);
}

uint64_t Key(absl::string_view vocabulary, uint64_t value) {
  return Partition::FieldFeatureKey(static_cast<uint32_t>(Hash64(vocabulary)), value);
}

constexpr char kSchema[] = R"pb(
  format: DELIMITED
  schema {
    delimiter: ","
    columns: [ "label", "w", "user", "history", "price", "age", "n" ]
    weight: "w"
    missing_tokens: "NA"
    features { name: "user" }
    features { name: "history" separator: "|" pooling: POOLING_MEAN max_length: 3 vocabulary: "item" }
    features { name: "price" kind: NUMERIC transform: LOG1P }
    features { name: "age" kind: BUCKETIZED boundaries: [ 18, 30, 50 ] }
    features { name: "n" kind: NUMERIC transform: STANDARDIZE mean: 10 stddev: 4 missing_value: 2 }
    features { name: "n_bucket" column: "n" kind: BUCKETIZED }
  }
)pb";

TEST(LineParserTest, AppendsTheColumnsAsTheSchemaSays) {
  std::shared_ptr<const Schema> schema = Resolve(kSchema);
  ASSERT_NE(schema, nullptr);
  LineParser parser(schema);
  Batch batch;
  batch.Reset(schema->fields(), schema->dense_dim());
  ASSERT_TRUE(parser.Append("1,2.5,alice,a|b||c|d,3,40,14\r", &batch).ok());
  ASSERT_TRUE(parser.Append("0.0,1,NA,,NA,,", &batch).ok());
  ASSERT_EQ(batch.size, 2);
  EXPECT_EQ(batch.labels, (std::vector<float>{1, 0}));
  EXPECT_EQ(batch.weights, (std::vector<float>{2.5f, 1}));
  // Example 0: user, history (KEEP_LAST keeps b, c, d; MEAN pools them), age bucket 2, n bucket of 14 = 4.
  // Example 1: the missing user, an empty history, age and n missing.
  const std::vector<uint64_t> keys = {
      Key("user", Hash64("alice")), Key("item", Hash64("b")), Key("item", Hash64("c")), Key("item", Hash64("d")),
      Key("age", 2), Key("n_bucket", 4),
      Key("user", kMissingValue), Key("age", kMissingValue), Key("n_bucket", kMissingValue)};
  EXPECT_EQ(batch.keys, keys);
  EXPECT_EQ(batch.values, (std::vector<float>{1, 1.0f / 3, 1.0f / 3, 1.0f / 3, 1, 1, 1, 1, 1}));
  EXPECT_EQ(batch.bag_offsets, (std::vector<uint32_t>{0, 1, 4, 5, 6, 7, 7, 8, 9}));
  ASSERT_EQ(batch.dense.size(), 4u);
  EXPECT_FLOAT_EQ(batch.dense[0], std::log1p(3.0));
  EXPECT_FLOAT_EQ(batch.dense[1], (14 - 10) / 4.0);
  EXPECT_FLOAT_EQ(batch.dense[2], 0);                 // log1p(max(missing 0, 0))
  EXPECT_FLOAT_EQ(batch.dense[3], (2 - 10) / 4.0);    // missing_value 2, standardized
  EXPECT_TRUE(std::isnan(parser.raw_number(4)));      // missing in the last line
}

TEST(LineParserTest, MultiValuedTruncationPoolingBucketsAndEncodings) {
  std::shared_ptr<const Schema> schema = Resolve(R"pb(
    format: DELIMITED
    schema {
      columns: [ "label", "h" ]
      features { name: "first" column: "h" separator: "::" max_length: 2 overflow: KEEP_FIRST pooling: POOLING_SQRT_N }
      features { name: "ints" column: "h" separator: "::" encoding: INTEGER hash_buckets: 10 }
    }
  )pb");
  ASSERT_NE(schema, nullptr);
  LineParser parser(schema);
  Batch batch;
  batch.Reset(schema->fields(), schema->dense_dim());
  ASSERT_TRUE(parser.Append("1\t7::-3::::25", &batch).ok());
  const float s = 1.0f / std::sqrt(2.0f);
  EXPECT_EQ(batch.keys, (std::vector<uint64_t>{Key("first", Hash64("7")), Key("first", Hash64("-3")),
                                               Key("ints", 7), Key("ints", static_cast<uint64_t>(-3) % 10),
                                               Key("ints", 5)}));
  EXPECT_EQ(batch.values, (std::vector<float>{s, s, 1, 1, 1}));

  // A token that is not an integer names the column and the feature.
  absl::Status bad = parser.Append("1\t7::x", &batch);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("column 'h' (2), feature 'ints'"), absl::string_view::npos) << bad;
  EXPECT_NE(bad.message().find("'x' is not an integer"), absl::string_view::npos) << bad;

  std::shared_ptr<const Schema> strict = Resolve(R"pb(
    format: DELIMITED
    schema {
      columns: [ "label", "h", "x" ]
      features { name: "h" separator: "," max_length: 2 overflow: FAIL encoding: HEX }
      features { name: "x" kind: BUCKETIZED }
    }
  )pb");
  ASSERT_NE(strict, nullptr);
  LineParser strict_parser(strict);
  batch.Reset(strict->fields(), strict->dense_dim());
  ASSERT_TRUE(strict_parser.Append("1\tff,,10\t0.5", &batch).ok());
  ASSERT_TRUE(strict_parser.Append("1\t\t1e3", &batch).ok());
  EXPECT_EQ(batch.keys, (std::vector<uint64_t>{Key("h", 0xff), Key("h", 0x10), Key("x", 0), Key("x", 10)}));
  absl::Status over = strict_parser.Append("1\t1,2,3\t1", &batch);
  EXPECT_NE(over.message().find("3 values, more than max_length 2 (overflow FAIL)"), absl::string_view::npos) << over;
  absl::Status hex = strict_parser.Append("1\t12345678901234567\t1", &batch);
  EXPECT_NE(hex.message().find("not a hex token"), absl::string_view::npos) << hex;
  absl::Status number = strict_parser.Append("1\t1\tinf", &batch);
  EXPECT_NE(number.message().find("column 'x' (3): 'inf' is not a finite number"), absl::string_view::npos)
      << number;
}

// Unquoted lines are split 16 bytes at a time: every length, every delimiter place across the 16-byte steps,
// empty columns and a delimiter at either end split as absl::StrSplit does.
// A match feature counts the history's values equal to the target's value, compared as the target encodes them
// (INTEGER, hash_buckets 10 here: "13" equals "3"), up to kMatchCountCap; a missing target counts none; the
// values kept are those max_length keeps. Its keys are counts in its own vocabulary.
TEST(LineParserTest, MatchFeaturesCountTheTargetInTheHistory) {
  std::shared_ptr<const Schema> schema = Resolve(R"pb(
    format: DELIMITED
    schema {
      delimiter: ","
      columns: [ "label", "item", "hist" ]
      features { name: "item" encoding: INTEGER hash_buckets: 10 vocabulary: "items" }
      features { name: "hist" separator: "|" encoding: INTEGER hash_buckets: 10 vocabulary: "items" }
      features { name: "hist_has_item" column: "hist" separator: "|" max_length: 5 match: "item" }
    }
  )pb");
  ASSERT_NE(schema, nullptr);
  ASSERT_EQ(schema->fields(), 3);
  LineParser parser(schema);
  Batch batch;
  batch.Reset(schema->fields(), schema->dense_dim());
  const std::vector<std::pair<std::string, uint64_t>> lines = {
      {"1,3,1|2|4", 0},             // none
      {"0,3,1|3|4", 1},             // one
      {"0,3,13|3|4|23", 3},         // 13 and 23 are 3 in 10 buckets
      {"1,3,3|3|3|3|3", 3},         // five: the cap
      {"1,3,3|3|3|1|1|1|1|1", 0},   // max_length 5 keeps the last five: no 3 among them
      {"0,,1|3", 0},                // the target is missing
      {"0,7,", 0}};                 // an empty history
  for (const auto& [line, count] : lines) {
    ASSERT_TRUE(parser.Append(line, &batch).ok()) << line;
  }
  ASSERT_EQ(batch.size, static_cast<int>(lines.size()));
  for (size_t e = 0; e < lines.size(); ++e) {
    const size_t bag = e * 3 + 2;  // the match feature's bag of example e
    ASSERT_EQ(batch.bag_offsets[bag + 1] - batch.bag_offsets[bag], 1u) << lines[e].first;
    EXPECT_EQ(batch.keys[batch.bag_offsets[bag]], Key("hist_has_item", lines[e].second)) << lines[e].first;
  }
  // A history token the target's encoding refuses is the match feature's error, naming its column.
  absl::Status refused = parser.Append("1,3,1|x", &batch);
  EXPECT_TRUE(absl::IsInvalidArgument(refused));
  EXPECT_EQ(batch.size, static_cast<int>(lines.size())) << "the batch is unchanged";
}

TEST(LineParserTest, UnquotedSplitMatchesStrSplit) {
  const TestSeed seed;
  std::mt19937 rng(seed.value());
  for (int round = 0; round < 2000; ++round) {
    std::string line(rng() % 70, 'x');
    for (char& c : line) c = rng() % 4 == 0 ? '\t' : static_cast<char>('a' + rng() % 26);
    const std::vector<std::string> expected = absl::StrSplit(line, '\t');
    absl::StatusOr<std::vector<std::string>> split = SplitDelimitedLine(line, '\t', -1);
    ASSERT_TRUE(split.ok()) << split.status();
    ASSERT_EQ(*split, expected) << "line '" << line << "'";
  }
}

TEST(LineParserTest, CsvQuoting) {
  EXPECT_EQ(*SplitDelimitedLine(R"(a,"b,c","say ""hi""",,"")", ',', '"'),
            (std::vector<std::string>{"a", "b,c", "say \"hi\"", "", ""}));
  EXPECT_EQ(*SplitDelimitedLine(R"(a"b,c)", ',', '"'), (std::vector<std::string>{"a\"b", "c"}));
  EXPECT_EQ(*SplitDelimitedLine(R"("a,b")", ',', -1), (std::vector<std::string>{"\"a", "b\""}));
  EXPECT_EQ(*SplitDelimitedLine("", '\t', '"'), (std::vector<std::string>{""}));
  absl::StatusOr<std::vector<std::string>> open = SplitDelimitedLine(R"(a,"b)", ',', '"');
  EXPECT_NE(open.status().message().find("column 2 opens a quote"), absl::string_view::npos) << open.status();
  absl::StatusOr<std::vector<std::string>> after = SplitDelimitedLine(R"("a"b,c)", ',', '"');
  EXPECT_NE(after.status().message().find("column 1 has text after its closing quote"), absl::string_view::npos)
      << after.status();

  std::shared_ptr<const Schema> schema = Resolve(R"pb(
    format: DELIMITED
    schema { delimiter: "," quote: "'" columns: [ "label", "tags" ] features { name: "tags" separator: "," } }
  )pb");
  ASSERT_NE(schema, nullptr);
  LineParser parser(schema);
  Batch batch;
  batch.Reset(schema->fields(), schema->dense_dim());
  ASSERT_TRUE(parser.Append("1,'x,y,''z'''", &batch).ok());
  EXPECT_EQ(batch.keys, (std::vector<uint64_t>{Key("tags", Hash64("x")), Key("tags", Hash64("y")),
                                               Key("tags", Hash64("'z'"))}));
}

TEST(LineParserTest, ErrorsNameTheColumnAndLeaveTheBatchUnchanged) {
  std::shared_ptr<const Schema> schema = Resolve(kSchema);
  ASSERT_NE(schema, nullptr);
  LineParser parser(schema);
  Batch batch;
  batch.Reset(schema->fields(), schema->dense_dim());
  ASSERT_TRUE(parser.Append("1,1,alice,a,3,40,14", &batch).ok());  // one entry per bag: compact
  ASSERT_TRUE(batch.single_valued());
  const Batch before = batch;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"1,1,alice,a", "expected 7 columns separated by ',', found 4"},
      {"yes,1,alice,a,3,40,14", "column 'label' (1): the label 'yes' is not a number"},
      {"1,-1,alice,a,3,40,14", "column 'w' (2): the weight '-1' is not a finite number >= 0"},
      {"1,,alice,a,3,40,14", "column 'w' (2)"},
      // Fails after history's bag of several entries left the compact layout.
      {"1,1,bob,a|b|c,3,forty,14", "column 'age' (6): 'forty' is not a finite number"},
      {"1,1,bob,a|b,nan,40,14", "column 'price' (5): 'nan' is not a finite number"},
      {"1,1,bob,a|b,3,40,\"14", "column 7 opens a quote that does not close"},
      {"1,1,bob,a|b,3,40,1e300", "column 'n' (7): '1e300' is beyond a float's range after STANDARDIZE"},
  };
  for (const auto& [line, expected] : cases) {
    absl::Status status = parser.Append(line, &batch);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << line;
    EXPECT_NE(status.message().find(expected), absl::string_view::npos) << line << " -> " << status;
    ExpectSameBatch(batch, before);
  }
  // Example weights appear once one differs from 1.
  ASSERT_TRUE(parser.Append("1,0.5,bob,a|b,3,40,14", &batch).ok());
  EXPECT_EQ(batch.weights, (std::vector<float>{1, 0.5f}));
  EXPECT_EQ(batch.closed_bags, 2 * schema->fields());
}

TEST(LineParserTest, LabelsOfUserSchemasAreAnyNumber) {
  std::shared_ptr<const Schema> schema = Resolve(R"pb(
    format: DELIMITED schema { columns: [ "y", "a" ] label: "y" features { name: "a" } }
  )pb");
  ASSERT_NE(schema, nullptr);
  LineParser parser(schema);
  Batch batch;
  batch.Reset(schema->fields(), schema->dense_dim());
  for (const char* line : {"+1\tx", "-1\tx", "0.25\tx", "0\tx", "1e-9\tx"}) ASSERT_TRUE(parser.Append(line, &batch).ok());
  EXPECT_EQ(batch.labels, (std::vector<float>{1, 0, 1, 0, 1}));
  EXPECT_NE(parser.Append("\tx", &batch).message().find("column 'y' (1): the label '' is not a number"),
            absl::string_view::npos);
}

// A random Criteo line: mostly valid (integers of any magnitude, 8-digit tokens, missing columns), sometimes not.
std::string RandomCriteoLine(std::mt19937_64& rng) {
  std::string line = absl::StrCat(rng() % 2);
  if (rng() % 50 == 0) line = rng() % 2 ? "2" : "";
  for (int j = 0; j < kCriteoIntegerFields; ++j) {
    std::string x;
    switch (rng() % 8) {
      case 0: break;  // missing
      case 1: x = absl::StrCat(-static_cast<int64_t>(rng() % 100)); break;
      case 2: x = absl::StrCat(static_cast<int64_t>(rng() >> 1)); break;  // beyond 2^53
      case 3: if (rng() % 20 == 0) x = "1.5"; else x = "0"; break;
      default: x = absl::StrCat(rng() % 5000); break;
    }
    absl::StrAppend(&line, "\t", x);
  }
  for (int f = 0; f < kCriteoCategoricalFields; ++f) {
    std::string token;
    if (rng() % 10 != 0) token = absl::StrFormat("%08x", static_cast<uint32_t>(rng()));
    if (rng() % 200 == 0) token = "zz";
    absl::StrAppend(&line, "\t", token);
  }
  if (rng() % 100 == 0) absl::StrAppend(&line, "\t");
  return line;
}

TEST(LineParserTest, CriteoPresetEqualsAppendCriteo) {
  const TestSeed seed;
  std::mt19937_64 rng(seed.value());
  for (bool dense : {true, false}) {
    std::shared_ptr<const Schema> schema = Resolve("format: CRITEO", /*no_dense_inputs=*/!dense);
    ASSERT_NE(schema, nullptr);
    LineParser parser(schema);
    Batch expected, got;
    expected.Reset(kCriteoFields, dense ? kCriteoIntegerFields : 0);
    got.Reset(schema->fields(), schema->dense_dim());
    ASSERT_EQ(got.fields, expected.fields);
    ASSERT_EQ(got.dense_dim, expected.dense_dim);
    CriteoExample example;
    int parsed = 0;
    for (int i = 0; i < 3000; ++i) {
      const std::string line = RandomCriteoLine(rng);
      const bool ok = ParseCriteoLine(line, &example).ok();
      if (ok) AppendCriteo(example, &expected);
      ASSERT_EQ(parser.Append(line, &got).ok(), ok) << line;
      parsed += ok;
    }
    EXPECT_GT(parsed, 1000);
    ExpectSameBatch(got, expected);
  }
}

TEST(LineParserTest, LibsvmLinesFillTheSlots) {
  std::shared_ptr<const Schema> schema = Resolve("format: LIBSVM libsvm_slots: 3");
  ASSERT_NE(schema, nullptr);
  LineParser parser(schema);
  Batch batch;
  batch.Reset(schema->fields(), schema->dense_dim());
  ASSERT_TRUE(parser.Append("+1 4:0.5 9:2 # comment", &batch).ok());
  EXPECT_EQ(batch.keys, (std::vector<uint64_t>{LibsvmKey(4), LibsvmKey(9)}));
  EXPECT_EQ(batch.bag_offsets, (std::vector<uint32_t>{0, 1, 2, 2}));
  const Batch before = batch;
  absl::Status over = parser.Append("0 1:1 2:1 3:1 4:1", &batch);
  EXPECT_NE(over.message().find("libsvm_slots"), absl::string_view::npos) << over;
  ExpectSameBatch(batch, before);
  EXPECT_FALSE(parser.Append("x 1:1", &batch).ok());
  ExpectSameBatch(batch, before);
}

}  // namespace
}  // namespace kestrel
