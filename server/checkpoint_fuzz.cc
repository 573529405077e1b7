// Fuzz target: reading a checkpoint root as a server or the scheduler does: LATEST and MANIFEST parsing and
// verification (common/checkpoint_layout.h), checkpoint names, the manifest's partition (common/partition.h)
// and ShardStore::LoadCheckpoint (server/shard_store.h) up to its file checks.
//
// Input: a flags byte, a checkpoint name, a LATEST body, a MANIFEST body (FuzzInput::Bytes each), then the
// contents of one shard file. They are written to a fresh root as <root>/LATEST, <root>/<name>/MANIFEST and
// <root>/<name>/shard-0000/000001.sst (<name> is ckpt-00000001 unless the input's name is a valid one). Flags:
// bit 0 gives LATEST a valid checksum line (else its body is written as it is), bit 1 leaves LATEST out, bit 2
// gives MANIFEST a valid checksum line, bit 3 loads the checkpoint into a shard, bit 4 prunes the root.
// Invariants:
//   - CheckName accepts exactly the names CheckpointName makes for sequences in [1, kMaxSequence];
//   - a manifest read (ReadManifest, ReadLatest) is of format 1 and of the sequence its name says, and
//     VerifyChecksumLine gives back every body WithChecksumLine framed;
//   - VerifyShard accepts a shard only in the directory restore reads (ShardDir) with plain file names, every
//     one present with its recorded size;
//   - a partition Parse accepts prints back to a spec that parses to the same partition.
#include <filesystem>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "common/checkpoint_layout.h"
#include "common/crc32c.h"
#include "common/fuzz_input.h"
#include "common/partition.h"
#include "google/protobuf/stubs/logging.h"
#include "server/shard.h"
#include "server/shard_store.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

void CheckName(const std::string& name) {
  const bool ok = CheckpointLayout::CheckName(name).ok();
  absl::string_view digits = name;
  uint64_t sequence = 0;
  const bool parses = absl::ConsumePrefix(&digits, "ckpt-") && !digits.empty() &&
                      digits.find_first_not_of("0123456789") == absl::string_view::npos &&
                      absl::SimpleAtoi(digits, &sequence);
  const bool expected = parses && sequence >= 1 && sequence <= CheckpointLayout::kMaxSequence &&
                        CheckpointLayout::CheckpointName(sequence) == name;
  FUZZ_CHECK(ok == expected, "CheckName disagrees with CheckpointName");
}

void CheckManifest(const CheckpointManifest& manifest, absl::string_view name) {
  FUZZ_CHECK(manifest.format_version() == 1);
  FUZZ_CHECK(CheckpointLayout::CheckpointName(manifest.sequence()) == name);
  FUZZ_CHECK(CheckpointLayout::CheckName(name).ok());
}

void CheckPartition(const std::string& spec) {
  absl::StatusOr<Partition> parsed = Partition::Parse(spec);
  if (!parsed.ok()) return;
  FUZZ_CHECK(parsed->num_servers() >= 1 && parsed->num_ranges() >= 1);
  absl::StatusOr<Partition> again = Partition::Parse(parsed->ToString());
  FUZZ_CHECK(again.ok() && again->Fingerprint() == parsed->Fingerprint(), "Partition::ToString does not parse back");
}

void CheckVerifiedShard(const CheckpointLayout& layout, const CheckpointManifest& manifest, int shard) {
  const ShardCheckpoint& entry = manifest.shards(shard);
  FUZZ_CHECK(entry.dir() == CheckpointLayout::ShardDirName(shard), "VerifyShard accepted another directory");
  const std::string dir = layout.ShardDir(CheckpointLayout::CheckpointName(manifest.sequence()), shard);
  for (const CheckpointFile& file : entry.files()) {
    FUZZ_CHECK(!file.name().empty() && file.name() != "." && file.name() != ".." &&
                   file.name().find('/') == std::string::npos,
               "VerifyShard accepted a file name that is a path");
    std::error_code error;
    FUZZ_CHECK(fs::file_size(dir + "/" + file.name(), error) == file.size() && !error);
  }
}

}  // namespace
}  // namespace kestrel

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  google::protobuf::SetLogHandler(nullptr);  // text-format parse errors are expected by the thousand
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kestrel;  // NOLINT(build/namespaces): a fuzz entry point
  FuzzInput in(data, size);
  const uint8_t flags = in.U8();
  const std::string name_in = in.Bytes();
  const std::string latest = in.Bytes();
  const std::string manifest_body = in.Bytes();
  const std::string shard_file = in.Rest();

  CheckName(name_in);
  CheckName(latest);
  for (const std::string* body : {&latest, &manifest_body}) {
    VerifyChecksumLine("fuzz", *body).IgnoreError();
    absl::StatusOr<std::string> framed = VerifyChecksumLine("fuzz", WithChecksumLine(*body));
    FUZZ_CHECK(framed.ok() && *framed == *body, "WithChecksumLine does not verify");
  }

  const std::string root = FuzzScratchDir() + "/checkpoints";
  std::error_code error;
  fs::remove_all(root, error);
  const std::string name = CheckpointLayout::CheckName(name_in).ok() ? name_in : "ckpt-00000001";
  const CheckpointLayout layout(root);
  fs::create_directories(layout.ShardDir(name, 0), error);
  FUZZ_CHECK(!error);
  if ((flags & 2) == 0) FuzzWriteFile(layout.LatestPath(), (flags & 1) != 0 ? WithChecksumLine(latest) : latest);
  FuzzWriteFile(layout.ManifestPath(name), (flags & 4) != 0 ? WithChecksumLine(manifest_body) : manifest_body);
  FuzzWriteFile(layout.ShardDir(name, 0) + "/000001.sst", shard_file);

  absl::StatusOr<std::optional<CheckpointManifest>> newest = layout.ReadLatest();
  if (newest.ok() && newest->has_value()) {
    absl::StatusOr<std::string> body = VerifyChecksumLine("LATEST", (flags & 1) != 0 ? WithChecksumLine(latest) : latest);
    FUZZ_CHECK(body.ok());
    CheckManifest(**newest, absl::StripSuffix(*body, "\n"));
  }
  absl::StatusOr<CheckpointManifest> manifest = layout.ReadManifest(name);
  if (!manifest.ok()) return 0;
  CheckManifest(*manifest, name);
  CheckPartition(manifest->partition());
  for (int s = -1; s <= std::min(manifest->shards_size(), 4); ++s) {
    if (layout.VerifyShard(*manifest, s).ok()) CheckVerifiedShard(layout, *manifest, s);
  }
  if ((flags & 8) != 0) {
    ShardOptions options;
    options.job_id = "fuzz";
    auto shard = Shard::Create(options, *Partition::Uniform(1));
    FUZZ_CHECK(shard.ok());
    ShardStore::LoadCheckpoint(layout, *manifest, **shard, 1).IgnoreError();
  }
  if ((flags & 16) != 0) layout.Prune(1 + flags / 32).IgnoreError();
  return 0;
}
