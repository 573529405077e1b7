#include "worker/batch_reader.h"

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/test_seed.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/preset_examples.h"

namespace kestrel {
namespace {

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/", name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::shared_ptr<const Schema> Resolve(const std::string& text, const std::vector<std::string>& train_files = {}) {
  DataConfig data;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &data)) << text;
  for (const std::string& f : train_files) data.add_train_files(f);
  ModelConfig model;
  model.set_embedding_dim(8);
  absl::StatusOr<std::shared_ptr<const Schema>> schema = Schema::Resolve(data, model);
  EXPECT_TRUE(schema.ok()) << schema.status();
  return schema.ok() ? *schema : nullptr;
}

std::string CriteoLine(int i) {
  std::string line = absl::StrCat(i % 2);
  for (int j = 0; j < kCriteoIntegerFields; ++j) absl::StrAppend(&line, "\t", j == i % 13 ? "" : absl::StrCat(i * j));
  for (int f = 0; f < kCriteoCategoricalFields; ++f) absl::StrAppend(&line, "\t", absl::Hex(i * 1000 + f));
  return line;
}

TEST(BatchReaderTest, CriteoBatchesEqualAppendCriteo) {
  std::string text;
  Batch expected;
  expected.Reset(kCriteoFields, kCriteoIntegerFields);
  CriteoExample example;
  for (int i = 0; i < 10; ++i) {
    absl::StrAppend(&text, CriteoLine(i), "\n");
    ASSERT_TRUE(ParseCriteoLine(CriteoLine(i), &example).ok());
    AppendCriteo(example, &expected);
  }
  const std::string file = WriteFile("reader.criteo", text);
  std::shared_ptr<const Schema> schema = Resolve("format: CRITEO");
  ASSERT_NE(schema, nullptr);
  auto reader = BatchReader::Open(schema, {file}, ReaderOptions{});
  ASSERT_TRUE(reader.ok()) << reader.status();
  Batch batch;
  std::vector<uint64_t> lines;
  absl::StatusOr<int64_t> filled = (*reader)->Fill(4, &batch, /*append=*/false, &lines);
  ASSERT_TRUE(filled.ok()) << filled.status();
  EXPECT_EQ(*filled, 4);
  filled = (*reader)->Fill(100, &batch, /*append=*/true, &lines);
  ASSERT_TRUE(filled.ok()) << filled.status();
  EXPECT_EQ(*filled, 10);
  EXPECT_EQ(lines, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(batch.keys, expected.keys);
  EXPECT_EQ(batch.dense, expected.dense);
  EXPECT_EQ(batch.labels, expected.labels);
  EXPECT_TRUE(batch.single_valued());
  filled = (*reader)->Fill(4, &batch);
  ASSERT_TRUE(filled.ok());
  EXPECT_EQ(*filled, 0);
}

TEST(BatchReaderTest, ShardsAndResumedReadersSplitTheLines) {
  std::string text;
  for (int i = 0; i < 9; ++i) absl::StrAppend(&text, CriteoLine(i), "\n");
  const std::string file = WriteFile("shards.criteo", text);
  std::shared_ptr<const Schema> schema = Resolve("format: CRITEO");
  ASSERT_NE(schema, nullptr);
  std::vector<float> labels;
  for (int part = 0; part < 2; ++part) {
    ReaderOptions options;
    options.part = part;
    options.num_parts = 2;
    auto reader = BatchReader::Open(schema, {file}, options);
    ASSERT_TRUE(reader.ok()) << reader.status();
    Batch batch;
    std::vector<uint64_t> lines;
    ASSERT_TRUE((*reader)->Fill(2, &batch, false, &lines).ok());
    auto resumed = BatchReader::Open(schema, {file}, options, (*reader)->position());
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    ASSERT_TRUE((*resumed)->Fill(100, &batch, /*append=*/true, &lines).ok());
    std::vector<uint64_t> expected;
    for (uint64_t l = part; l < 9; l += 2) expected.push_back(l);
    EXPECT_EQ(lines, expected);
  }
}

TEST(BatchReaderTest, MalformedLinesFailWithTheirPlaceOrAreSkipped) {
  const std::string file = WriteFile("malformed.svm", "1 1:1 2:1\n0 1:1 2:1 3:1 4:1\n1 3:0.5\nbad\n");
  std::shared_ptr<const Schema> schema = Resolve("format: LIBSVM libsvm_slots: 3");
  ASSERT_NE(schema, nullptr);
  Batch batch;
  auto failing = BatchReader::Open(schema, {file}, ReaderOptions{});
  ASSERT_TRUE(failing.ok());
  absl::StatusOr<int64_t> filled = (*failing)->Fill(10, &batch);
  ASSERT_FALSE(filled.ok());
  EXPECT_NE(filled.status().message().find("malformed.svm:2: "), std::string::npos) << filled.status();
  EXPECT_NE(filled.status().message().find("libsvm_slots"), std::string::npos) << filled.status();

  ReaderOptions skip;
  skip.on_error = ReaderOptions::OnError::kSkip;
  auto skipping = BatchReader::Open(schema, {file}, skip);
  ASSERT_TRUE(skipping.ok());
  std::vector<uint64_t> lines;
  filled = (*skipping)->Fill(10, &batch, false, &lines);
  ASSERT_TRUE(filled.ok()) << filled.status();
  EXPECT_EQ(*filled, 2);
  EXPECT_EQ((*skipping)->skipped(), 2u);
  EXPECT_EQ(lines, (std::vector<uint64_t>{0, 2}));
  EXPECT_EQ(batch.fields, 3);
  EXPECT_EQ(batch.closed_bags, 6);
}

TEST(BatchReaderTest, DelimitedFilesWithAHeader) {
  const std::string a = WriteFile("header_a.csv", "click,user,tags,price\n1,u1,\"a,b\",3\n0,u2,,\n");
  const std::string b = WriteFile("header_b.csv", "click,user,tags,price\r\n1,u3,c,1.5\r\n");
  std::shared_ptr<const Schema> schema = Resolve(R"pb(
    format: DELIMITED
    schema {
      header: true
      label: "click"
      features { name: "user" }
      features { name: "tags" separator: "," pooling: POOLING_MEAN }
      features { name: "price" kind: NUMERIC transform: STANDARDIZE }
    }
  )pb", {a, b});
  ASSERT_NE(schema, nullptr);
  EXPECT_EQ(schema->columns(), (std::vector<std::string>{"click", "user", "tags", "price"}));
  // Statistics over the numbers present: 3 and 1.5.
  EXPECT_DOUBLE_EQ(schema->features()[2].mean, 2.25);
  EXPECT_DOUBLE_EQ(schema->features()[2].stddev, 0.75);
  ReaderOptions options;
  options.header = false;  // taken from the schema
  auto reader = BatchReader::Open(schema, {a, b}, options);
  ASSERT_TRUE(reader.ok()) << reader.status();
  Batch batch;
  absl::StatusOr<int64_t> filled = (*reader)->Fill(10, &batch);
  ASSERT_TRUE(filled.ok()) << filled.status();
  EXPECT_EQ(*filled, 3);
  EXPECT_EQ(batch.labels, (std::vector<float>{1, 0, 1}));
  EXPECT_EQ(batch.bag_offsets, (std::vector<uint32_t>{0, 1, 3, 4, 4, 5, 6}));
  EXPECT_EQ(batch.values, (std::vector<float>{1, 0.5f, 0.5f, 1, 1, 1}));
  EXPECT_EQ(batch.dense, (std::vector<float>{1, -3, -1}));

  // A file whose header orders the columns otherwise (a test file, a file to score) is refused by name, not read by
  // position; the schema's own order reads.
  const std::string swapped = WriteFile("header_swapped.csv", "click,tags,user,price\n1,\"a,b\",u1,3\n");
  auto refused = BatchReader::Open(schema, {a, swapped}, options);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("the header of " + swapped + " (click, tags, user, price) differs from "
                                            "the schema's columns (click, user, tags, price)"),
            std::string::npos)
      << refused.status();
  EXPECT_TRUE(CheckHeaders(*schema, {a, b}).ok());
}

// Random delimited lines (multi-valued, weighted, numeric; some malformed, some with tags only in a stretch so a
// chunk may stay compact while another does not): parse_threads 4 reads exactly what one thread reads.
TEST(BatchReaderTest, ParallelParseReadsWhatOneThreadReads) {
  const TestSeed seed;  // prints the seed and how to replay it
  std::mt19937 rng(seed.value());
  std::string text = "click,w,user,tags,price\n";
  const int kLines = 5000;
  for (int i = 0; i < kLines; ++i) {
    const int kind = static_cast<int>(rng() % 100);
    std::string tags = (i > 2500 && i < 2600) || kind < 20 ? "a,b,c" : absl::StrCat("t", rng() % 50);
    absl::StrAppend(&text, rng() % 2, ",", kind < 10 ? "0.5" : "1", ",u", rng() % 1000, ",\"", tags, "\",",
                    kind == 99 ? "x" : absl::StrCat(rng() % 100), "\n");
  }
  const std::string file = WriteFile("parallel.csv", text);
  std::shared_ptr<const Schema> schema = Resolve(R"pb(
    format: DELIMITED
    schema {
      header: true
      label: "click"
      weight: "w"
      features { name: "user" }
      features { name: "tags" separator: "," pooling: POOLING_SQRT_N }
      features { name: "price" kind: NUMERIC transform: LOG1P }
    }
  )pb", {file});
  ASSERT_NE(schema, nullptr);
  for (const auto on_error : {ReaderOptions::OnError::kSkip, ReaderOptions::OnError::kFail}) {
    ReaderOptions one;
    one.on_error = on_error;
    ReaderOptions four = one;
    four.parse_threads = 4;
    auto a = BatchReader::Open(schema, {file}, one);
    auto b = BatchReader::Open(schema, {file}, four);
    ASSERT_TRUE(a.ok() && b.ok());
    for (int round = 0; round < 8; ++round) {
      const int64_t size = 300 + static_cast<int64_t>(rng() % 1500);
      Batch x, y;
      std::vector<uint64_t> x_lines, y_lines;
      absl::StatusOr<int64_t> got_x = (*a)->Fill(size, &x, false, &x_lines);
      absl::StatusOr<int64_t> got_y = (*b)->Fill(size, &y, false, &y_lines);
      ASSERT_EQ(got_x.status(), got_y.status()) << "round " << round;
      if (!got_x.ok()) break;  // kFail: the same first malformed line, named the same
      ASSERT_EQ(*got_x, *got_y);
      EXPECT_EQ(x.keys, y.keys);
      EXPECT_EQ(x.values, y.values);
      EXPECT_EQ(x.bag_offsets, y.bag_offsets);
      EXPECT_EQ(x.dense, y.dense);
      EXPECT_EQ(x.labels, y.labels);
      EXPECT_EQ(x.weights, y.weights);
      EXPECT_EQ(x.closed_bags, y.closed_bags);
      EXPECT_EQ(x_lines, y_lines);
      EXPECT_EQ((*a)->skipped(), (*b)->skipped());
      EXPECT_EQ((*a)->position().global_line, (*b)->position().global_line);
      EXPECT_EQ((*a)->position().byte_offset, (*b)->position().byte_offset);
    }
  }
}

TEST(BatchReaderTest, ParseThreadsOutsideTheirRangeAreRefused) {
  const std::string file = WriteFile("threads.criteo", CriteoLine(1) + "\n");
  std::shared_ptr<const Schema> schema = Resolve("format: CRITEO");
  ASSERT_NE(schema, nullptr);
  for (const int threads : {-1, kMaxParseThreads + 1, 1 << 30}) {
    ReaderOptions options;
    options.parse_threads = threads;
    auto reader = BatchReader::Open(schema, {file}, options);
    ASSERT_FALSE(reader.ok()) << threads;
    EXPECT_EQ(reader.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(reader.status().message().find("data.parse_threads is"), std::string::npos) << reader.status();
  }
  DataConfig data;
  data.set_parse_threads(-3);  // a negative number is not the default: refused, not replaced
  EXPECT_EQ(ReaderOptionsFor(data).parse_threads, -3);
}

TEST(BatchReaderTest, AppendJoinsBatchesAsOneWouldBeBuilt) {
  // Compact + multi-valued + weighted, built whole and in two parts.
  auto build = [](Batch* batch, int from, int to) {
    for (int i = from; i < to; ++i) {
      batch->AddEntry(i, 1.0f);
      if (i == 3) batch->AddEntry(100 + i, 1.0f);
      batch->CloseBag(POOLING_MEAN);
      batch->CloseExample(i % 2, i == 4 ? 2.0f : 1.0f);
    }
  };
  Batch whole, first, second;
  for (Batch* b : {&whole, &first, &second}) b->Reset(1, 0);
  build(&whole, 0, 6);
  build(&first, 0, 2);
  build(&second, 2, 6);
  first.Append(second);
  EXPECT_EQ(first.keys, whole.keys);
  EXPECT_EQ(first.values, whole.values);
  EXPECT_EQ(first.bag_offsets, whole.bag_offsets);
  EXPECT_EQ(first.labels, whole.labels);
  EXPECT_EQ(first.weights, whole.weights);
  EXPECT_EQ(first.size, whole.size);
  EXPECT_EQ(first.closed_bags, whole.closed_bags);
}

TEST(TrainingHoldoutTest, AColumnAtOrAfterAValueIsTheValidationSplit) {
  // Numbers compare as numbers (9 < 10), the rest byte by byte (ISO dates); a missing value and a line too short
  // for the column train; a quoted column is unquoted.
  const std::string file = WriteFile("holdout.csv",
                                     "label,ts,day,x\n"
                                     "1,9,2024-05-31,a\n"
                                     "0,10,2024-06-01,b\n"
                                     "1,11,\"2024-06-02\",\"c,d\"\n"
                                     "0,,,e\n"
                                     "1\n"
                                     "0,100,2024-07-01T08:00,f\n");
  DataConfig data;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "format: DELIMITED schema { header: true } validation_column: 'ts' validation_from: '10'", &data));
  data.add_train_files(file);
  auto count = [&](bool validation) -> uint64_t {
    absl::StatusOr<ReaderOptions::Holdout> holdout = TrainingHoldout(data);
    EXPECT_TRUE(holdout.ok()) << holdout.status();
    if (!holdout.ok()) return 0;
    EXPECT_TRUE(holdout->active());
    holdout->validation = validation;
    absl::StatusOr<uint64_t> lines = CountDataLines({file}, /*header=*/true, *holdout);
    EXPECT_TRUE(lines.ok()) << lines.status();
    return lines.ok() ? *lines : 0;
  };
  EXPECT_EQ(count(true), 3u);   // 10, 11, 100
  EXPECT_EQ(count(false), 3u);  // 9, the empty one, the short one
  data.set_validation_column("day");
  data.set_validation_from("2024-06-01");
  EXPECT_EQ(count(true), 3u);  // 2024-06-01, "2024-06-02" (quoted), 2024-07-01T08:00
  data.set_validation_from("2024-06-02");
  EXPECT_EQ(count(true), 2u);

  EXPECT_TRUE(AtOrAfter("1e3", "999"));
  EXPECT_FALSE(AtOrAfter("9", "10"));
  EXPECT_TRUE(AtOrAfter("9", "10a"));  // not both numbers: bytes
}

TEST(TrainingHoldoutTest, AColumnHoldoutThatCannotBeReadIsRefused) {
  const std::string file = WriteFile("holdout_refused.csv", "label,ts\n1,3\n");
  auto refusal = [&](const std::string& text) {
    DataConfig data;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &data)) << text;
    data.add_train_files(file);
    absl::StatusOr<ReaderOptions::Holdout> holdout = TrainingHoldout(data);
    EXPECT_EQ(holdout.status().code(), absl::StatusCode::kInvalidArgument) << text;
    return std::string(holdout.status().message());
  };
  const std::string delimited = "format: DELIMITED schema { header: true } ";
  EXPECT_NE(refusal(delimited + "validation_column: 'time' validation_from: '1'").find("'time' is not one of the 2 "
                                                                                        "columns"),
            std::string::npos);
  EXPECT_NE(refusal(delimited + "validation_column: 'ts'").find("needs data.validation_from"), std::string::npos);
  EXPECT_NE(refusal(delimited + "validation_from: '1'").find("without data.validation_column"), std::string::npos);
  EXPECT_NE(refusal(delimited + "validation_column: 'ts' validation_from: '1' validation_every: 10")
                .find("and so does data.validation_every"),
            std::string::npos);
  EXPECT_NE(refusal("format: CRITEO validation_column: 'ts' validation_from: '1'").find("not DELIMITED"),
            std::string::npos);
}

}  // namespace
}  // namespace kestrel
