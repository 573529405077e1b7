// The line reader shared out in parts: data lines (headers and blank lines aside), shuffled windows, shares and resuming.
#include "worker/data/record_reader.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/test_seed.h"
#include "gtest/gtest.h"
#include "worker/data/line_shuffle.h"

namespace kestrel {
namespace {

std::string WriteFile(const std::string& name, const std::string& contents) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

// `lines` data lines "d<i>" over two files, each with the header line "h" when `header`; blank lines ("" and
// "\r") among them.
std::vector<std::string> DataFiles(const std::string& name, int lines, bool header) {
  std::string first = header ? "h\n" : "", second = header ? "h\r\n" : "";
  for (int i = 0; i < lines; ++i) {
    std::string& out = i < lines / 3 ? first : second;
    if (i % 7 == 3) out += "\n";
    if (i % 11 == 5) out += "\r\n";
    absl::StrAppend(&out, "d", i, "\n");
  }
  if (!second.empty() && lines % 2 == 1) second.pop_back();  // a last line without a newline
  return {WriteFile(name + ".0", first), WriteFile(name + ".1", second)};
}

struct Line {
  std::string text;
  uint64_t global = 0;
  ReaderPosition after;
};

std::vector<Line> ReadAll(const std::vector<std::string>& files, const ReaderOptions& options,
                          const ReaderPosition& start = {}) {
  std::vector<Line> out;
  absl::StatusOr<ShardedLines> lines = ShardedLines::Open(files, options, start);
  EXPECT_TRUE(lines.ok()) << lines.status();
  if (!lines.ok()) return out;
  absl::string_view line;
  while (true) {
    absl::StatusOr<bool> more = lines->Next(&line);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    out.push_back({std::string(line), lines->line(), lines->position()});
  }
  return out;
}

std::vector<std::string> Texts(const std::vector<Line>& lines) {
  std::vector<std::string> out;
  for (const Line& l : lines) out.push_back(l.text);
  return out;
}

TEST(LineShuffleTest, PermutesEachWindowInPlaceByItsSeedAndEpoch) {
  const TestSeed seed;
  std::mt19937_64 rng(seed.value());
  for (int trial = 0; trial < 40; ++trial) {
    const uint64_t window = 1 + rng() % (trial < 20 ? 40 : 5000);
    const uint64_t lines = 1 + rng() % window;  // a last window, possibly partial
    const uint64_t start = window * (rng() % 1000);
    const LineShuffle shuffle(window, rng(), static_cast<int64_t>(rng() % 10));
    std::vector<bool> seen(lines, false);
    for (uint64_t i = 0; i < lines; ++i) {
      const uint64_t p = shuffle.Position(start + i, lines);
      ASSERT_GE(p, start);
      ASSERT_LT(p, start + lines) << "window " << window << " of " << lines << " lines";
      ASSERT_FALSE(seen[p - start]) << "position " << p << " twice";
      seen[p - start] = true;
    }
  }
  // Pure: the same inputs give the same order; the epoch, the seed and the window change it.
  const LineShuffle a(1000, 7, 0), again(1000, 7, 0), next_epoch(1000, 7, 1), other_seed(1000, 8, 0);
  int moved = 0, differs_epoch = 0, differs_seed = 0, differs_window = 0;
  for (uint64_t line = 0; line < 1000; ++line) {
    EXPECT_EQ(a.Position(line, 1000), again.Position(line, 1000));
    moved += a.Position(line, 1000) != line;
    differs_epoch += a.Position(line, 1000) != next_epoch.Position(line, 1000);
    differs_seed += a.Position(line, 1000) != other_seed.Position(line, 1000);
    differs_window += a.Position(line, 1000) - 0 != a.Position(line + 1000, 1000) - 1000;
  }
  EXPECT_GT(moved, 900);
  EXPECT_GT(differs_epoch, 900);
  EXPECT_GT(differs_seed, 900);
  EXPECT_GT(differs_window, 900);
}

TEST(RecordReaderTest, HeaderAndBlankLinesAreNotDataLines) {
  const std::vector<std::string> files = DataFiles("header", 20, /*header=*/true);
  EXPECT_EQ(*CountDataLines(files, /*header=*/true), 20u);
  EXPECT_EQ(*CountDataLines(files, /*header=*/false), 22u) << "the header lines read as data";
  ReaderOptions options;
  options.header = true;
  const std::vector<Line> all = ReadAll(files, options);
  ASSERT_EQ(all.size(), 20u);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].text, absl::StrCat("d", i));
    EXPECT_EQ(all[i].global, i);
  }
  options.num_parts = 3;
  options.part = 1;
  EXPECT_EQ(Texts(ReadAll(files, options)), (std::vector<std::string>{"d1", "d4", "d7", "d10", "d13", "d16", "d19"}));
  EXPECT_EQ(ShareOf(options).CountBelow(20), 7u);
  // "file:line" counts every line of the file: the header, d0 .. d2, a blank line before d3.
  auto lines = *ShardedLines::Open(files, ReaderOptions{.header = true}, {});
  absl::string_view line;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(*lines.Next(&line));
  EXPECT_EQ(line, "d4");
  EXPECT_EQ(lines.Where(), files[0] + ":7");
  EXPECT_EQ(CountDataLines({"/nonexistent"}, false).status().code(), absl::StatusCode::kNotFound);
}

TEST(RecordReaderTest, AHeldOutValidationSplitTakesItsLinesOutOfTrainingEveryTime) {
  const std::vector<std::string> files = DataFiles("holdout", 200, /*header=*/true);
  ReaderOptions training;
  training.header = true;
  training.holdout.every = 5;
  ReaderOptions validation = training;
  validation.holdout.validation = true;
  const std::vector<std::string> trained = Texts(ReadAll(files, training));
  const std::vector<std::string> validated = Texts(ReadAll(files, validation));
  EXPECT_EQ(trained.size() + validated.size(), 200u);
  EXPECT_GT(validated.size(), 20u) << "about one line in 5";
  EXPECT_LT(validated.size(), 60u);
  std::set<std::string> all(trained.begin(), trained.end());
  for (const std::string& v : validated) EXPECT_TRUE(all.insert(v).second) << v << " is on both sides";
  EXPECT_EQ(all.size(), 200u);
  EXPECT_EQ(*CountDataLines(files, /*header=*/true, training.holdout), trained.size());
  EXPECT_EQ(*CountDataLines(files, /*header=*/true, validation.holdout), validated.size());
  // The training lines are numbered among themselves, and sharding deals them as any data lines.
  const std::vector<Line> numbered = ReadAll(files, training);
  for (size_t i = 0; i < numbered.size(); ++i) EXPECT_EQ(numbered[i].global, i);
  training.num_parts = 2;
  training.part = 1;
  std::vector<std::string> odd;
  for (size_t i = 1; i < trained.size(); i += 2) odd.push_back(trained[i]);
  EXPECT_EQ(Texts(ReadAll(files, training)), odd);
  EXPECT_EQ(Texts(ReadAll(files, validation)), validated) << "the same lines every time";
}

// Every part count and share layout: the parts' lines together are every data line once; each part returns
// its lines in increasing position; merged by position, they are the same sequence whatever the part count.
TEST(RecordReaderTest, ShuffledShardsReadEveryLineOnceInAnOrderIndependentOfTheShardCount) {
  const int kLines = 103;  // windows of 10: the last holds 3
  const std::vector<std::string> files = DataFiles("shuffled", kLines, /*header=*/true);
  ReaderOptions base;
  base.header = true;
  base.shuffle_window = 10;
  base.shuffle_seed = 42;
  std::vector<std::string> reference;
  for (int parts = 1; parts <= 3; ++parts) {
    std::map<uint64_t, std::string> by_position;
    std::set<std::string> seen;
    for (int part = 0; part < parts; ++part) {
      ReaderOptions options = base;
      options.part = part;
      options.num_parts = parts;
      const std::vector<Line> read = ReadAll(files, options);
      EXPECT_EQ(read.size(), ShareOf(options).CountBelow(kLines));
      uint64_t last = 0;
      for (const Line& l : read) {
        const uint64_t position = l.after.global_line - 1;
        EXPECT_EQ(position % parts, static_cast<uint64_t>(part));
        EXPECT_TRUE(by_position.empty() || position > last);
        last = position;
        EXPECT_EQ(l.text, absl::StrCat("d", l.global));
        EXPECT_EQ(LineShuffle(10, 42, 0).Position(l.global, l.global >= 100 ? 3 : 10), position);
        EXPECT_TRUE(seen.insert(l.text).second) << l.text << " twice";
        by_position[position] = l.text;
      }
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(kLines)) << parts << " parts";
    std::vector<std::string> order;
    for (const auto& [position, text] : by_position) order.push_back(text);
    if (parts == 1) reference = order;
    EXPECT_EQ(order, reference) << parts << " parts";
  }
  ASSERT_EQ(reference.size(), static_cast<size_t>(kLines));
  // Windows stay in place: the first ten positions hold d0 .. d9 in some order.
  std::vector<std::string> first(reference.begin(), reference.begin() + 10);
  std::sort(first.begin(), first.end());
  EXPECT_EQ(first, (std::vector<std::string>{"d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7", "d8", "d9"}));
  // The same on a rerun; another epoch, another order.
  EXPECT_EQ(Texts(ReadAll(files, base)), reference);
  ReaderOptions next = base;
  next.epoch = 1;
  const std::vector<std::string> second = Texts(ReadAll(files, next));
  EXPECT_NE(second, reference);
  EXPECT_EQ(std::set<std::string>(second.begin(), second.end()).size(), static_cast<size_t>(kLines));
}

// A reader resumed from the position after any line returns exactly the lines that followed: in file order and
// shuffled, plain parts and an explicit share.
TEST(RecordReaderTest, ResumesAfterAnyLineMidWindow) {
  const std::vector<std::string> files = DataFiles("resume", 57, /*header=*/false);
  LineAssignment share;  // a rescaled share: leftovers below 20, then every third line
  share.leftovers = {2, 5, 6, 11, 19};
  share.watermark = 20;
  share.index = 1;
  share.count = 3;
  for (uint64_t window : {0, 1, 8, 100}) {
    for (int variant = 0; variant < 3; ++variant) {
      ReaderOptions options;
      options.shuffle_window = window;
      options.shuffle_seed = 3;
      options.epoch = 2;
      if (variant == 1) {
        options.part = 1;
        options.num_parts = 2;
      } else if (variant == 2) {
        options.assignment = std::make_shared<LineAssignment>(share);
      }
      const std::vector<Line> all = ReadAll(files, options);
      ASSERT_EQ(all.size(), ShareOf(options).CountBelow(57)) << "window " << window << " variant " << variant;
      for (size_t k = 0; k < all.size(); ++k) {
        const std::vector<Line> rest = ReadAll(files, options, all[k].after);
        ASSERT_EQ(rest.size(), all.size() - k - 1) << "window " << window << " variant " << variant << " after " << k;
        for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i].text, all[k + 1 + i].text);
      }
    }
  }
  ReaderOptions shuffled;
  shuffled.shuffle_window = 8;
  ReaderPosition bad;
  bad.window_line = 5;  // not a window's first line
  bad.global_line = 6;
  EXPECT_EQ(ShardedLines::Open(files, shuffled, bad).status().code(), absl::StatusCode::kInvalidArgument);
}

// Lines of any length are kept whole while their window is held, lines longer than a buffer block among them.
TEST(RecordReaderTest, ShuffledLongLinesComeBackWhole) {
  std::string contents;
  std::vector<std::string> want;
  for (int i = 0; i < 12; ++i) {
    want.push_back(std::string(i % 4 == 1 ? (3 << 19) + i : 100 * i + 1, static_cast<char>('a' + i)));
    contents += want.back() + "\n";
  }
  const std::vector<std::string> files = {WriteFile("long", contents)};
  ReaderOptions options;
  options.shuffle_window = 5;
  std::vector<std::string> got = Texts(ReadAll(files, options));
  EXPECT_NE(got, want);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace kestrel
