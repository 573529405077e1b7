#include "common/checkpoint_layout.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/crc32c.h"
#include "common/status.h"
#include "google/protobuf/text_format.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

constexpr absl::string_view kCheckpointPrefix = "ckpt-";
constexpr absl::string_view kChecksumPrefix = "# crc32c=";

[[nodiscard]] absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  const int e = errno;
  const std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(e));
  return e == ENOENT ? absl::NotFoundError(message) : absl::UnavailableError(message);
}

[[nodiscard]] absl::Status FsyncPath(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) return ErrnoError("cannot open", path);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return ErrnoError("cannot fsync", path);
  return absl::OkStatus();
}

}  // namespace

std::string WithChecksumLine(absl::string_view body) {
  return absl::StrFormat("%s%s%08x size=%d\n", body, kChecksumPrefix, Crc32c(body), body.size());
}

absl::StatusOr<std::string> VerifyChecksumLine(const std::string& path, const std::string& contents) {
  // The last checksum prefix starts the line (the body may contain the prefix, and need not end with a newline:
  // the recorded size says where it ends).
  const size_t at = absl::string_view(contents).rfind(kChecksumPrefix);
  if (at == std::string::npos || contents.empty() || contents.back() != '\n') {
    return absl::DataLossError(
        absl::StrCat(path, ": no checksum line at its end (truncated or not written by Kestrel)"));
  }
  absl::string_view line(contents.data() + at + kChecksumPrefix.size(), contents.size() - at - kChecksumPrefix.size() - 1);
  uint32_t crc = 0;
  uint64_t size = 0;
  const size_t space = line.find(" size=");
  if (space == absl::string_view::npos || space != 8 ||
      !absl::SimpleHexAtoi(line.substr(0, space), &crc) || !absl::SimpleAtoi(line.substr(space + 6), &size)) {
    return absl::DataLossError(absl::StrCat(path, ": malformed checksum line"));
  }
  const std::string body = contents.substr(0, at);
  if (size != body.size()) {
    return absl::DataLossError(absl::StrFormat("%s: holds %d bytes before its checksum line, expected %d (truncated?)",
                                               path, body.size(), size));
  }
  if (Crc32c(body) != crc) {
    return absl::DataLossError(absl::StrFormat("%s: checksum mismatch (crc32c %08x, recorded %08x): the file is corrupt",
                                               path, Crc32c(body), crc));
  }
  return body;
}

namespace {

// Parses "ckpt-<digits>" to its sequence.
std::optional<uint64_t> SequenceOf(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kCheckpointPrefix) || name.empty()) return std::nullopt;
  for (char c : name) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  uint64_t sequence = 0;
  if (!absl::SimpleAtoi(name, &sequence)) return std::nullopt;
  return sequence;
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status error = ErrnoError("cannot write", tmp);
      ::close(fd);
      return error;
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    absl::Status error = ErrnoError("cannot fsync", tmp);
    ::close(fd);
    return error;
  }
  if (::close(fd) != 0) return ErrnoError("cannot close", tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoError("cannot rename onto", path);
  const std::string dir = fs::path(path).parent_path().string();
  return FsyncPath(dir.empty() ? "." : dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoError("cannot open", path);
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return ErrnoError("cannot read", path);
  return contents.str();
}

absl::Status AddShardsToManifest(std::vector<ShardCheckpoint> shards, int num_servers,
                                 CheckpointManifest* manifest) {
  std::sort(shards.begin(), shards.end(),
            [](const ShardCheckpoint& a, const ShardCheckpoint& b) { return a.shard() < b.shard(); });
  if (static_cast<int>(shards.size()) != num_servers) {
    return absl::InvalidArgumentError(absl::StrFormat("%d servers' answers for %d servers", shards.size(), num_servers));
  }
  std::map<std::string, TableConfig> tables;
  for (int i = 0; i < num_servers; ++i) {
    if (shards[i].shard() != i) {
      return absl::InvalidArgumentError(absl::StrFormat("no checkpoint answer from server %d", i));
    }
    for (const TableConfig& table : shards[i].tables()) {
      auto [it, inserted] = tables.emplace(table.name(), table);
      if (!inserted && it->second.SerializeAsString() != table.SerializeAsString()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("shards disagree on the config of table '%s' (server %d differs)", table.name(), i));
      }
    }
    shards[i].clear_tables();
  }
  manifest->clear_tables();
  for (auto& [name, table] : tables) *manifest->add_tables() = table;
  manifest->clear_shards();
  for (ShardCheckpoint& shard : shards) *manifest->add_shards() = std::move(shard);
  return absl::OkStatus();
}

std::string CheckpointLayout::CheckpointName(uint64_t sequence) {
  return absl::StrFormat("%s%08d", kCheckpointPrefix, sequence);
}

absl::Status CheckpointLayout::CheckName(absl::string_view name) {
  const std::optional<uint64_t> sequence = SequenceOf(name);
  if (!sequence || *sequence == 0 || *sequence > kMaxSequence || CheckpointName(*sequence) != name) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a checkpoint name is ckpt-<sequence> as the scheduler makes it (8 or more digits, sequence 1 to ",
        kMaxSequence, "); got a name of ", name.size(), " characters that is not"));
  }
  return absl::OkStatus();
}

std::string CheckpointLayout::ShardDirName(int shard) { return absl::StrFormat("shard-%04d", shard); }

std::string CheckpointLayout::CheckpointDir(absl::string_view name) const { return absl::StrCat(root_, "/", name); }

std::string CheckpointLayout::ShardDir(absl::string_view name, int shard) const {
  return absl::StrCat(CheckpointDir(name), "/", ShardDirName(shard));
}

std::string CheckpointLayout::ManifestPath(absl::string_view name) const {
  return absl::StrCat(CheckpointDir(name), "/MANIFEST");
}

std::string CheckpointLayout::LatestPath() const { return absl::StrCat(root_, "/LATEST"); }

std::string CheckpointLayout::LiveDir(int shard) const { return absl::StrCat(root_, "/live/", ShardDirName(shard)); }

absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>> CheckpointLayout::ListCheckpointDirs() const {
  std::vector<std::pair<uint64_t, std::string>> dirs;
  std::error_code error;
  fs::directory_iterator it(root_, error);
  if (error) {
    if (error == std::errc::no_such_file_or_directory) return dirs;
    return absl::UnavailableError(absl::StrCat("cannot list checkpoint directory ", root_, ": ", error.message()));
  }
  for (const fs::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    if (std::optional<uint64_t> sequence = SequenceOf(name);
        sequence && entry.is_directory() && CheckName(name).ok()) {
      dirs.emplace_back(*sequence, name);
    }
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

absl::StatusOr<uint64_t> CheckpointLayout::NextSequence() const {
  KESTREL_ASSIGN_OR_RETURN(const auto dirs, ListCheckpointDirs());
  return dirs.empty() ? 1 : dirs.back().first + 1;
}

absl::Status CheckpointLayout::WriteManifest(const CheckpointManifest& manifest) const {
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(manifest, &text)) {
    return absl::InternalError("cannot print the checkpoint manifest");
  }
  const std::string name = CheckpointName(manifest.sequence());
  return WriteFileAtomically(ManifestPath(name), WithChecksumLine(text));
}

absl::Status CheckpointLayout::MoveLatest(absl::string_view name) const {
  return WriteFileAtomically(LatestPath(), WithChecksumLine(absl::StrCat(name, "\n")));
}

absl::StatusOr<CheckpointManifest> CheckpointLayout::ReadManifest(absl::string_view name) const {
  KESTREL_RETURN_IF_ERROR(CheckName(name));
  const std::string path = ManifestPath(name);
  absl::StatusOr<std::string> contents = ReadWholeFile(path);
  if (absl::IsNotFound(contents.status())) {
    return absl::DataLossError(absl::StrCat("checkpoint ", name, " has no manifest: ", contents.status().message()));
  }
  if (!contents.ok()) return contents.status();
  KESTREL_ASSIGN_OR_RETURN(const std::string body, VerifyChecksumLine(path, *contents));
  CheckpointManifest manifest;
  if (!google::protobuf::TextFormat::ParseFromString(body, &manifest)) {
    return absl::DataLossError(absl::StrCat(path, ": not a valid manifest"));
  }
  if (CheckpointName(manifest.sequence()) != name) {
    return absl::DataLossError(absl::StrFormat("%s: the manifest is of sequence %d, not of %s", path,
                                               manifest.sequence(), name));
  }
  if (manifest.format_version() != 1) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: checkpoint format version %d is not supported (1 is)", path, manifest.format_version()));
  }
  return manifest;
}

absl::StatusOr<std::optional<CheckpointManifest>> CheckpointLayout::ReadLatest() const {
  const std::string path = LatestPath();
  absl::StatusOr<std::string> contents = ReadWholeFile(path);
  if (absl::IsNotFound(contents.status())) {
    KESTREL_ASSIGN_OR_RETURN(const auto dirs, ListCheckpointDirs());
    for (const auto& [sequence, name] : dirs) {
      if (fs::exists(ManifestPath(name))) {
        return absl::DataLossError(absl::StrCat(
            path, " is missing, but ", CheckpointDir(name),
            " holds a manifest: refusing to start afresh over existing checkpoints (restore LATEST, or use an "
            "empty --checkpoint_dir)"));
      }
    }
    return std::optional<CheckpointManifest>();  // nothing was ever committed here
  }
  if (!contents.ok()) return contents.status();
  KESTREL_ASSIGN_OR_RETURN(const std::string body, VerifyChecksumLine(path, *contents));
  absl::string_view name = body;
  if (!absl::ConsumeSuffix(&name, "\n") || !SequenceOf(name)) {
    return absl::DataLossError(absl::StrCat(path, ": does not name a checkpoint"));
  }
  KESTREL_ASSIGN_OR_RETURN(CheckpointManifest manifest, ReadManifest(name));
  return std::optional<CheckpointManifest>(std::move(manifest));
}

absl::Status CheckpointLayout::VerifyShard(const CheckpointManifest& manifest, int shard) const {
  const std::string name = CheckpointName(manifest.sequence());
  if (shard < 0 || shard >= manifest.shards_size() || manifest.shards(shard).shard() != shard) {
    return absl::DataLossError(absl::StrFormat("checkpoint %s: the manifest has no entry for server %d", name, shard));
  }
  const ShardCheckpoint& entry = manifest.shards(shard);
  if (entry.files().empty()) {
    return absl::DataLossError(absl::StrFormat("checkpoint %s: the manifest lists no files for server %d", name, shard));
  }
  // Restore and export open ShardDir(name, shard), whatever the manifest says: it must say exactly that.
  if (entry.dir() != ShardDirName(shard)) {
    return absl::DataLossError(absl::StrFormat("checkpoint %s: the manifest puts server %d's part in '%s', not in %s", name,
                                               shard, absl::CEscape(entry.dir().substr(0, 64)), ShardDirName(shard)));
  }
  const std::string dir = ShardDir(name, shard);
  std::set<std::string> listed;
  for (const CheckpointFile& file : entry.files()) {
    const std::string& base = file.name();
    if (base.empty() || base.size() > 255 || base == "." || base == ".." ||
        base.find('/') != std::string::npos ||
        base.find('\0') != std::string::npos || !listed.insert(base).second) {
      return absl::DataLossError(absl::StrFormat(
          "checkpoint %s, server %d: the manifest lists '%s', not a file name of its own (empty, a path or repeated)",
          name, shard, absl::CEscape(base.substr(0, 64))));
    }
    const std::string path = absl::StrCat(dir, "/", base);
    absl::StatusOr<FileCrc> crc = Crc32cOfFile(path);
    if (!crc.ok()) {
      return absl::DataLossError(absl::StrFormat("checkpoint %s, server %d: file %s: %s", name, shard, path,
                                                 crc.status().message()));
    }
    if (crc->size != file.size()) {
      return absl::DataLossError(absl::StrFormat("checkpoint %s, server %d: file %s has %d bytes, the manifest says %d",
                                                 name, shard, path, crc->size, file.size()));
    }
    if (crc->crc != file.crc32c()) {
      return absl::DataLossError(absl::StrFormat(
          "checkpoint %s, server %d: file %s is corrupt (crc32c %08x, the manifest says %08x)", name, shard, path,
          crc->crc, file.crc32c()));
    }
  }
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    if (listed.count(it->path().filename().string()) == 0) {
      return absl::DataLossError(absl::StrFormat("checkpoint %s, server %d: %s is not in the manifest", name, shard,
                                                 it->path().string()));
    }
  }
  if (error) {
    return absl::UnavailableError(
        absl::StrFormat("checkpoint %s, server %d: cannot list %s: %s", name, shard, dir, error.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> CheckpointLayout::Prune(
    int keep, const std::function<bool(const CheckpointManifest&)>& pinned) const {
  if (keep < 1) return absl::InvalidArgumentError("must keep at least one checkpoint");
  KESTREL_ASSIGN_OR_RETURN(const std::optional<CheckpointManifest> latest, ReadLatest());
  const uint64_t latest_sequence = latest ? latest->sequence() : 0;
  KESTREL_ASSIGN_OR_RETURN(const auto dirs, ListCheckpointDirs());
  // Committed: LATEST's and older ones with a manifest (they were LATEST once).
  std::vector<std::string> deleted;
  int kept = 0;
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    const auto& [sequence, name] = *it;
    const bool committed = sequence <= latest_sequence && fs::exists(ManifestPath(name));
    if (committed && kept < keep) {
      ++kept;
      continue;
    }
    if (committed && pinned) {
      absl::StatusOr<CheckpointManifest> manifest = ReadManifest(name);
      if (manifest.ok() && pinned(*manifest)) continue;
    }
    std::error_code error;
    fs::remove_all(CheckpointDir(name), error);
    if (error) {
      return absl::UnavailableError(
          absl::StrCat("cannot delete old checkpoint ", CheckpointDir(name), ": ", error.message()));
    }
    deleted.push_back(name);
  }
  return deleted;
}

}  // namespace kestrel
