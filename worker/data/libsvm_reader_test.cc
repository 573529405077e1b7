#include "worker/data/libsvm_reader.h"

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

using ::testing::HasSubstr;

TEST(LibsvmReaderTest, ParsesLabelsFeaturesAndComments) {
  LibsvmExample e;
  ASSERT_TRUE(ParseLibsvmLine("+1 3:0.5 10:-2 # a comment", &e).ok());
  EXPECT_EQ(e.label, 1.0f);
  EXPECT_EQ(e.indices, (std::vector<uint64_t>{3, 10}));
  EXPECT_EQ(e.values, (std::vector<float>{0.5f, -2.0f}));
  ASSERT_TRUE(ParseLibsvmLine("-1 qid:7 1:1", &e).ok());
  EXPECT_EQ(e.label, 0.0f);
  EXPECT_EQ(e.indices, (std::vector<uint64_t>{1}));
  ASSERT_TRUE(ParseLibsvmLine("0", &e).ok()) << "no features is fine";
  EXPECT_TRUE(e.indices.empty());
  for (const char* bad : {"x 1:1", "1 a:1", "1 1:nan", "1 1", "1 -3:1"}) {
    EXPECT_EQ(ParseLibsvmLine(bad, &e).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(LibsvmReaderTest, ReadsShardsAndNamesBadLines) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/data.svm";
  std::ofstream(path) << "1 1:1\n0 2:1\n\n1 9:1\n1 3:1\n1 oops\n0 5:1\n";
  ReaderOptions options;
  options.num_parts = 2;
  options.part = 1;  // data lines 1, 3, 5 (blank lines are not data lines)
  auto reader = *OpenLibsvmReader({path}, options);
  LibsvmExample e;
  ASSERT_TRUE(*reader->Next(&e));
  EXPECT_EQ(e.indices[0], 2u);
  ASSERT_TRUE(*reader->Next(&e));
  EXPECT_EQ(e.indices[0], 3u);
  ASSERT_TRUE(*reader->Next(&e));
  EXPECT_EQ(e.indices[0], 5u);
  EXPECT_FALSE(*reader->Next(&e));
  auto strict = *OpenLibsvmReader({path});
  absl::StatusOr<bool> more;
  while ((more = strict->Next(&e)).ok() && *more) {
  }
  EXPECT_THAT(std::string(more.status().message()), HasSubstr(path + ":6: feature 'oops'"));
}

}  // namespace
}  // namespace kestrel
