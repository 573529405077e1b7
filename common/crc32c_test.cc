#include "common/crc32c.h"

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common/test_seed.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

// Check values from RFC 3720 (iSCSI), appendix B.4, plus the standard "123456789" check value.
TEST(Crc32cTest, KnownValues) {
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string incrementing(32, '\0');
  for (int i = 0; i < 32; ++i) incrementing[i] = static_cast<char>(i);
  EXPECT_EQ(Crc32c(incrementing), 0x46DD794Eu);

  EXPECT_EQ(Crc32cExtendPortable(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32cExtend(0, nullptr, 0), 0u);
  EXPECT_EQ(Crc32cExtend(0x12345678u, nullptr, 0), 0x12345678u);
}

TEST(Crc32cTest, ExtendInPiecesEqualsWhole) {
  for (size_t len = 0; len <= 1000; ++len) {
    const std::string data = RandomBytes(len, static_cast<uint32_t>(len));
    const uint32_t whole = Crc32c(data);
    // Every split point for short inputs, a spread of them for longer ones.
    const size_t step = len < 64 ? 1 : len / 37 + 1;
    for (size_t split = 0; split <= len; split += step) {
      const uint32_t first = Crc32cExtend(0, data.data(), split);
      ASSERT_EQ(Crc32cExtend(first, data.data() + split, len - split), whole) << "len " << len << " split " << split;
    }
    // Three pieces.
    if (len >= 3) {
      uint32_t crc = Crc32cExtend(0, data.data(), len / 3);
      crc = Crc32cExtend(crc, data.data() + len / 3, len / 3);
      crc = Crc32cExtend(crc, data.data() + 2 * (len / 3), len - 2 * (len / 3));
      ASSERT_EQ(crc, whole) << "len " << len;
    }
  }
}

TEST(Crc32cTest, HardwareAndPortableAgree) {
  std::printf("Crc32c hardware accelerated: %s\n", Crc32cIsHardwareAccelerated() ? "yes" : "no");
  // Lengths and misaligned offsets that exercise the head/tail loops and both three-stream block sizes.
  const std::string data = RandomBytes(200000, 7);
  for (size_t offset = 0; offset < 9; ++offset) {
    for (size_t len : {0, 1, 7, 8, 9, 63, 767, 768, 769, 1000, 1543, 24575, 24576, 24577, 25000, 50000, 100003,
                       199991}) {
      ASSERT_EQ(Crc32cExtend(0, data.data() + offset, len), Crc32cExtendPortable(0, data.data() + offset, len))
          << "offset " << offset << " len " << len;
      ASSERT_EQ(Crc32cExtend(0xDEADBEEFu, data.data() + offset, len),
                Crc32cExtendPortable(0xDEADBEEFu, data.data() + offset, len))
          << "offset " << offset << " len " << len;
    }
  }
  for (size_t len = 0; len <= 2000; ++len) {
    ASSERT_EQ(Crc32cExtend(0, data.data() + 3, len), Crc32cExtendPortable(0, data.data() + 3, len)) << len;
  }
  // Large inputs of zeros and ones, where a wrong combination step would be easy to miss with random data.
  const std::string zeros(100000, '\0');
  const std::string ones(100000, '\xff');
  EXPECT_EQ(Crc32c(zeros), Crc32cExtendPortable(0, zeros.data(), zeros.size()));
  EXPECT_EQ(Crc32c(ones), Crc32cExtendPortable(0, ones.data(), ones.size()));
}

TEST(Crc32cTest, MaskRoundTripAndKnownValues) {
  EXPECT_EQ(Crc32cMask(0), 0xa282ead8u);
  EXPECT_EQ(Crc32cMask(0xE3069283u), 0xC78AB0E5u);
  EXPECT_EQ(Crc32cUnmask(0xC78AB0E5u), 0xE3069283u);
  const TestSeed seed(3);
  std::mt19937 rng(seed.value());
  for (int i = 0; i < 10000; ++i) {
    const uint32_t x = rng();
    EXPECT_EQ(Crc32cUnmask(Crc32cMask(x)), x);
    EXPECT_NE(Crc32cMask(x), x);
  }
  EXPECT_EQ(Crc32cUnmask(Crc32cMask(0xFFFFFFFFu)), 0xFFFFFFFFu);
}

TEST(Crc32cTest, OfFileMatchesContents) {
  const std::string path = testing::TempDir() + "/crc32c_test_file.bin";
  // A bit over 3 MiB and not a multiple of the 1 MiB chunk.
  const std::string data = RandomBytes((size_t{3} << 20) + 12345, 11);
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(data.data(), 1, data.size(), f), data.size());
    ASSERT_EQ(std::fclose(f), 0);
  }
  absl::StatusOr<FileCrc> got = Crc32cOfFile(path);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->crc, Crc32c(data));
  EXPECT_EQ(got->crc, Crc32cExtendPortable(0, data.data(), data.size()));
  EXPECT_EQ(got->size, data.size());

  const std::string empty_path = testing::TempDir() + "/crc32c_test_empty.bin";
  {
    FILE* f = std::fopen(empty_path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fclose(f), 0);
  }
  absl::StatusOr<FileCrc> empty = Crc32cOfFile(empty_path);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->crc, 0u);
  EXPECT_EQ(empty->size, 0u);
  std::remove(path.c_str());
  std::remove(empty_path.c_str());
}

TEST(Crc32cTest, MissingFileIsNotFound) {
  const std::string path = testing::TempDir() + "/crc32c_no_such_file";
  absl::StatusOr<FileCrc> got = Crc32cOfFile(path);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
  EXPECT_NE(got.status().message().find(path), absl::string_view::npos) << got.status();
}

TEST(Crc32cTest, DirectoryIsAnErrorNamingThePath) {
  const std::string path = testing::TempDir();
  absl::StatusOr<FileCrc> got = Crc32cOfFile(path);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find(path), absl::string_view::npos) << got.status();
}

}  // namespace
}  // namespace kestrel
