// Records (proto/records.proto) written by RecordWriter read back equal, with today's keys and plain JSON
// numbers; a done record carries the phases object.
#include "worker/records.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

using google::protobuf::util::MessageDifferencer;

std::string TmpDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

Record TrainRecord() {
  Record r;
  r.set_kind("train");
  r.set_worker(0);  // 0 is still written: every field has presence
  r.set_step(100);
  r.set_steps(1000);
  r.set_logloss(0.4712);
  r.set_examples_per_second(51234.5);
  return r;
}

Record EvalRecord() {
  Record r;
  r.set_kind("eval");
  r.set_worker(0);
  r.set_step(1000);
  r.set_examples(5000);
  r.set_logloss(0.45);
  r.set_auc(0.79);
  r.set_examples_per_second(250000);
  r.set_fingerprint(FingerprintHex(0x9f86d081884c7d65));
  return r;
}

Record DoneRecord() {
  Record r;
  r.set_kind("done");
  r.set_worker(1);
  r.set_steps(1000);
  r.set_examples(4096000000);  // above 2^31: still an exact JSON number
  r.set_seconds(5.125);
  r.set_examples_per_second(50196.1);
  PhaseSeconds* p = r.mutable_phases();
  p->set_read(0.5);
  p->set_batch(0.25);
  p->set_pull(1.0);
  p->set_compute(2.5);
  p->set_push(0.75);
  p->set_wait(0);
  return r;
}

TEST(RecordsTest, LinesKeepTheFieldNamesAndPrintNumbersAsNumbers) {
  EXPECT_EQ(RecordJson(TrainRecord()),
            R"({"kind":"train","worker":0,"step":100,"steps":1000,"logloss":0.4712,)"
            R"("examples_per_second":51234.5})");
  EXPECT_EQ(RecordJson(EvalRecord()),
            R"({"kind":"eval","worker":0,"step":1000,"examples":5000,"logloss":0.45,"auc":0.79,)"
            R"("examples_per_second":250000,"fingerprint":"9f86d081884c7d65"})");
  EXPECT_EQ(RecordJson(DoneRecord()),
            R"({"kind":"done","worker":1,"steps":1000,"examples":4096000000,"examples_per_second":50196.1,)"
            R"("seconds":5.125,)"
            R"("phases":{"read":0.5,"batch":0.25,"pull":1,"compute":2.5,"push":0.75,"wait":0}})");
  EXPECT_EQ(FingerprintHex(0x1f), "000000000000001f");
}

TEST(RecordsTest, WriterLinesParseBackEqual) {
  const std::string path = TmpDir() + "/records_roundtrip.jsonl";
  std::remove(path.c_str());
  const std::vector<Record> written = {TrainRecord(), EvalRecord(), DoneRecord()};
  {
    RecordWriter writer(path);
    for (const Record& r : written) writer.Write(r);
  }
  std::ifstream in(path);
  std::string line;
  size_t i = 0;
  while (std::getline(in, line)) {
    ASSERT_LT(i, written.size());
    // With protobuf's own parser, as any consumer would, and with ParseRecord.
    Record direct;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(line, &direct).ok()) << line;
    EXPECT_TRUE(MessageDifferencer::Equals(direct, written[i])) << line;
    absl::StatusOr<Record> parsed = ParseRecord(line);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_TRUE(MessageDifferencer::Equals(*parsed, written[i])) << line;
    ++i;
  }
  EXPECT_EQ(i, written.size());
  // Appends: a second writer adds to the same file.
  { RecordWriter(path).Write(TrainRecord()); }
  std::ifstream again(path);
  int lines = 0;
  while (std::getline(again, line)) ++lines;
  EXPECT_EQ(lines, 4);
}

TEST(RecordsTest, DoneRecordHasEveryPhaseEvenWhenZero) {
  Record r;
  r.set_kind("done");
  PhaseSeconds* p = r.mutable_phases();
  for (auto set : {&PhaseSeconds::set_read, &PhaseSeconds::set_batch, &PhaseSeconds::set_pull,
                   &PhaseSeconds::set_compute, &PhaseSeconds::set_push, &PhaseSeconds::set_wait}) {
    (p->*set)(0);
  }
  EXPECT_EQ(RecordJson(r),
            R"({"kind":"done","phases":{"read":0,"batch":0,"pull":0,"compute":0,"push":0,"wait":0}})");
  absl::StatusOr<Record> back = ParseRecord(RecordJson(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->phases().has_wait());
}

TEST(RecordsTest, NonFiniteNumbersAndBadLines) {
  Record r;
  r.set_kind("train");
  r.set_logloss(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(RecordJson(r), R"({"kind":"train","logloss":"NaN"})");
  absl::StatusOr<Record> back = ParseRecord(RecordJson(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(std::isnan(back->logloss()));

  for (const std::string line : {"", "{", R"({"kind":"train","no_such_field":1})", R"({"step":"x"})"}) {
    absl::StatusOr<Record> bad = ParseRecord(line);
    ASSERT_FALSE(bad.ok()) << line;
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find("not a record"), absl::string_view::npos) << bad.status();
  }
}

// Run in an empty directory: nothing appears in it (nor anywhere a relative path would lead).
TEST(RecordsTest, AnEmptyPathWritesNothing) {
  const std::filesystem::path dir = std::filesystem::path(TmpDir()) / "records_empty_path";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(std::filesystem::create_directories(dir));
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  {
    RecordWriter writer("");
    writer.Write(TrainRecord());
    writer.Write(DoneRecord());
  }
  std::filesystem::current_path(cwd);
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << std::filesystem::directory_iterator(dir)->path();
}

// A run's records file starts empty unless appended to; one that cannot be created is named.
TEST(RecordsTest, StartRecordFileEmptiesTheFileUnlessAppending) {
  const std::string path = TmpDir() + "/records_start.jsonl";
  std::ofstream(path) << "earlier run\n";
  ASSERT_TRUE(StartRecordFile(path, /*append=*/true).ok());
  EXPECT_EQ(std::filesystem::file_size(path), 12u);
  ASSERT_TRUE(StartRecordFile(path, /*append=*/false).ok());
  EXPECT_EQ(std::filesystem::file_size(path), 0u);
  EXPECT_TRUE(StartRecordFile("", false).ok());
  const absl::Status bad = StartRecordFile(TmpDir() + "/no_such_dir/records.jsonl", false);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("no_such_dir/records.jsonl"), absl::string_view::npos) << bad;
}

// Predictions read back bit-exact, one per line, in order.
TEST(RecordsTest, PredictionsReadBackBitExact) {
  const std::string path = TmpDir() + "/predictions.txt";
  const std::vector<float> probs = {0.5f, 1e-7f, 0.123456789f, 0.99999994f};
  ASSERT_TRUE(WritePredictions(path, probs).ok());
  std::ifstream in(path);
  std::vector<float> back;
  for (std::string line; std::getline(in, line);) back.push_back(std::strtof(line.c_str(), nullptr));
  EXPECT_EQ(back, probs);
  EXPECT_EQ(WritePredictions(TmpDir() + "/no_such_dir/p.txt", probs).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kestrel
