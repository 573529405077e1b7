// Fuzz target: the Criteo and libsvm line parsers (criteo_reader.h, libsvm_reader.h) and the sharded,
// resumable line reader that feeds them (record_reader.h).
//
// Input: a flags byte (bit 7: also read the files; bit 6: header lines; bits 2-5: the shuffle window, 0 = file
// order; bits 0-1: parts - 1), then two data files (FuzzInput::Bytes, then the rest). Every line of both is
// parsed directly by both parsers, and (bit 7) the files are read through each part's RecordReader. Invariants:
//   - a parsed Criteo line has a 0/1 label, missing integers read 0, and a categorical value is the missing
//     value exactly when its column is empty (a token must never alias a missing column);
//   - a parsed libsvm line has a 0/1 label and one finite value per index;
//   - every part's reader returns (parsed + skipped) exactly the lines of its share of CountDataLines, in
//     increasing position, and the parts together return every data line exactly once;
//   - a reader resumed from the position after any record returns exactly the lines that followed it.
#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/fuzz_input.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/libsvm_reader.h"
#include "worker/data/record_reader.h"

namespace kestrel {
namespace {

void CheckCriteoLine(absl::string_view line) {
  CriteoExample e;
  if (!ParseCriteoLine(line, &e).ok()) return;
  FUZZ_CHECK(e.label == 0.0f || e.label == 1.0f);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::vector<absl::string_view> columns = absl::StrSplit(line, '\t');
  FUZZ_CHECK(columns.size() == 1 + kCriteoIntegerFields + kCriteoCategoricalFields);
  for (int j = 0; j < kCriteoIntegerFields; ++j) {
    FUZZ_CHECK(e.integer_missing[j] == columns[1 + j].empty());
    if (e.integer_missing[j]) FUZZ_CHECK(e.integers[j] == 0);
  }
  for (int f = 0; f < kCriteoCategoricalFields; ++f) {
    const bool empty = columns[1 + kCriteoIntegerFields + f].empty();
    FUZZ_CHECK((e.categories[f] == kMissingValue) == empty, "a categorical token aliases the missing value");
  }
}

void CheckLibsvmLine(absl::string_view line) {
  LibsvmExample e;
  if (!ParseLibsvmLine(line, &e).ok()) return;
  FUZZ_CHECK(e.label == 0.0f || e.label == 1.0f);
  FUZZ_CHECK(e.indices.size() == e.values.size());
  for (float v : e.values) FUZZ_CHECK(std::isfinite(v));
}

// Every line `lines` returns, with its global index and the position after each.
struct Read {
  std::vector<std::string> lines;
  std::vector<uint64_t> globals;
  std::vector<ReaderPosition> after;
};

Read ReadAll(const std::vector<std::string>& files, const ReaderOptions& options, const ReaderPosition& start) {
  Read read;
  absl::StatusOr<ShardedLines> lines = ShardedLines::Open(files, options, start);
  FUZZ_CHECK(lines.ok());
  absl::string_view line;
  while (true) {
    absl::StatusOr<bool> more = lines->Next(&line);
    FUZZ_CHECK(more.ok());
    if (!*more) break;
    FUZZ_CHECK(!line.empty() && line.back() != '\n');
    read.lines.emplace_back(line);
    read.globals.push_back(lines->line());
    FUZZ_CHECK(read.after.empty() || lines->position().global_line > read.after.back().global_line,
               "a reader's lines are not in increasing position");
    read.after.push_back(lines->position());
  }
  return read;
}

// Reads part `part` through a RecordReader (malformed lines skipped): records + skipped lines.
template <typename Example>
uint64_t CountRecords(typename RecordReader<Example>::ParseFn parse, const std::vector<std::string>& files,
                      const ReaderOptions& options) {
  auto reader = RecordReader<Example>::Open(files, parse, options);
  FUZZ_CHECK(reader.ok());
  Example e;
  uint64_t records = 0;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&e);
    FUZZ_CHECK(more.ok(), "kSkip readers fail only on I/O");
    if (!*more) break;
    ++records;
  }
  return records + (*reader)->skipped();
}

}  // namespace
}  // namespace kestrel

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kestrel;  // NOLINT(build/namespaces): a fuzz entry point
  FuzzInput in(data, size);
  const uint8_t flags = in.U8();
  const int num_parts = 1 + flags % 4;
  const std::string first = in.Bytes();
  const std::string second = in.Rest();
  for (const std::string* contents : {&first, &second}) {
    for (absl::string_view line : absl::StrSplit(*contents, '\n')) {
      CheckCriteoLine(line);
      CheckLibsvmLine(line);
    }
  }
  if ((flags & 0x80) == 0) return 0;  // the parsers only: many more inputs a second

  const std::string dir = FuzzScratchDir() + "/data_line";
  std::filesystem::create_directories(dir);
  const std::vector<std::string> files = {dir + "/part-0", dir + "/part-1"};
  FuzzWriteFile(files[0], first);
  FuzzWriteFile(files[1], second);
  ReaderOptions base;
  base.on_error = ReaderOptions::OnError::kSkip;
  base.header = (flags & 0x40) != 0;
  base.shuffle_window = (flags >> 2) & 0x0f;
  base.shuffle_seed = flags;
  base.epoch = flags & 1;
  absl::StatusOr<uint64_t> data_lines = CountDataLines(files, base.header);
  FUZZ_CHECK(data_lines.ok());
  std::set<uint64_t> globals;
  for (int s = 0; s < num_parts; ++s) {
    ReaderOptions options = base;
    options.part = s;
    options.num_parts = num_parts;
    const uint64_t share = ShareOf(options).CountBelow(*data_lines);
    const Read read = ReadAll(files, options, {});
    FUZZ_CHECK(read.lines.size() == share, "CountDataLines disagrees with the reader");
    FUZZ_CHECK(CountRecords<CriteoExample>(&ParseCriteoLine, files, options) == share);
    FUZZ_CHECK(CountRecords<LibsvmExample>(&ParseLibsvmLine, files, options) == share);
    for (uint64_t g : read.globals) FUZZ_CHECK(g < *data_lines && globals.insert(g).second, "a line read twice");
    // Resuming after record k returns exactly records k+1, ... (checked for a few k).
    for (size_t k = 0; k < read.lines.size(); k += 1 + read.lines.size() / 2) {
      const Read rest = ReadAll(files, options, read.after[k]);
      FUZZ_CHECK(rest.lines.size() == read.lines.size() - k - 1, "a resumed reader lost or repeated lines");
      for (size_t i = 0; i < rest.lines.size(); ++i) FUZZ_CHECK(rest.lines[i] == read.lines[k + 1 + i]);
    }
  }
  FUZZ_CHECK(globals.size() == *data_lines, "the parts' lines do not add up to the whole");
  return 0;
}
