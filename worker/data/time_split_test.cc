#include "worker/data/time_split.h"

#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace kestrel {
namespace {

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(TimeSplitTest, TheLastShareOfNumbersStartsAtItsFirstValue) {
  std::string text = "label,ts\n";
  for (int i = 100; i >= 1; --i) text += "1," + std::to_string(i) + "\n";  // 1..100, newest first
  text += "0,\n";                                                           // no value: skipped
  const std::string file = WriteFile("numbers.csv", text);
  absl::StatusOr<TimeSplit> split = TimeSplitFrom({file}, 1, ',', 10);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->from, "91");  // numbers, not bytes ("91" > "100" as bytes)
  EXPECT_EQ(split->lines, 100);
  EXPECT_EQ(split->held, 10);
  EXPECT_EQ(split->first, "1");
  EXPECT_EQ(split->last, "100");
}

TEST(TimeSplitTest, DatesSortAsTextAndEqualValuesStayTogether) {
  // 6 days, the last one with 5 lines: a tenth of 14 lines is 1, but the whole last day validates.
  const std::string file = WriteFile("dates.csv",
                                     "day,label\n2024-06-06,1\n2024-06-01,0\n2024-06-02,1\n2024-06-06,0\n"
                                     "2024-06-03,1\n2024-06-06,1\n2024-06-04,0\n2024-06-05,0\n2024-06-06,1\n"
                                     "\"2024-06-06\",0\n2024-06-02,1\n2024-06-03,0\n2024-06-04,1\n2024-06-05,0\n");
  absl::StatusOr<TimeSplit> split = TimeSplitFrom({file}, 0, ',', 10);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->from, "2024-06-06");
  EXPECT_EQ(split->held, 5);
}

TEST(TimeSplitTest, AColumnWithoutAnOrderToSplitIsRefused) {
  const std::string one = WriteFile("one.csv", "ts,label\n5,1\n5,0\n");
  EXPECT_EQ(TimeSplitFrom({one}, 0, ',', 10).status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string mixed = WriteFile("mixed.csv", "ts,label\n5,1\nmonday,0\n");
  absl::StatusOr<TimeSplit> split = TimeSplitFrom({mixed}, 0, ',', 10);
  EXPECT_EQ(split.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(split.status().message().find("numbers and text"), std::string::npos) << split.status();
  EXPECT_EQ(TimeSplitFrom({one + ".missing"}, 0, ',', 10).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(TimeSplitFrom({one}, 0, ',', 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TimeSplitTest, ALastShareOfTheFirstValueStartsAtTheNext) {
  // 9 lines of 1 and one of 2: the last tenth is the 2.
  std::string text = "ts\n";
  for (int i = 0; i < 9; ++i) text += "1\n";
  text += "2\n";
  absl::StatusOr<TimeSplit> split = TimeSplitFrom({WriteFile("skew.csv", text)}, 0, ',', 10);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->from, "2");
  EXPECT_EQ(split->held, 1);
  // 1 then nine 2s with every 2: half is 5, inside the 2s: the split starts at the first 2.
  text = "ts\n1\n";
  for (int i = 0; i < 9; ++i) text += "2\n";
  split = TimeSplitFrom({WriteFile("skew2.csv", text)}, 0, ',', 2);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->from, "2");
  EXPECT_EQ(split->held, 9);
}

}  // namespace
}  // namespace kestrel
