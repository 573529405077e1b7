#include "common/checkpoint_layout.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

class CheckpointLayoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = absl::StrCat(::testing::TempDir(), "/layout_", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }

  // Writes a checkpoint of `sequence` with one shard holding two files, and commits it when `commit`.
  CheckpointManifest MakeCheckpoint(const CheckpointLayout& layout, uint64_t sequence, bool commit = true) {
    const std::string name = CheckpointLayout::CheckpointName(sequence);
    CheckpointManifest manifest;
    manifest.set_format_version(1);
    manifest.set_sequence(sequence);
    manifest.set_clock(static_cast<int64_t>(sequence) * 10);
    manifest.set_job_id("job");
    ShardCheckpoint* shard = manifest.add_shards();
    shard->set_shard(0);
    shard->set_dir(CheckpointLayout::ShardDirName(0));
    fs::create_directories(layout.ShardDir(name, 0));
    for (const char* file : {"000001.sst", "CURRENT"}) {
      const std::string contents = absl::StrCat("contents of ", file, " in ", name, std::string(1000, 'x'));
      std::ofstream(layout.ShardDir(name, 0) + "/" + file, std::ios::binary) << contents;
      CheckpointFile* f = shard->add_files();
      f->set_name(file);
      f->set_size(contents.size());
      f->set_crc32c(Crc32c(contents));
    }
    EXPECT_TRUE(layout.WriteManifest(manifest).ok());
    if (commit) { EXPECT_TRUE(layout.MoveLatest(name).ok()); }
    return manifest;
  }

  static void FlipByte(const std::string& path, size_t offset) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset));
    char c = 0;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(&c, 1);
  }

  std::string root_;
};

TEST_F(CheckpointLayoutTest, NamesAndPaths) {
  CheckpointLayout layout("/ckpt");
  EXPECT_EQ(CheckpointLayout::CheckpointName(7), "ckpt-00000007");
  EXPECT_EQ(layout.ShardDir("ckpt-00000007", 3), "/ckpt/ckpt-00000007/shard-0003");
  EXPECT_EQ(layout.ManifestPath("ckpt-00000007"), "/ckpt/ckpt-00000007/MANIFEST");
  EXPECT_EQ(layout.LatestPath(), "/ckpt/LATEST");
  EXPECT_EQ(layout.LiveDir(1), "/ckpt/live/shard-0001");
}

TEST_F(CheckpointLayoutTest, EmptyRootHasNoCheckpoint) {
  CheckpointLayout layout(root_);
  auto latest = layout.ReadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_FALSE(latest->has_value());
  EXPECT_EQ(*layout.NextSequence(), 1u);
  // A root that does not exist yet is a new job too.
  CheckpointLayout missing(root_ + "/not/there");
  ASSERT_TRUE(missing.ReadLatest().ok());
  EXPECT_FALSE(missing.ReadLatest()->has_value());
}

TEST_F(CheckpointLayoutTest, CommitThenReadLatestAndVerify) {
  CheckpointLayout layout(root_);
  MakeCheckpoint(layout, 1);
  const CheckpointManifest second = MakeCheckpoint(layout, 2);
  auto latest = layout.ReadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->sequence(), 2u);
  EXPECT_EQ((*latest)->clock(), 20);
  EXPECT_EQ((*latest)->SerializeAsString(), second.SerializeAsString());
  EXPECT_TRUE(layout.VerifyShard(**latest, 0).ok());
  EXPECT_EQ(layout.VerifyShard(**latest, 1).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(*layout.NextSequence(), 3u);
}

TEST_F(CheckpointLayoutTest, UncommittedCheckpointIsNotLatest) {
  CheckpointLayout layout(root_);
  MakeCheckpoint(layout, 1);
  MakeCheckpoint(layout, 2, /*commit=*/false);  // manifest written, LATEST not moved: it does not exist
  EXPECT_EQ((*layout.ReadLatest())->sequence(), 1u);
  EXPECT_EQ(*layout.NextSequence(), 3u) << "an abandoned attempt's directory is never reused";
}

TEST_F(CheckpointLayoutTest, DamagedManifestIsDetectedAndNamed) {
  CheckpointLayout layout(root_);
  MakeCheckpoint(layout, 1);
  const std::string path = layout.ManifestPath("ckpt-00000001");
  const std::string good = *ReadWholeFile(path);
  const auto restore = [&] { std::ofstream(path, std::ios::binary | std::ios::trunc) << good; };

  for (size_t offset : {size_t{0}, good.size() / 2, good.size() - 3}) {
    FlipByte(path, offset);
    auto latest = layout.ReadLatest();
    EXPECT_EQ(latest.status().code(), absl::StatusCode::kDataLoss) << "flip at " << offset;
    EXPECT_TRUE(absl::StrContains(latest.status().message(), path)) << latest.status();
    restore();
  }
  for (size_t size : {size_t{0}, good.size() / 2, good.size() - 1}) {
    fs::resize_file(path, size);
    auto latest = layout.ReadLatest();
    EXPECT_EQ(latest.status().code(), absl::StatusCode::kDataLoss) << "truncated to " << size;
    EXPECT_TRUE(absl::StrContains(latest.status().message(), "ckpt-00000001")) << latest.status();
    restore();
  }
  fs::remove(path);
  auto latest = layout.ReadLatest();
  EXPECT_EQ(latest.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(latest.status().message(), "MANIFEST")) << latest.status();
  restore();
  EXPECT_TRUE(layout.ReadLatest().ok());
}

TEST_F(CheckpointLayoutTest, DamagedOrMissingLatestIsNeverAFreshStart) {
  CheckpointLayout layout(root_);
  MakeCheckpoint(layout, 1);
  const std::string path = layout.LatestPath();
  const std::string good = *ReadWholeFile(path);
  FlipByte(path, 6);  // inside the name
  EXPECT_EQ(layout.ReadLatest().status().code(), absl::StatusCode::kDataLoss);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << good;
  fs::resize_file(path, 5);
  EXPECT_EQ(layout.ReadLatest().status().code(), absl::StatusCode::kDataLoss);
  fs::remove(path);
  auto latest = layout.ReadLatest();
  EXPECT_EQ(latest.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(latest.status().message(), "LATEST")) << latest.status();
}

TEST_F(CheckpointLayoutTest, DamagedFilesOfAServersPartAreNamedWithTheServer) {
  CheckpointLayout layout(root_);
  const CheckpointManifest manifest = MakeCheckpoint(layout, 1);
  for (const char* file : {"000001.sst", "CURRENT"}) {
    const std::string path = layout.ShardDir("ckpt-00000001", 0) + "/" + file;
    const std::string good = *ReadWholeFile(path);
    const auto expect_named = [&](const char* what) {
      absl::Status status = layout.VerifyShard(manifest, 0);
      EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << what << " " << file;
      EXPECT_TRUE(absl::StrContains(status.message(), path)) << status;
      EXPECT_TRUE(absl::StrContains(status.message(), "server 0")) << status;
    };
    FlipByte(path, 100);
    expect_named("flip");
    std::ofstream(path, std::ios::binary | std::ios::trunc) << good;
    fs::resize_file(path, good.size() - 1);
    expect_named("truncation");
    fs::remove(path);
    expect_named("deletion");
    std::ofstream(path, std::ios::binary | std::ios::trunc) << good;
    EXPECT_TRUE(layout.VerifyShard(manifest, 0).ok());
  }
}

TEST_F(CheckpointLayoutTest, VerifiesExactlyTheDirectoryRestoreOpens) {
  CheckpointLayout layout(root_);
  const CheckpointManifest manifest = MakeCheckpoint(layout, 1);
  const std::string dir = layout.ShardDir("ckpt-00000001", 0);
  // A manifest that points the check at another directory (one an attacker filled with matching files) while
  // restore opens the standard one: refused, whatever that other directory holds.
  fs::create_directories(root_ + "/elsewhere");
  fs::copy(dir, root_ + "/elsewhere", fs::copy_options::recursive);
  for (const std::string& other : {std::string("../../elsewhere"), std::string("shard-0001"), std::string(""),
                                   std::string("shard-0000/.")}) {
    CheckpointManifest moved = manifest;
    moved.mutable_shards(0)->set_dir(other);
    absl::Status status = layout.VerifyShard(moved, 0);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << other;
    EXPECT_TRUE(absl::StrContains(status.message(), "not in shard-0000")) << status;
  }
  // File names are names, not paths, and each is listed once.
  for (const std::string& name : {std::string("../ckpt-00000001/shard-0000/CURRENT"), std::string("."),
                                  std::string(".."), std::string(""), std::string("CURRENT")}) {
    CheckpointManifest renamed = manifest;
    renamed.mutable_shards(0)->mutable_files(0)->set_name(name);
    EXPECT_EQ(layout.VerifyShard(renamed, 0).code(), absl::StatusCode::kDataLoss) << name;
  }
  // A file RocksDB could read that the manifest does not vouch for.
  std::ofstream(dir + "/MANIFEST-000099", std::ios::binary) << "planted";
  absl::Status planted = layout.VerifyShard(manifest, 0);
  EXPECT_EQ(planted.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(planted.message(), "MANIFEST-000099 is not in the manifest")) << planted;
  fs::remove(dir + "/MANIFEST-000099");
  EXPECT_TRUE(layout.VerifyShard(manifest, 0).ok());
}

TEST_F(CheckpointLayoutTest, PruneKeepsTheNewestCommittedAndDropsAbandonedAttempts) {
  CheckpointLayout layout(root_);
  for (uint64_t s = 1; s <= 4; ++s) MakeCheckpoint(layout, s);
  fs::create_directories(layout.ShardDir(CheckpointLayout::CheckpointName(5), 0));  // an attempt that died
  auto deleted = layout.Prune(2);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->size(), 3u);
  EXPECT_FALSE(fs::exists(layout.CheckpointDir("ckpt-00000001")));
  EXPECT_FALSE(fs::exists(layout.CheckpointDir("ckpt-00000002")));
  EXPECT_TRUE(fs::exists(layout.CheckpointDir("ckpt-00000003")));
  EXPECT_TRUE(fs::exists(layout.CheckpointDir("ckpt-00000004")));
  EXPECT_FALSE(fs::exists(layout.CheckpointDir("ckpt-00000005")));
  EXPECT_EQ((*layout.ReadLatest())->sequence(), 4u);
  EXPECT_EQ(layout.Prune(0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CheckpointLayoutTest, PruneKeepsPinnedCheckpointsBesideTheNewest) {
  CheckpointLayout layout(root_);
  for (uint64_t s = 1; s <= 5; ++s) MakeCheckpoint(layout, s);  // clocks 10..50
  fs::create_directories(layout.ShardDir(CheckpointLayout::CheckpointName(6), 0));  // never committed: not pinned
  auto deleted = layout.Prune(1, [](const CheckpointManifest& m) { return m.clock() == 20 || m.clock() == 60; });
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, (std::vector<std::string>{"ckpt-00000006", "ckpt-00000004", "ckpt-00000003",
                                                "ckpt-00000001"}));
  EXPECT_TRUE(fs::exists(layout.CheckpointDir("ckpt-00000002"))) << "pinned, and not counted in keep";
  EXPECT_TRUE(fs::exists(layout.CheckpointDir("ckpt-00000005")));
}

TEST_F(CheckpointLayoutTest, AtomicWriteReplacesWholeFile) {
  const std::string path = root_ + "/file";
  ASSERT_TRUE(WriteFileAtomically(path, "first version, long").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "second").ok());
  EXPECT_EQ(*ReadWholeFile(path), "second");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(ReadWholeFile(root_ + "/absent").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(WriteFileAtomically(root_ + "/no/such/dir/file", "x").ok());
}

// Found by //server:checkpoint_fuzz: a body that did not end with a newline was framed by WithChecksumLine but
// refused by VerifyChecksumLine. Every body round-trips; a damaged or truncated frame is still refused.
TEST(ChecksumLineTest, EveryBodyRoundTrips) {
  for (const std::string& body : {std::string(), std::string("ckpt-00000001\n"), std::string("no newline"),
                                 std::string(1, '\0'), std::string("# crc32c=00000000 size=0"),
                                 std::string("a\n# crc32c=12345678 size=3\nb")}) {
    SCOPED_TRACE(body);
    const std::string framed = WithChecksumLine(body);
    absl::StatusOr<std::string> verified = VerifyChecksumLine("f", framed);
    ASSERT_TRUE(verified.ok()) << verified.status();
    EXPECT_EQ(*verified, body);
    EXPECT_EQ(VerifyChecksumLine("f", framed.substr(1)).status().code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(VerifyChecksumLine("f", "x" + framed).status().code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(VerifyChecksumLine("f", framed.substr(0, framed.size() - 1)).status().code(),
              absl::StatusCode::kDataLoss);
  }
}

}  // namespace
}  // namespace kestrel
