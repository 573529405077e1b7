#include "worker/data/criteo_reader.h"

#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

using ::testing::HasSubstr;

std::string Line(int label, int first_integer, const std::string& first_token) {
  std::string line = std::to_string(label);
  for (int j = 0; j < 13; ++j) line += "\t" + (j == 0 ? std::to_string(first_integer) : (j == 5 ? "" : "7"));
  for (int f = 0; f < 26; ++f) line += "\t" + (f == 0 ? first_token : (f == 3 ? "" : "68fd1e64"));
  return line;
}

std::string WriteFile(const std::string& name, const std::vector<std::string>& lines, bool final_newline = true) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  std::ofstream out(path);
  for (size_t i = 0; i < lines.size(); ++i) {
    out << lines[i];
    if (i + 1 < lines.size() || final_newline) out << "\n";
  }
  return path;
}

std::vector<float> FirstIntegers(CriteoReader& reader) {
  std::vector<float> out;
  CriteoExample e;
  while (true) {
    auto more = reader.Next(&e);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    out.push_back(static_cast<float>(e.integers[0]));
  }
  return out;
}

TEST(CriteoReaderTest, ParsesValuesAndMissingColumns) {
  CriteoExample e;
  ASSERT_TRUE(ParseCriteoLine(Line(1, -3, "05db9164"), &e).ok());
  EXPECT_EQ(e.label, 1.0f);
  EXPECT_EQ(e.integers[0], -3);
  EXPECT_FALSE(e.integer_missing[0]);
  EXPECT_TRUE(e.integer_missing[5]);
  EXPECT_EQ(e.categories[0], 0x05db9164u);
  EXPECT_EQ(e.categories[3], kMissingValue);
  ASSERT_TRUE(ParseCriteoLine(Line(0, 1, "") + "\r", &e).ok()) << "CRLF line endings";
  EXPECT_EQ(e.categories[0], kMissingValue);
}

// The parser's fast paths accept and read exactly what absl::SimpleAtoi / SimpleHexAtoi do.
TEST(CriteoReaderTest, NumbersParseAsAbslDoes) {
  for (const std::string integer : {"0", "-0", "42", "-42", "+42", " 7", "7 ", "007", "123456789012345678",
                                    "1234567890123456789", "-9223372036854775808", "9223372036854775808",
                                    "99999999999999999999", "12a", "-", "+", "1.5", "0x10"}) {
    SCOPED_TRACE(integer);
    std::string line = "1\t" + integer;
    for (int j = 1; j < 13; ++j) line += "\t1";
    for (int f = 0; f < 26; ++f) line += "\tab";
    int64_t expected = 0;
    const bool valid = absl::SimpleAtoi(integer, &expected);
    CriteoExample e;
    const absl::Status status = ParseCriteoLine(line, &e);
    ASSERT_EQ(status.ok(), valid) << status;
    if (valid) { EXPECT_EQ(e.integers[0], expected); }
  }
  for (const std::string token : {"0", "ab", "AB", "aB09", "ffffffffffffffff", "0x1f", "0X1F", "+1f", " 1f",
                                  "1f ", "g1", "-1", "1.0", "fffffffffffffffff"}) {
    SCOPED_TRACE(token);
    std::string line = "0";
    for (int j = 0; j < 13; ++j) line += "\t1";
    line += "\t" + token;
    for (int f = 1; f < 26; ++f) line += "\tab";
    uint64_t expected = 0;
    const bool valid = token.size() <= 16 && absl::SimpleHexAtoi(token, &expected);
    CriteoExample e;
    const absl::Status status = ParseCriteoLine(line, &e);
    ASSERT_EQ(status.ok(), valid) << status;
    if (valid) { EXPECT_EQ(e.categories[0], expected); }
  }
}

TEST(CriteoReaderTest, ColumnCountsAreCounted) {
  CriteoExample e;
  std::string line = Line(1, 2, "aa");
  EXPECT_THAT(ParseCriteoLine(line + "\t", &e).message(), HasSubstr("found 41"));
  EXPECT_THAT(ParseCriteoLine(line + "\tx\ty", &e).message(), HasSubstr("found 42"));
  EXPECT_THAT(ParseCriteoLine(line.substr(0, line.rfind('\t')), &e).message(), HasSubstr("found 39"));
  EXPECT_THAT(ParseCriteoLine("", &e).message(), HasSubstr("found 1"));
}

TEST(CriteoReaderTest, MalformedLinesNameFileAndLineOrAreSkipped) {
  const std::string path = WriteFile("bad.tsv", {Line(0, 1, "aa"), Line(1, 2, "zz"), "1\t2", Line(2, 3, "aa"),
                                                 Line(1, 4, "bb")});
  auto strict = *OpenCriteoReader({path}, {});
  CriteoExample e;
  EXPECT_TRUE(*strict->Next(&e));
  auto bad = strict->Next(&e);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr(path + ":2: categorical feature C1 'zz'"));

  ReaderOptions skip;
  skip.on_error = ReaderOptions::OnError::kSkip;
  auto lenient = *OpenCriteoReader({path}, skip);
  EXPECT_EQ(FirstIntegers(*lenient), (std::vector<float>{1, 4}));
  EXPECT_EQ(lenient->skipped(), 3u);
  EXPECT_EQ(OpenCriteoReader({path + ".missing"}, {}).status().code(), absl::StatusCode::kNotFound);
}

TEST(CriteoReaderTest, ShardsByGlobalLineAndResumes) {
  std::vector<std::string> a, b;
  for (int i = 0; i < 5; ++i) a.push_back(Line(i % 2, i, "aa"));
  for (int i = 5; i < 12; ++i) b.push_back(Line(i % 2, i, "bb"));
  const std::vector<std::string> files = {WriteFile("a.tsv", a), WriteFile("b.tsv", b, /*final_newline=*/false)};
  // Three parts together read every line exactly once.
  std::vector<float> all;
  for (int s = 0; s < 3; ++s) {
    ReaderOptions options;
    options.part = s;
    options.num_parts = 3;
    auto reader = *OpenCriteoReader(files, options);
    for (float v : FirstIntegers(*reader)) {
      EXPECT_EQ(static_cast<int>(v) % 3, s);
      all.push_back(v);
    }
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all.size(), 12u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(all[i], i);

  // Stop after 7 examples, resume from the saved position, and get exactly the rest.
  auto first = *OpenCriteoReader(files, {});
  CriteoExample e;
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(*first->Next(&e));
  auto resumed = *OpenCriteoReader(files, {}, first->position());
  EXPECT_EQ(FirstIntegers(*resumed), (std::vector<float>{7, 8, 9, 10, 11}));
}

TEST(CriteoReaderTest, CountDataLinesMatchesWhatEachShardReads) {
  // Blank lines (also "\r") are not data lines; the last line has no newline.
  const std::vector<std::string> files = {
      WriteFile("c.tsv", {Line(0, 0, "aa"), "", Line(1, 2, "aa"), "\r", Line(0, 4, "aa")}),
      WriteFile("d.tsv", {Line(1, 5, "bb"), Line(0, 6, "bb")}, /*final_newline=*/false)};
  auto lines = CountDataLines(files, /*header=*/false);
  ASSERT_TRUE(lines.ok()) << lines.status();
  EXPECT_EQ(*lines, 5u);
  for (int s = 0; s < 2; ++s) {
    ReaderOptions options;
    options.part = s;
    options.num_parts = 2;
    EXPECT_EQ(ShareOf(options).CountBelow(*lines), FirstIntegers(**OpenCriteoReader(files, options)).size())
        << "part " << s;
  }
  EXPECT_EQ(CountDataLines({"/nonexistent"}, false).status().code(), absl::StatusCode::kNotFound);
}

TEST(CriteoReaderTest, ExplicitSharesReadTheirLinesAndAreCounted) {
  std::vector<std::string> lines;
  for (int i = 0; i < 13; ++i) lines.push_back(Line(i % 2, i, "aa"));
  lines.insert(lines.begin() + 5, "");  // blank: not a data line (line 5 is the record with integer 5)
  const std::vector<std::string> files = {WriteFile("e.tsv", lines)};
  // After a rescale: two workers' leftovers below line 8, then a modulo of 2 from there.
  std::vector<LineAssignment> shares(2);
  shares[0].leftovers = {1, 5};
  shares[1].leftovers = {3, 4};
  for (int v = 0; v < 2; ++v) {
    shares[v].watermark = 8;
    shares[v].index = v;
    shares[v].count = 2;
  }
  const uint64_t total = *CountDataLines(files, /*header=*/false);
  EXPECT_EQ(total, 13u);
  const std::vector<std::vector<float>> want = {{1, 5, 8, 10, 12}, {3, 4, 9, 11}};
  for (int v = 0; v < 2; ++v) {
    ReaderOptions options;
    options.assignment = std::make_shared<LineAssignment>(shares[v]);
    EXPECT_EQ(FirstIntegers(**OpenCriteoReader(files, options)), want[v]) << "share " << v;
    EXPECT_EQ(shares[v].CountBelow(total), want[v].size()) << "share " << v;
  }
  ReaderOptions bad;
  bad.assignment = std::make_shared<LineAssignment>(shares[0]);
  std::const_pointer_cast<LineAssignment>(bad.assignment)->leftovers = {9};  // not below the watermark
  EXPECT_EQ(OpenCriteoReader(files, bad).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kestrel
