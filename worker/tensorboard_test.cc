// EventWriter / ReadEventFile: round trip of scalars, TensorBoard's file naming, TFRecord framing checked against
// a record built by hand with an independent CRC-32C, and detection of corrupted or truncated files.
#include "worker/tensorboard.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/tensorboard_test/", name);
  fs::remove_all(dir);
  return dir;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

double Seconds(absl::Time t) { return absl::ToDoubleSeconds(t - absl::UnixEpoch()); }

// Bit-at-a-time CRC-32C (reflected polynomial 0x82F63B78), independent of common/crc32c.
uint32_t ReferenceCrc32c(const std::string& s) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : s) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

uint32_t ReferenceMask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string LittleEndian(uint64_t v, int bytes) {
  std::string s;
  for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

// Writes a file of the file_version event plus three steps of three scalars; returns its path.
std::string WriteSampleFile(const std::string& dir) {
  auto writer = EventWriter::Open(dir, "sample");
  EXPECT_TRUE(writer.ok()) << writer.status();
  for (int step = 0; step < 3; ++step) {
    const TensorBoardScalar scalars[] = {{"loss", 0.5f / (step + 1)}, {"auc", 0.7f}, {"samples_per_sec", 1e5f}};
    EXPECT_TRUE((*writer)->AddScalars(step, scalars, absl::FromUnixSeconds(1700000000 + step)).ok());
  }
  return (*writer)->path();  // the destructor flushes
}

TEST(TensorBoardTest, ScalarsRoundTrip) {
  const std::string dir = TestDir("round_trip") + "/nested/run1";  // created like mkdir -p
  const absl::Time before = absl::Now();
  auto writer = EventWriter::Open(dir, "worker0");
  ASSERT_TRUE(writer.ok()) << writer.status();
  EventWriter& w = **writer;

  const absl::Time t0 = absl::FromUnixMicros(1700000000123456);
  for (int64_t step = 0; step < 4; ++step) {
    const TensorBoardScalar scalars[] = {
        {"train/loss", 0.75f - 0.125f * step},
        {"train/auc", 0.5f + 0.0625f * step},
        {"train/samples_per_sec", 123456.5f * (step + 1)},
        {"zero", 0.0f},  // must still be written: TensorBoard ignores a Value without a value
    };
    ASSERT_TRUE(w.AddScalars(step * 100, scalars, t0 + absl::Seconds(step)).ok());
  }
  ASSERT_TRUE(w.AddScalar(1000, "eval/auc", -1.25f).ok());
  ASSERT_TRUE(w.Flush().ok());
  const absl::Time after = absl::Now();

  // Read while the writer is open: Flush() put everything in the file.
  auto events = ReadEventFile(w.path());
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 6u);

  const tensorboard::Event& first = (*events)[0];
  EXPECT_EQ(first.what_case(), tensorboard::Event::kFileVersion);
  EXPECT_EQ(first.file_version(), "brain.Event:2");
  EXPECT_EQ(first.step(), 0);
  EXPECT_GE(first.wall_time(), Seconds(before));
  EXPECT_LE(first.wall_time(), Seconds(after));

  for (int64_t step = 0; step < 4; ++step) {
    const tensorboard::Event& e = (*events)[1 + step];
    EXPECT_EQ(e.step(), step * 100);
    EXPECT_EQ(e.wall_time(), Seconds(t0 + absl::Seconds(step)));
    EXPECT_NEAR(e.wall_time(), 1700000000.123456 + step, 1e-6);
    ASSERT_EQ(e.what_case(), tensorboard::Event::kSummary);
    ASSERT_EQ(e.summary().value_size(), 4);
    const auto& v = e.summary().value();
    EXPECT_EQ(v[0].tag(), "train/loss");
    EXPECT_EQ(v[0].simple_value(), 0.75f - 0.125f * step);
    EXPECT_EQ(v[1].tag(), "train/auc");
    EXPECT_EQ(v[1].simple_value(), 0.5f + 0.0625f * step);
    EXPECT_EQ(v[2].tag(), "train/samples_per_sec");
    EXPECT_EQ(v[2].simple_value(), 123456.5f * (step + 1));
    EXPECT_EQ(v[3].tag(), "zero");
    EXPECT_EQ(v[3].value_case(), tensorboard::Summary::Value::kSimpleValue);
    EXPECT_EQ(v[3].simple_value(), 0.0f);
  }
  const tensorboard::Event& last = (*events)[5];
  EXPECT_EQ(last.step(), 1000);
  EXPECT_GE(last.wall_time(), Seconds(before));
  EXPECT_LE(last.wall_time(), Seconds(after));
  ASSERT_EQ(last.summary().value_size(), 1);
  EXPECT_EQ(last.summary().value(0).tag(), "eval/auc");
  EXPECT_EQ(last.summary().value(0).simple_value(), -1.25f);

  // Buffered without Flush(), then written by the destructor.
  ASSERT_TRUE(w.AddScalar(1001, "eval/auc", 0.875f).ok());
  const std::string path = w.path();
  writer->reset();
  events = ReadEventFile(path);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 7u);
  EXPECT_EQ((*events)[6].step(), 1001);
  EXPECT_EQ((*events)[6].summary().value(0).simple_value(), 0.875f);
}

TEST(TensorBoardTest, FileNameFollowsTensorBoardNaming) {
  const std::string dir = TestDir("naming");
  const int64_t before = absl::ToUnixSeconds(absl::Now());
  auto writer = EventWriter::Open(dir, "worker3");
  ASSERT_TRUE(writer.ok()) << writer.status();
  const int64_t after = absl::ToUnixSeconds(absl::Now());

  char host[256] = {0};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  const fs::path path((*writer)->path());
  EXPECT_EQ(path.parent_path().string(), dir);
  std::smatch m;
  const std::string name = path.filename().string();
  ASSERT_TRUE(std::regex_match(name, m, std::regex(R"(events\.out\.tfevents\.(\d{10})\.(.+)\.(\d+)\.worker3)")))
      << name;
  EXPECT_GE(std::stoll(m[1]), before);
  EXPECT_LE(std::stoll(m[1]), after);
  EXPECT_EQ(m[2], std::string(host));
  EXPECT_EQ(std::stoll(m[3]), static_cast<long long>(getpid()));
  EXPECT_TRUE(fs::is_regular_file(path));

  // No suffix: no trailing dot. (Another second or another suffix, so no clash with the first file.)
  auto plain = EventWriter::Open(dir, "");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE(std::regex_match(fs::path((*plain)->path()).filename().string(),
                               std::regex(R"(events\.out\.tfevents\.\d{10}\..+\.\d+)")));
  EXPECT_NE(fs::path((*plain)->path()).filename().string().back(), '.');

  auto bad = EventWriter::Open(dir, "a/b");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
}

TEST(TensorBoardTest, IoErrorsNameThePath) {
  const std::string dir = TestDir("io_errors");
  fs::create_directories(dir);
  const std::string file = dir + "/plain_file";
  WriteBytes(file, "x");
  auto writer = EventWriter::Open(file + "/logs", "w");
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.status().message().find(file + "/logs"), std::string::npos) << writer.status();

  auto events = ReadEventFile(dir + "/missing");
  EXPECT_EQ(events.status().code(), absl::StatusCode::kNotFound) << events.status();
  EXPECT_NE(events.status().message().find(dir + "/missing"), std::string::npos) << events.status();
}

TEST(TensorBoardTest, WritesAfterCloseFail) {
  auto writer = EventWriter::Open(TestDir("close"), "w");
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->AddScalar(1, "loss", 1.0f).ok());
  ASSERT_TRUE((*writer)->Close().ok());
  EXPECT_TRUE((*writer)->Close().ok());
  const absl::Status s = (*writer)->AddScalar(2, "loss", 0.5f);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find((*writer)->path()), std::string::npos) << s;
  auto events = ReadEventFile((*writer)->path());
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(events->size(), 2u);
}

TEST(TensorBoardTest, LargeBufferIsFlushedWithoutAnExplicitFlush) {
  auto writer = EventWriter::Open(TestDir("auto_flush"), "w");
  ASSERT_TRUE(writer.ok()) << writer.status();
  const auto size0 = fs::file_size((*writer)->path());
  for (int step = 0; step < 5000; ++step) ASSERT_TRUE((*writer)->AddScalar(step, "loss", 0.25f).ok());
  EXPECT_GT(fs::file_size((*writer)->path()), size0 + (32 << 10));
}

// The writer's record of a known event equals the bytes built here by hand: protobuf encoding by hand, CRC-32C
// computed bit by bit, masked by the TFRecord formula.
TEST(TensorBoardTest, RecordBytesMatchAnIndependentEncoding) {
  ASSERT_EQ(ReferenceCrc32c("123456789"), 0xE3069283u);  // the reference CRC itself is right

  // Event { wall_time: 1.5 step: 7 summary { value { tag: "a" simple_value: 0.5 } } }
  const std::string value = std::string("\x0a\x01" "a" "\x15", 4) + LittleEndian(0x3F000000u, 4);  // 0.5f
  const std::string summary = std::string("\x0a", 1) + static_cast<char>(value.size()) + value;
  const std::string event = std::string("\x09", 1) + LittleEndian(0x3FF8000000000000u, 8)  // 1.5 (double)
                            + std::string("\x10\x07", 2)                                     // step 7
                            + std::string("\x2a", 1) + static_cast<char>(summary.size()) + summary;
  ASSERT_EQ(event.size(), 23u);
  const std::string length = LittleEndian(event.size(), 8);
  const std::string expected_record = length + LittleEndian(ReferenceMask(ReferenceCrc32c(length)), 4) + event +
                                      LittleEndian(ReferenceMask(ReferenceCrc32c(event)), 4);
  EXPECT_EQ(expected_record.size(), 8u + 4 + 23 + 4);

  std::string framed;
  AppendTfRecord(event, &framed);
  EXPECT_EQ(framed, expected_record);

  auto writer = EventWriter::Open(TestDir("known_record"), "w");
  ASSERT_TRUE(writer.ok()) << writer.status();
  const TensorBoardScalar scalar{"a", 0.5f};
  ASSERT_TRUE((*writer)->AddScalars(7, absl::MakeConstSpan(&scalar, 1), absl::FromUnixMillis(1500)).ok());
  ASSERT_TRUE((*writer)->Close().ok());
  const std::string bytes = ReadBytes((*writer)->path());
  ASSERT_GT(bytes.size(), expected_record.size());
  EXPECT_EQ(bytes.substr(bytes.size() - expected_record.size()), expected_record);

  // The first record is the file_version event, framed the same way.
  const uint64_t first_length = static_cast<unsigned char>(bytes[0]);
  const std::string first_data = bytes.substr(12, first_length);
  EXPECT_NE(first_data.find("brain.Event:2"), std::string::npos);
  EXPECT_EQ(bytes.substr(0, 12 + first_length + 4),
            LittleEndian(first_length, 8) + LittleEndian(ReferenceMask(ReferenceCrc32c(LittleEndian(first_length, 8))), 4) +
                first_data + LittleEndian(ReferenceMask(ReferenceCrc32c(first_data)), 4));
}

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    original_path_ = WriteSampleFile(TestDir("corruption_src"));
    bytes_ = ReadBytes(original_path_);
    auto records = ReadTfRecordFile(original_path_);
    ASSERT_TRUE(records.ok()) << records.status();
    ASSERT_EQ(records->size(), 4u);
    size_t offset = 0;
    for (const std::string& r : *records) {
      starts_.push_back(offset);
      offset += 12 + r.size() + 4;
    }
    ASSERT_EQ(offset, bytes_.size());
    starts_.push_back(offset);
    const std::string dir = TestDir("corruption");
    fs::create_directories(dir);
    path_ = dir + "/events.out.tfevents.corrupt";
  }

  // Writes `bytes` to path_ and expects DataLoss naming the path and `record`.
  void ExpectDataLoss(const std::string& bytes, int record, const std::string& what) {
    WriteBytes(path_, bytes);
    auto events = ReadEventFile(path_);
    ASSERT_FALSE(events.ok()) << what;
    EXPECT_EQ(events.status().code(), absl::StatusCode::kDataLoss) << what << ": " << events.status();
    EXPECT_NE(events.status().message().find(path_), std::string::npos) << events.status();
    EXPECT_NE(events.status().message().find(absl::StrCat("record ", record, " ")), std::string::npos)
        << what << ": " << events.status();
  }

  std::string original_path_, path_, bytes_;
  std::vector<size_t> starts_;  // offset of each record, then the file size
};

TEST_F(CorruptionTest, FlippedLengthByteIsDetected) {
  for (int record = 0; record < 4; ++record) {
    for (int i = 0; i < 8; ++i) {
      std::string bad = bytes_;
      bad[starts_[record] + i] ^= 0x01;
      ExpectDataLoss(bad, record, absl::StrCat("length byte ", i, " of record ", record));
    }
  }
}

TEST_F(CorruptionTest, FlippedDataOrCrcByteIsDetected) {
  for (int record = 0; record < 4; ++record) {
    for (size_t pos = starts_[record] + 8; pos < starts_[record + 1]; ++pos) {  // length CRC, data, data CRC
      std::string bad = bytes_;
      bad[pos] ^= 0x40;
      ExpectDataLoss(bad, record, absl::StrCat("byte ", pos, " of record ", record));
    }
  }
}

TEST_F(CorruptionTest, TruncationIsDetected) {
  for (size_t size = 0; size < bytes_.size(); ++size) {
    const auto next = std::upper_bound(starts_.begin(), starts_.end(), size);
    const int record = static_cast<int>(next - starts_.begin()) - 1;  // record containing byte `size`
    if (starts_[record] == size) {
      // A cut between records is a shorter, valid file.
      WriteBytes(path_, bytes_.substr(0, size));
      auto events = ReadEventFile(path_);
      ASSERT_TRUE(events.ok()) << size << ": " << events.status();
      EXPECT_EQ(events->size(), static_cast<size_t>(record));
    } else {
      ExpectDataLoss(bytes_.substr(0, size), record, absl::StrCat("truncated to ", size));
    }
  }
  WriteBytes(path_, bytes_);
  EXPECT_TRUE(ReadEventFile(path_).ok());
}

}  // namespace
}  // namespace kestrel
