// CheckpointLayout: the one place that decides where checkpoints live on disk and how one is committed.
//
// A checkpoint root (the --checkpoint_dir every process of a job is given; local disk for one machine, a
// shared volume for a cluster) holds:
//
//   <root>/LATEST                   the name of the newest committed checkpoint, e.g. "ckpt-00000007"
//   <root>/ckpt-00000007/MANIFEST   its manifest (proto/checkpoint.proto CheckpointManifest, text format)
//   <root>/ckpt-00000007/shard-0000/  server 0's RocksDB checkpoint: its rows (values + optimizer state)
//   <root>/ckpt-00000007/shard-0001/  ...one directory per server rank
//   <root>/live/shard-0000/         server 0's working RocksDB, where incremental writes land; checkpoints
//                                   hard-link its immutable SST files, so a snapshot costs no copy
//
// MANIFEST and LATEST end with a checksum line ("# crc32c=<8 hex digits> size=<n>") over the bytes before it,
// so a truncated or flipped file is detected. Both are written atomically: a temporary file, fsync, rename,
// fsync of the directory. The commit protocol: every server writes its shard directory and reports its files
// with their sizes and CRC-32C; then the scheduler writes MANIFEST, then moves LATEST. A checkpoint whose
// LATEST move did not happen does not exist: restore never looks at it, and Prune() deletes it.
//
// Thread-compatible; methods touch only the file system.
#ifndef KESTREL_COMMON_CHECKPOINT_LAYOUT_H_
#define KESTREL_COMMON_CHECKPOINT_LAYOUT_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/checkpoint.pb.h"

namespace kestrel {

// Writes `contents` to `path` atomically and durably: `path`.tmp, fsync, rename over `path`, fsync of the
// directory. Errors name the path.
[[nodiscard]] absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);
// The whole file; NotFound when it does not exist, other errors name the path.
[[nodiscard]] absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// Fills manifest->shards and manifest->tables from the servers' answers (one per rank, any order): the
// shards sorted by rank, each table once. InvalidArgument when a rank is missing or repeated, or two servers
// hold different configs of one table. The answers' own table lists are dropped (the manifest keeps one).
[[nodiscard]] absl::Status AddShardsToManifest(std::vector<ShardCheckpoint> shards, int num_servers, CheckpointManifest* manifest);

// `body` (any bytes) followed by the checksum line MANIFEST and LATEST end with ("# crc32c=<8 hex> size=<n>\n").
std::string WithChecksumLine(absl::string_view body);
// The body of `contents` (read from `path`) after checking its checksum line; DataLoss naming `path` if it is
// missing, malformed or does not match (a truncated or altered file).
[[nodiscard]] absl::StatusOr<std::string> VerifyChecksumLine(const std::string& path, const std::string& contents);

class CheckpointLayout {
 public:
  explicit CheckpointLayout(std::string root) : root_(std::move(root)) {}

  const std::string& root() const { return root_; }

  // "ckpt-00000007" for sequence 7.
  static std::string CheckpointName(uint64_t sequence);
  // Sequences stay at or below this (a checkpoint a second for 30,000 years), so the next never wraps.
  static constexpr uint64_t kMaxSequence = 1'000'000'000'000;
  // OK only for a name CheckpointName makes, of a sequence in [1, kMaxSequence]: every name that becomes a path
  // (from the scheduler, the network or LATEST) is checked first. InvalidArgument otherwise, without echoing it.
  [[nodiscard]] static absl::Status CheckName(absl::string_view name);
  // "shard-0003" for server rank 3.
  static std::string ShardDirName(int shard);

  std::string CheckpointDir(absl::string_view name) const;
  std::string ShardDir(absl::string_view name, int shard) const;
  std::string ManifestPath(absl::string_view name) const;
  std::string LatestPath() const;
  // A server's working RocksDB.
  std::string LiveDir(int shard) const;

  // The sequence a new checkpoint takes: one above every ckpt-* directory present (committed or not), so an
  // abandoned attempt's directory is never reused.
  [[nodiscard]] absl::StatusOr<uint64_t> NextSequence() const;

  // Commit, step 1: writes the manifest into its checkpoint directory (which the servers have filled).
  [[nodiscard]] absl::Status WriteManifest(const CheckpointManifest& manifest) const;
  // Commit, step 2: points LATEST at checkpoint `name`. From here on it exists.
  [[nodiscard]] absl::Status MoveLatest(absl::string_view name) const;

  // The committed checkpoint's manifest, verified against its checksum line (DataLoss naming the file when
  // it is truncated or altered, NotFound naming it when missing).
  [[nodiscard]] absl::StatusOr<CheckpointManifest> ReadManifest(absl::string_view name) const;
  // The newest committed checkpoint's manifest; nullopt when the root holds no checkpoint at all (a new job).
  // DataLoss when there are checkpoint directories but LATEST is missing or damaged, or LATEST names a
  // checkpoint whose manifest is missing or damaged: never a silent fresh start.
  [[nodiscard]] absl::StatusOr<std::optional<CheckpointManifest>> ReadLatest() const;

  // Checks the directory restore and export open for shard `shard` (ShardDir: the manifest's `dir` must name
  // exactly it, and its file names must be plain names): every file the manifest lists is present with its
  // recorded size and CRC-32C, and nothing else is there (RocksDB would read any file CURRENT names).
  // DataLoss (or NotFound) naming the file and the shard otherwise.
  [[nodiscard]] absl::Status VerifyShard(const CheckpointManifest& manifest, int shard) const;

  // Keeps the newest `keep` (>= 1) committed checkpoints up to and including LATEST's, and every committed one
  // whose manifest `pinned` accepts (not counted in `keep`), and deletes every other ckpt-* directory (older
  // ones, and attempts that never committed). A manifest that cannot be read is not pinned. Returns the names
  // deleted.
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> Prune(
      int keep, const std::function<bool(const CheckpointManifest&)>& pinned = nullptr) const;

 private:
  // ckpt-* directories present, by sequence.
  [[nodiscard]] absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>> ListCheckpointDirs() const;

  const std::string root_;
};

}  // namespace kestrel

#endif  // KESTREL_COMMON_CHECKPOINT_LAYOUT_H_
