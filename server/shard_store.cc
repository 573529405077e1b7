#include "server/shard_store.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/crc32c.h"
#include "common/fault_injection.h"
#include "common/logging.h"
#include "common/partition.h"
#include "common/status.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/options.h"
#include "rocksdb/table.h"
#include "rocksdb/utilities/checkpoint.h"
#include "server/checkpoint_rows.h"
#include "server/checkpoint_table_reader.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

// The working store's block cache (the disk tier's reads), outside the tables' memory budgets.
constexpr size_t kBlockCacheBytes = size_t{32} << 20;

rocksdb::Options LiveOptions() {
  // Flushes and compactions run below the request handlers' priority, as the checkpoint writer does.
  static const bool lowered = [] {
    rocksdb::Env::Default()->LowerThreadPoolCPUPriority(rocksdb::Env::Priority::HIGH);
    rocksdb::Env::Default()->LowerThreadPoolCPUPriority(rocksdb::Env::Priority::LOW);
    return true;
  }();
  (void)lowered;
  rocksdb::Options options;
  options.create_if_missing = true;
  options.error_if_exists = true;
  options.compression = rocksdb::kNoCompression;  // trained floats do not compress
  options.write_buffer_size = 64 << 20;
  options.max_background_jobs = 2;
  options.keep_log_file_num = 2;
  // The disk tier reads single rows, many of them absent: a Bloom filter answers most of those in memory.
  rocksdb::BlockBasedTableOptions table_options;
  table_options.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  // Point lookups: a hash index inside each data block, and a block cache for the blocks rows are read from.
  table_options.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
  table_options.block_cache = rocksdb::NewLRUCache(kBlockCacheBytes);
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table_options));
  return options;
}

bool Overlaps(const std::vector<KeyRange>& a, const std::vector<KeyRange>& b) {
  for (const KeyRange& x : a) {
    for (const KeyRange& y : b) {
      if (x.first <= y.last && y.first <= x.last) return true;
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShardStore>> ShardStore::Open(const CheckpointLayout& layout, int shard) {
  std::unique_ptr<ShardStore> store(new ShardStore(layout, shard));
  KESTREL_RETURN_IF_ERROR(store->Reset());
  return store;
}

ShardStore::ShardStore(const CheckpointLayout& layout, int shard)
    : layout_(layout), shard_(shard), disk_tier_(absl::StrCat(layout.LiveDir(shard), "/cold"), shard) {}

ShardStore::~ShardStore() = default;

absl::Status ShardStore::Reset() {
  disk_tier_.Detach();  // its files and held-back writes are of the store being dropped
  db_.reset();
  sst_checksums_.clear();
  const std::string dir = layout_.LiveDir(shard_);
  std::error_code error;
  fs::remove_all(dir, error);
  if (!error) fs::create_directories(fs::path(dir).parent_path(), error);
  if (error) {
    return absl::UnavailableError(absl::StrCat("cannot prepare the working store ", dir, ": ", error.message()));
  }
  rocksdb::DB* db = nullptr;
  KESTREL_RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(LiveOptions(), dir, &db),
                                    absl::StrCat("cannot open the working store ", dir)));
  db_.reset(db);
  disk_tier_.Attach(db);
  return absl::OkStatus();
}

absl::StatusOr<ShardCheckpoint> ShardStore::Checkpoint(Shard& shard, absl::string_view name) {
  KESTREL_RETURN_IF_ERROR(BeginCheckpoint(shard, name));
  return FinishCheckpoint();
}

absl::Status ShardStore::Snapshot(int rank, const std::string& dir) {
  std::error_code error;
  fs::create_directories(fs::path(dir).parent_path(), error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot create ", fs::path(dir).parent_path().string(), ": ", error.message()));
  }
  KESTREL_RETURN_IF_ERROR(FromRocks(db_->Flush(rocksdb::FlushOptions()), absl::StrFormat("server %d: flush", rank)));
  rocksdb::Checkpoint* raw = nullptr;
  KESTREL_RETURN_IF_ERROR(FromRocks(rocksdb::Checkpoint::Create(db_.get(), &raw), "creating a RocksDB checkpoint"));
  std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
  return FromRocks(checkpoint->CreateCheckpoint(dir, /*log_size_for_flush=*/0),
                   absl::StrFormat("server %d: snapshot into %s", rank, dir));
}

absl::Status ShardStore::BeginCheckpoint(Shard& shard, absl::string_view name) {
  KESTREL_RETURN_IF_ERROR(CheckpointLayout::CheckName(name));
  if (db_ == nullptr) return absl::FailedPreconditionError("the working store is not open");
  if (pending_ != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrFormat("server %d: checkpoint %s is still being written", shard_, pending_->name()));
  }
  // The checkpoint's part is the rank's: after a rescale renumbered this server it is not its id's.
  auto cut = std::make_unique<CheckpointCut>(std::string(name), layout_.ShardDir(name, shard.owner()), shard);
  shard.cut_memory().ResetPeak();
  // The cut: values, optimizer state, meta, deletions and admission sketches, with no request in between.
  KESTREL_RETURN_IF_ERROR(shard.Exclusive([&](const std::vector<Table*>& tables) -> absl::Status {
    bool disk_tier = false;
    for (Table* table : tables) disk_tier |= table->config().capacity().max_disk_bytes() > 0;
    if (rebase_) KESTREL_RETURN_IF_ERROR(StartAfresh(tables, disk_tier));
    cut->Take(tables);
    if (!write_inside_cut_) {
      cut->BeginCopyOnWrite();
      // The disk tier's writes into the store wait until the snapshot is cut (its reads are served by its files).
      if (disk_tier) disk_tier_.StartDeferring(&shard.cut_memory());
      return absl::OkStatus();
    }
    // TEST_WriteInsideTheCut: the rows and the snapshot are cut before requests resume.
    KESTREL_RETURN_IF_ERROR(cut->WriteInside(db_.get()));
    return Snapshot(cut->rank(), cut->dir());
  }));
  cut->answer().set_cut_seconds(absl::ToDoubleSeconds(absl::Now() - cut->start()));
  pending_ = std::move(cut);
  CrashPoint("server.checkpoint.cut");
  return absl::OkStatus();
}

absl::Status ShardStore::StartAfresh(const std::vector<Table*>& tables, bool disk_tier) {
  // The tombstones of the stripes not written are lost. Every row is written afresh: into a new store, or, when the
  // store holds a disk tier's rows (their only record; such tables leave no tombstones), into this one once the
  // other tables' rows are deleted from it.
  if (!disk_tier) KESTREL_RETURN_IF_ERROR(Reset());
  for (Table* table : tables) {
    if (disk_tier && table->config().capacity().max_disk_bytes() == 0) {
      KESTREL_RETURN_IF_ERROR(DeleteTableRows(table->config().name()));
    }
    table->MarkAllDirty();
  }
  rebase_ = false;
  return absl::OkStatus();
}

absl::Status ShardStore::Rebase() {
  pending_.reset();
  rebase_ = false;
  return Reset();
}

std::string ShardStore::pending_checkpoint() const { return pending_ == nullptr ? "" : pending_->name(); }

absl::StatusOr<ShardCheckpoint> ShardStore::FinishCheckpoint() {
  if (pending_ == nullptr) return absl::FailedPreconditionError(absl::StrFormat("server %d: no checkpoint cut", shard_));
  std::unique_ptr<CheckpointCut> cut = std::move(pending_);
  ShardCheckpoint& answer = cut->answer();
  if (cut->copy_on_write()) {
    absl::Status status = cut->WriteStripes(db_.get(), std::exchange(fail_cut_write_after_, -1));
    if (status.ok()) status = Snapshot(cut->rank(), cut->dir());
    // The disk tier's writes held back since the cut. Lost ones leave it without rows moved out of memory: the
    // shard fails as when its disk tier fails mid-push.
    const absl::Status deferred = disk_tier_.ApplyDeferred();
    if (!deferred.ok()) cut->shard().TierFailed(deferred).IgnoreError();  // answered below, as the write's error
    if (status.ok()) status = deferred;
    if (!status.ok()) {
      rebase_ = true;  // some rows of the cut may not be in the store: the next checkpoint writes every row
      return status;
    }
  }
  CrashPoint("server.checkpoint.snapshot_cut");
  KESTREL_RETURN_IF_ERROR(ListSnapshotFiles(cut->dir(), &answer));
  answer.set_write_seconds(absl::ToDoubleSeconds(cut->written_at() - cut->start()));
  answer.set_snapshot_seconds(absl::ToDoubleSeconds(absl::Now() - cut->written_at()));
  answer.set_retained_peak_bytes(cut->shard().cut_memory().peak());
  answer.set_backpressure_seconds(absl::ToDoubleSeconds(cut->shard().cut_memory().waited()));
  KLOG(Info) << absl::StrFormat(
      "server %d: checkpoint %s: cut in %.3f s; wrote %d changed rows (%d bytes) of %d in %.3f s, snapshot %.3f s; "
      "retained copies peaked at %d bytes",
      cut->rank(), cut->name(), answer.cut_seconds(), answer.rows_written(), answer.bytes_written(), answer.rows(),
      answer.write_seconds(), answer.snapshot_seconds(), answer.retained_peak_bytes());
  return std::move(answer);
}

absl::Status ShardStore::ListSnapshotFiles(const std::string& dir, ShardCheckpoint* answer) {
  std::error_code error;
  std::vector<std::string> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    if (entry.is_regular_file()) files.push_back(entry.path().filename().string());
  }
  if (error) return absl::UnavailableError(absl::StrCat("cannot list ", dir, ": ", error.message()));
  std::sort(files.begin(), files.end());
  std::map<std::string, CheckpointFile> live_ssts;
  for (const std::string& file : files) {
    const bool sst = absl::EndsWith(file, ".sst");
    CheckpointFile* entry = answer->add_files();
    if (auto it = sst_checksums_.find(file); sst && it != sst_checksums_.end()) {
      *entry = it->second;
    } else {
      KESTREL_ASSIGN_OR_RETURN(const FileCrc crc, Crc32cOfFile(absl::StrCat(dir, "/", file)));
      entry->set_name(file);
      entry->set_size(crc.size);
      entry->set_crc32c(crc.crc);
    }
    if (sst) live_ssts[file] = *entry;
  }
  sst_checksums_ = std::move(live_ssts);  // forget SSTs compacted away
  return absl::OkStatus();
}

absl::Status ShardStore::Restore(const std::optional<CheckpointManifest>& manifest, Shard& shard,
                                 uint64_t min_worker_generation) {
  // The working store is recreated inside the shard's exclusive section, before any row is loaded: rows a
  // bounded table moves to disk while loading go to the new store, and no request sees the old one go.
  pending_.reset();  // a cut not written is dropped with the state it was of
  rebase_ = false;   // the store is recreated
  auto reset = [this]() { return Reset(); };
  if (!manifest.has_value()) {
    KESTREL_RETURN_IF_ERROR(shard.Restore({}, min_worker_generation,
                                          [&](Shard::RowSink, Shard::SketchSink) { return reset(); }));
    KLOG(Info) << "server " << shard_ << ": reset to the job's beginning (no checkpoint)";
    return absl::OkStatus();
  }
  return Load(layout_, *manifest, shard, min_worker_generation, reset);
}

absl::Status ShardStore::LoadCheckpoint(const CheckpointLayout& layout, const CheckpointManifest& manifest,
                                        Shard& shard, uint64_t min_worker_generation) {
  return Load(layout, manifest, shard, min_worker_generation, [] { return absl::OkStatus(); });
}

absl::Status ShardStore::Load(const CheckpointLayout& layout, const CheckpointManifest& manifest, Shard& shard,
                              uint64_t min_worker_generation, absl::FunctionRef<absl::Status()> before_rows) {
  const std::string name = CheckpointLayout::CheckpointName(manifest.sequence());
  absl::StatusOr<Partition> old = Partition::Parse(manifest.partition());
  if (!old.ok()) {
    return absl::DataLossError(absl::StrCat("checkpoint ", name, ": bad partition in its manifest: ", old.status().message()));
  }
  if (manifest.shards_size() != old->num_servers()) {
    return absl::DataLossError(absl::StrFormat("checkpoint %s: its manifest lists %d shards for a %d-server partition",
                                               name, manifest.shards_size(), old->num_servers()));
  }
  // Every file of every shard this server reads is checked before anything changes.
  std::vector<int> sources;
  for (int s = 0; s < old->num_servers(); ++s) {
    if (!Overlaps(old->RangesOf(s), shard.ranges())) continue;
    KESTREL_RETURN_IF_ERROR(layout.VerifyShard(manifest, s));
    sources.push_back(s);
  }
  const std::vector<TableConfig> tables(manifest.tables().begin(), manifest.tables().end());
  uint64_t loaded = 0, read = 0, sketches = 0;
  const absl::Time start = absl::Now();
  absl::Status restored = shard.Restore(
      tables, min_worker_generation, [&](Shard::RowSink sink, Shard::SketchSink sketch_sink) -> absl::Status {
        KESTREL_RETURN_IF_ERROR(before_rows());
        for (int s : sources) {
          KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointTableReader> reader,
                                   CheckpointTableReader::Open(layout, manifest, s, /*table=*/""));
          for (; reader->Valid(); ++read) {
            absl::StatusOr<bool> taken = sink(reader->table(), reader->key(), reader->row());
            if (!taken.ok()) {
              return absl::DataLossError(absl::StrCat(reader->where(), ": ", taken.status().message()));
            }
            loaded += *taken;
            KESTREL_RETURN_IF_ERROR(reader->Next());
          }
          KESTREL_RETURN_IF_ERROR(reader->ForEachSketch(
              [&](absl::string_view table, const AdmissionSketchState& state) -> absl::Status {
                absl::StatusOr<bool> taken = sketch_sink(table, state);
                if (!taken.ok()) {
                  return absl::DataLossError(absl::StrCat(reader->where(), ": ", taken.status().message()));
                }
                sketches += *taken;
                return absl::OkStatus();
              }));
        }
        return absl::OkStatus();
      });
  KESTREL_RETURN_IF_ERROR(restored);
  KLOG(Info) << absl::StrFormat(
      "server %d: loaded checkpoint %s (clock %d): %d rows from the parts of %d server(s) (%d read), %d admission sketch(es) in %.3f s",
      shard.owner(), name, manifest.clock(), loaded, sources.size(), read, sketches,
      absl::ToDoubleSeconds(absl::Now() - start));
  return absl::OkStatus();
}

absl::Status ShardStore::DeleteTableRows(absl::string_view table) {
  std::string begin, end;
  AppendRowKey(table, 0, &begin);
  AppendRowKey(table, ~uint64_t{0}, &end);
  end.push_back('\0');  // past the last key
  return FromRocks(db_->DeleteRange(StoreWriteOptions(), db_->DefaultColumnFamily(), begin, end),
                   absl::StrFormat("server %d: deleting table '%s' from the store", shard_, table));
}

}  // namespace kestrel
