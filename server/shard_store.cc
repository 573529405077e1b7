#include "server/shard_store.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/crc32c.h"
#include "common/fault_injection.h"
#include "common/logging.h"
#include "common/partition.h"
#include "common/status.h"
#include "server/checkpoint_row_codec.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/options.h"
#include "rocksdb/table.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_batch.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

// The working store's block cache (the disk tier's reads), outside the tables' memory budgets.
constexpr size_t kBlockCacheBytes = size_t{32} << 20;
// Rows are flushed to RocksDB in write batches of about this many bytes.
constexpr size_t kBatchBytes = size_t{8} << 20;

// Writes into the working store: no WAL, the working store never survives a crash (see the class comment).
rocksdb::WriteOptions StoreWriteOptions() {
  rocksdb::WriteOptions options;
  options.disableWAL = true;
  return options;
}

// Keeps RocksDB from writing LOG files into checkpoint directories it opens read-only.
class NullLogger final : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char* /*format*/, va_list /*ap*/) override {}
};

absl::Status FromRocks(const rocksdb::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": ", status.ToString());
  if (status.IsCorruption()) return absl::DataLossError(message);
  if (status.IsNotFound() || status.IsPathNotFound()) return absl::DataLossError(message);
  return absl::UnavailableError(message);
}

// Store keys below kTablesStart are metadata, not rows (table names start with [A-Za-z0-9_.-]).
constexpr char kMetaPrefix = '\x01';
constexpr absl::string_view kTablesStart = "\x02";
// A table's admission sketch (AdmissionSketchState) is kept under kSketchPrefix + table name.
const std::string& SketchPrefix() {
  static const std::string* prefix = new std::string(std::string(1, kMetaPrefix) + std::string("sketch\0", 7));
  return *prefix;
}

void AppendRowKey(absl::string_view table, uint64_t key, std::string* out) {
  out->assign(table.data(), table.size());
  out->push_back('\0');
  for (int shift = 56; shift >= 0; shift -= 8) out->push_back(static_cast<char>(key >> shift));
}

// Splits a stored key into (table, key); false when it is not one.
bool ParseRowKey(const rocksdb::Slice& stored, absl::string_view* table, uint64_t* key) {
  if (stored.size() < 10 || stored.data()[stored.size() - 9] != '\0') return false;
  *table = absl::string_view(stored.data(), stored.size() - 9);
  uint64_t k = 0;
  for (size_t i = stored.size() - 8; i < stored.size(); ++i) k = (k << 8) | static_cast<uint8_t>(stored.data()[i]);
  *key = k;
  return true;
}

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

// Opens a checkpoint's shard directory read-only (no LOG file written into it).
absl::StatusOr<std::unique_ptr<rocksdb::DB>> OpenSnapshot(const std::string& dir, const std::string& where) {
  rocksdb::Options options;
  options.info_log = std::make_shared<NullLogger>();
  options.paranoid_checks = true;
  rocksdb::DB* raw = nullptr;
  KESTREL_RETURN_IF_ERROR(FromRocks(rocksdb::DB::OpenForReadOnly(options, dir, &raw), absl::StrCat(where, ": cannot open")));
  return std::unique_ptr<rocksdb::DB>(raw);
}

rocksdb::ReadOptions SnapshotReadOptions() {
  rocksdb::ReadOptions read_options;
  read_options.verify_checksums = true;
  read_options.fill_cache = false;
  return read_options;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointTableReader>> CheckpointTableReader::Open(
    const CheckpointLayout& layout, const CheckpointManifest& manifest, int shard, absl::string_view table) {
  const std::string name = CheckpointLayout::CheckpointName(manifest.sequence());
  const std::string dir = layout.ShardDir(name, shard);
  std::unique_ptr<CheckpointTableReader> reader(new CheckpointTableReader());
  reader->where_ = absl::StrFormat("checkpoint %s, shard %d (%s)", name, shard, dir);
  if (!table.empty()) reader->prefix_ = absl::StrCat(table, absl::string_view("\0", 1));
  for (const TableConfig& config : manifest.tables()) {
    if (!table.empty() && config.name() != table) continue;
    absl::StatusOr<CheckpointRowCodec> codec = CheckpointRowCodec::Create(config);
    if (!codec.ok()) {
      return absl::DataLossError(absl::StrCat(reader->where_, ": table '", config.name(), "': ", codec.status().message()));
    }
    reader->codecs_.emplace(config.name(), *std::move(codec));
  }
  KESTREL_ASSIGN_OR_RETURN(reader->db_, OpenSnapshot(dir, reader->where_));
  reader->it_.reset(reader->db_->NewIterator(SnapshotReadOptions()));
  reader->it_->Seek(table.empty() ? rocksdb::Slice(kTablesStart.data(), kTablesStart.size()) : rocksdb::Slice(reader->prefix_));
  KESTREL_RETURN_IF_ERROR(reader->Load());
  return reader;
}

CheckpointTableReader::~CheckpointTableReader() {
  it_.reset();  // before the DB it reads
}

absl::Status CheckpointTableReader::Load() {
  valid_ = false;
  if (!it_->Valid()) return FromRocks(it_->status(), absl::StrCat(where_, ": reading"));
  if (!it_->key().starts_with(prefix_)) return absl::OkStatus();  // past the table
  const rocksdb::Slice value = it_->value();
  if (!ParseRowKey(it_->key(), &table_, &key_)) return absl::DataLossError(absl::StrCat(where_, ": malformed row"));
  const absl::string_view record(value.data(), value.size());
  if (CheckpointRowCodec::IsQ8(record)) {  // a compact row: decoded by its table's codec
    auto codec = codecs_.find(table_);
    if (codec == codecs_.end()) {
      return absl::DataLossError(absl::StrCat(where_, ": a compact row of table '", table_, "', which the manifest lacks"));
    }
    absl::Status decoded = codec->second.Decode(record, &row_);
    if (!decoded.ok()) return absl::DataLossError(absl::StrCat(where_, ": ", decoded.message()));
  } else {
    row_.resize(value.size() / sizeof(float));
    std::memcpy(row_.data(), value.data(), value.size());
  }
  valid_ = true;
  return absl::OkStatus();
}

absl::Status CheckpointTableReader::Next() {
  it_->Next();
  return Load();
}

// Runs `fn` on a thread of its own at a lower CPU priority than the request handlers (nice + kWriterNice): a
// checkpoint written while training goes on takes the CPU training leaves, not a core from it.
static constexpr int kWriterNice = 10;

static absl::Status RunInBackground(absl::FunctionRef<absl::Status()> fn) {
  absl::Status status;
  std::thread writer([&] {
    const pid_t tid = static_cast<pid_t>(::syscall(SYS_gettid));
    errno = 0;
    const int nice = ::getpriority(PRIO_PROCESS, tid);
    if (errno == 0) ::setpriority(PRIO_PROCESS, tid, std::min(nice + kWriterNice, 19));  // best effort
    status = fn();
  });
  writer.join();
  return status;
}

absl::StatusOr<std::unique_ptr<ShardStore>> ShardStore::Open(const CheckpointLayout& layout, int shard) {
  std::unique_ptr<ShardStore> store(new ShardStore(layout, shard));
  KESTREL_RETURN_IF_ERROR(store->Reset());
  return store;
}

ShardStore::ShardStore(const CheckpointLayout& layout, int shard) : layout_(layout), shard_(shard) {}

ShardStore::~ShardStore() = default;

absl::Status ShardStore::Reset() {
  {
    absl::MutexLock lock(&files_mu_);
    files_.clear();  // a file being read lives until its Read is done
  }
  {
    absl::MutexLock lock(&deferred_mu_);
    DropDeferredLocked();  // of the store being dropped
  }
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
  return absl::OkStatus();
}

// Rows, tombstones and sketches of one checkpoint into the working store, in write batches of about kBatchBytes.
class ShardStore::BatchWriter {
 public:
  BatchWriter(rocksdb::DB* db, int rank) : db_(db), rank_(rank) {}

  // The rows Put writes next are of `config` (encoded by its checkpoint codec).
  absl::Status StartTable(const TableConfig& config) {
    KESTREL_ASSIGN_OR_RETURN(CheckpointRowCodec codec, CheckpointRowCodec::Create(config));
    codec_.emplace(std::move(codec));
    return absl::OkStatus();
  }
  absl::Status Put(absl::string_view table, uint64_t k, absl::Span<const float> row) {
    AppendRowKey(table, k, &key_);
    rocksdb::Slice value(reinterpret_cast<const char*>(row.data()), row.size() * sizeof(float));
    if (codec_.has_value() && codec_->codec() != CHECKPOINT_FP32) {
      codec_->Encode(row, &value_);
      value = rocksdb::Slice(value_);
    }
    batch_.Put(key_, value);
    ++rows_;
    bytes_ += key_.size() + value.size();
    return MaybeFlush();
  }
  absl::Status Delete(absl::string_view table, uint64_t k) {
    AppendRowKey(table, k, &key_);
    batch_.Delete(key_);
    ++deleted_;
    return MaybeFlush();
  }
  absl::Status PutSketch(absl::string_view table, const AdmissionSketchState& sketch) {
    const std::string value = sketch.SerializeAsString();
    batch_.Put(SketchPrefix() + std::string(table), value);
    bytes_ += value.size();
    return MaybeFlush();
  }
  absl::Status Flush() {
    if (batch_.Count() == 0) return absl::OkStatus();
    KESTREL_RETURN_IF_ERROR(
        FromRocks(db_->Write(StoreWriteOptions(), &batch_), absl::StrFormat("shard %d: writing checkpoint rows", rank_)));
    batch_.Clear();
    return absl::OkStatus();
  }
  void Count(ShardCheckpoint* answer) const {
    answer->set_rows_written(rows_);
    answer->set_bytes_written(bytes_);
    answer->set_rows_deleted(deleted_);
  }

 private:
  absl::Status MaybeFlush() { return batch_.GetDataSize() >= kBatchBytes ? Flush() : absl::OkStatus(); }

  rocksdb::DB* const db_;
  const int rank_;
  rocksdb::WriteBatch batch_;
  std::string key_;
  std::string value_;  // an encoded row
  std::optional<CheckpointRowCodec> codec_;
  uint64_t rows_ = 0, bytes_ = 0, deleted_ = 0;
};

struct ShardStore::PendingCut {
  std::string name;
  std::string dir;  // the shard's directory of the checkpoint
  int rank = 0;
  Shard* shard = nullptr;
  ShardCheckpoint answer;  // shard, dir, tables, rows so far
  std::vector<Table*> tables;
  std::vector<std::optional<AdmissionSketchState>> sketches;  // by table: the cut's, when it changed
  bool written = false;  // stop the world: rows written and snapshot cut inside the exclusive section
  absl::Time start;
  absl::Time written_at;
};

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
  KESTREL_RETURN_IF_ERROR(FromRocks(db_->Flush(rocksdb::FlushOptions()), absl::StrFormat("shard %d: flush", rank)));
  rocksdb::Checkpoint* raw = nullptr;
  KESTREL_RETURN_IF_ERROR(FromRocks(rocksdb::Checkpoint::Create(db_.get(), &raw), "creating a RocksDB checkpoint"));
  std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
  return FromRocks(checkpoint->CreateCheckpoint(dir, /*log_size_for_flush=*/0),
                   absl::StrFormat("shard %d: snapshot into %s", rank, dir));
}

absl::Status ShardStore::BeginCheckpoint(Shard& shard, absl::string_view name) {
  KESTREL_RETURN_IF_ERROR(CheckpointLayout::CheckName(name));
  if (db_ == nullptr) return absl::FailedPreconditionError("the working store is not open");
  if (pending_ != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrFormat("shard %d: checkpoint %s is still being written", shard_, pending_->name));
  }
  auto cut = std::make_unique<PendingCut>();
  cut->start = absl::Now();
  cut->name = std::string(name);
  cut->shard = &shard;
  // The checkpoint's part is the rank's: after a rescale renumbered this server it is not its id's.
  cut->rank = shard.owner();
  cut->dir = layout_.ShardDir(name, cut->rank);
  cut->answer.set_shard(cut->rank);
  cut->answer.set_dir(CheckpointLayout::ShardDirName(cut->rank));
  shard.cut_memory().ResetPeak();
  // The cut: values, optimizer state, meta, deletions and admission sketches, with no request in between.
  KESTREL_RETURN_IF_ERROR(shard.Exclusive([&](const std::vector<Table*>& tables) -> absl::Status {
    bool disk_tier = false;
    for (Table* table : tables) disk_tier |= table->config().capacity().max_disk_bytes() > 0;
    if (rebase_) {
      // A copy-on-write write failed part-way: the store is of no known state (the tombstones of the stripes not
      // written are lost). Every row is written afresh: into a new store, or, when the store holds a disk tier's
      // rows (their only record; such tables leave no tombstones), into this one once the other tables' rows are
      // deleted from it.
      if (!disk_tier) KESTREL_RETURN_IF_ERROR(Reset());
      for (Table* table : tables) {
        if (disk_tier && table->config().capacity().max_disk_bytes() == 0) {
          KESTREL_RETURN_IF_ERROR(DeleteTableRows(table->config().name()));
        }
        table->MarkAllDirty();
      }
      rebase_ = false;
    }
    for (Table* table : tables) {
      *cut->answer.add_tables() = table->config();
      cut->answer.set_rows(cut->answer.rows() + table->num_rows());
    }
    cut->tables = tables;
    if (!write_inside_cut_) {
      for (Table* table : tables) cut->sketches.push_back(table->BeginCut());
      // The disk tier's writes into the store wait until the snapshot is cut (its reads are served by its files).
      if (disk_tier) StartDeferring(&shard.cut_memory());
      return absl::OkStatus();
    }
    // TEST_WriteInsideTheCut: the rows and the snapshot are cut before requests resume.
    BatchWriter writer(db_.get(), cut->rank);
    for (Table* table : tables) {
      const std::string& table_name = table->config().name();
      KESTREL_RETURN_IF_ERROR(writer.StartTable(table->config()));
      // Rows that left the table since the last checkpoint: a tombstone, not a resurrection on restore (written
      // before the rows: a key that left and came back is a row again).
      KESTREL_RETURN_IF_ERROR(
          table->ForEachTombstone([&](uint64_t k) { return writer.Delete(table_name, k); }));
      KESTREL_RETURN_IF_ERROR(table->ForEachDirtyRow(
          [&](uint64_t k, absl::Span<const float> row) { return writer.Put(table_name, k, row); }));
      if (table->sketch_dirty()) {
        std::optional<AdmissionSketchState> sketch = table->SketchState();
        if (sketch.has_value()) KESTREL_RETURN_IF_ERROR(writer.PutSketch(table_name, *sketch));
      }
    }
    KESTREL_RETURN_IF_ERROR(writer.Flush());
    CrashPoint("server.checkpoint.rows_written");
    // The store now holds every change: the next checkpoint starts from here.
    for (Table* table : tables) table->ClearDirty();
    writer.Count(&cut->answer);
    cut->written_at = absl::Now();
    KESTREL_RETURN_IF_ERROR(Snapshot(cut->rank, cut->dir));
    cut->written = true;
    return absl::OkStatus();
  }));
  cut->answer.set_cut_seconds(absl::ToDoubleSeconds(absl::Now() - cut->start));
  pending_ = std::move(cut);
  CrashPoint("server.checkpoint.cut");
  return absl::OkStatus();
}

absl::Status ShardStore::Rebase() {
  pending_.reset();
  rebase_ = false;
  return Reset();
}

std::string ShardStore::pending_checkpoint() const { return pending_ == nullptr ? "" : pending_->name; }

absl::Status ShardStore::WriteCut(PendingCut& cut) {
  BatchWriter writer(db_.get(), cut.rank);
  absl::Status status;
  int64_t rows_before_failure = std::exchange(fail_cut_write_after_, -1);  // TEST_FailCutWriteAfter
  const size_t half = cut.tables.size() * Table::kStripes / 2;
  size_t stripes_written = 0;
  for (size_t t = 0; t < cut.tables.size(); ++t) {
    Table* table = cut.tables[t];
    const std::string& table_name = table->config().name();
    if (status.ok()) status = writer.StartTable(table->config());
    for (int si = 0; si < Table::kStripes; ++si) {
      if (!status.ok()) {  // end the remaining stripes' cuts (freeing their copies) without writing them
        table->WriteCutStripe(si, [](uint64_t) { return absl::OkStatus(); },
                              [](uint64_t, absl::Span<const float>) { return absl::OkStatus(); })
            .IgnoreError();
        continue;
      }
      status = table->WriteCutStripe(
          si, [&](uint64_t k) { return writer.Delete(table_name, k); },
          [&](uint64_t k, absl::Span<const float> row) {
            if (rows_before_failure >= 0 && rows_before_failure-- == 0) {
              return absl::UnavailableError("injected (TEST_FailCutWriteAfter)");
            }
            return writer.Put(table_name, k, row);
          });
      // Half the stripes written: training has gone on past the cut, part of it is in the store.
      if (status.ok() && ++stripes_written == half) CrashPoint("server.checkpoint.half_written");
    }
    if (status.ok() && cut.sketches[t].has_value()) status = writer.PutSketch(table_name, *cut.sketches[t]);
  }
  if (status.ok()) status = writer.Flush();
  writer.Count(&cut.answer);
  return status;
}

absl::StatusOr<ShardCheckpoint> ShardStore::FinishCheckpoint() {
  if (pending_ == nullptr) return absl::FailedPreconditionError(absl::StrFormat("shard %d: no checkpoint cut", shard_));
  std::unique_ptr<PendingCut> cut = std::move(pending_);
  ShardCheckpoint& answer = cut->answer;
  const std::string& dir = cut->dir;
  if (!cut->written) {
    absl::Status status = RunInBackground([&] { return WriteCut(*cut); });
    if (status.ok()) {
      CrashPoint("server.checkpoint.rows_written");
      cut->written_at = absl::Now();
      status = Snapshot(cut->rank, dir);
    }
    // The disk tier's writes held back since the cut. Lost ones leave it without rows moved out of memory: the
    // shard fails as when its disk tier fails mid-push.
    const absl::Status deferred = ApplyDeferred();
    if (!deferred.ok()) cut->shard->TierFailed(deferred).IgnoreError();  // answered below, as the write's error
    if (status.ok()) status = deferred;
    if (!status.ok()) {
      rebase_ = true;  // some rows of the cut may not be in the store: the next checkpoint writes every row
      return status;
    }
  }
  CrashPoint("server.checkpoint.snapshot_cut");
  std::error_code error;

  // The snapshot's files, with checksums (an SST file's once: they are immutable).
  std::vector<std::string> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    if (entry.is_regular_file()) files.push_back(entry.path().filename().string());
  }
  if (error) return absl::UnavailableError(absl::StrCat("cannot list ", dir, ": ", error.message()));
  std::sort(files.begin(), files.end());
  std::map<std::string, CheckpointFile> live_ssts;
  for (const std::string& file : files) {
    const bool sst = absl::EndsWith(file, ".sst");
    CheckpointFile* entry = answer.add_files();
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
  answer.set_write_seconds(absl::ToDoubleSeconds(cut->written_at - cut->start));
  answer.set_snapshot_seconds(absl::ToDoubleSeconds(absl::Now() - cut->written_at));
  answer.set_retained_peak_bytes(cut->shard->cut_memory().peak());
  answer.set_backpressure_seconds(absl::ToDoubleSeconds(cut->shard->cut_memory().waited()));
  KLOG(Info) << absl::StrFormat(
      "shard %d: checkpoint %s: cut in %.3f s; wrote %d changed rows (%d bytes) of %d in %.3f s, snapshot %.3f s; "
      "retained copies peaked at %d bytes",
      cut->rank, cut->name, answer.cut_seconds(), answer.rows_written(), answer.bytes_written(), answer.rows(),
      answer.write_seconds(), answer.snapshot_seconds(), answer.retained_peak_bytes());
  return std::move(answer);
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
    KLOG(Info) << "shard " << shard_ << ": reset to the job's beginning (no checkpoint)";
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
      "shard %d: loaded checkpoint %s (clock %d): %d rows from %d shard(s) (%d read), %d admission sketch(es) in %.3f s",
      shard.owner(), name, manifest.clock(), loaded, sources.size(), read, sketches,
      absl::ToDoubleSeconds(absl::Now() - start));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ColdRowFile>> ShardStore::ColdFile(absl::string_view table, int floats,
                                                                   bool create) {
  if (table.empty() || table.size() > kMaxTableName) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shard %d: disk tier table names are 1 to %d bytes, not %d", shard_, kMaxTableName,
                        table.size()));
  }
  std::shared_ptr<ColdRowFile> file;
  {
    absl::ReaderMutexLock lock(&files_mu_);
    if (auto it = files_.find(table); it != files_.end()) file = it->second;
  }
  if (file == nullptr && create) {
    absl::MutexLock lock(&files_mu_);
    std::shared_ptr<ColdRowFile>& slot = files_[table];
    if (slot == nullptr) {
      // The file name is the table name's hex, never the name itself.
      const std::string dir = absl::StrCat(layout_.LiveDir(shard_), "/cold");
      std::error_code error;
      fs::create_directories(dir, error);
      if (error) {
        files_.erase(std::string(table));
        return absl::UnavailableError(
            absl::StrCat("cannot create the disk tier directory ", dir, ": ", error.message()));
      }
      absl::StatusOr<std::unique_ptr<ColdRowFile>> created =
          ColdRowFile::Create(absl::StrCat(dir, "/", absl::BytesToHexString(table), ".rows"), floats);
      if (!created.ok()) {
        files_.erase(std::string(table));
        return created.status();
      }
      slot = std::move(created).value();
    }
    file = slot;
  }
  if (file != nullptr && file->floats() != floats) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "shard %d: the disk tier holds rows of %d floats for table '%s', not %d: a table's row width cannot change "
        "while it has rows on disk (restore or rescale first)",
        shard_, file->floats(), table, floats));
  }
  return file;
}

absl::Status ShardStore::Write(absl::string_view table, absl::Span<const uint64_t> keys,
                               absl::Span<const float> rows) {
  if (keys.empty()) return absl::OkStatus();
  const size_t floats = rows.size() / keys.size();
  if (floats == 0 || floats > ColdRowFile::kMaxFloats || rows.size() != floats * keys.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "shard %d: disk tier write of %d keys with %d floats: not a whole row of 1 to %d floats per key", shard_,
        keys.size(), rows.size(), ColdRowFile::kMaxFloats));
  }
  KESTREL_ASSIGN_OR_RETURN(const std::shared_ptr<ColdRowFile> file,
                           ColdFile(table, static_cast<int>(floats), /*create=*/true));
  rocksdb::WriteBatch batch;
  std::string key;
  for (size_t i = 0; i < keys.size(); ++i) {
    AppendRowKey(table, keys[i], &key);
    batch.Put(key, rocksdb::Slice(reinterpret_cast<const char*>(rows.data() + i * floats), sizeof(float) * floats));
  }
  KESTREL_RETURN_IF_ERROR(WriteOrDefer(std::move(batch), "disk tier write"));
  return file->Write(keys, rows);
}

absl::Status ShardStore::Delete(absl::string_view table, absl::Span<const uint64_t> keys) {
  if (keys.empty()) return absl::OkStatus();
  rocksdb::WriteBatch batch;
  std::string key;
  for (uint64_t k : keys) {
    AppendRowKey(table, k, &key);
    batch.Delete(key);
  }
  KESTREL_RETURN_IF_ERROR(WriteOrDefer(std::move(batch), "disk tier delete"));
  std::shared_ptr<ColdRowFile> file;
  {
    absl::ReaderMutexLock lock(&files_mu_);
    if (auto it = files_.find(table); it != files_.end()) file = it->second;
  }
  if (file != nullptr) file->Delete(keys);
  return absl::OkStatus();
}

absl::Status ShardStore::WriteOrDefer(rocksdb::WriteBatch batch, const char* what) {
  absl::MutexLock lock(&deferred_mu_);
  if (deferred_memory_ != nullptr) {
    deferred_bytes_ += batch.GetDataSize();
    deferred_memory_->Add(batch.GetDataSize());
    deferred_.push_back(std::move(batch));
    return absl::OkStatus();
  }
  return FromRocks(db_->Write(StoreWriteOptions(), &batch), absl::StrFormat("shard %d: %s", shard_, what));
}

void ShardStore::StartDeferring(CutMemory* memory) {
  absl::MutexLock lock(&deferred_mu_);
  deferred_memory_ = memory;
}

absl::Status ShardStore::ApplyDeferred() {
  absl::MutexLock lock(&deferred_mu_);
  absl::Status status;
  if (fail_held_back_writes_ && !deferred_.empty()) status = absl::UnavailableError("injected (TEST_FailHeldBackWrites)");
  for (rocksdb::WriteBatch& batch : deferred_) {
    if (status.ok()) {
      status = FromRocks(db_->Write(StoreWriteOptions(), &batch),
                         absl::StrFormat("shard %d: disk tier writes held back during a checkpoint", shard_));
    }
  }
  DropDeferredLocked();
  return status;
}

absl::Status ShardStore::DeleteTableRows(absl::string_view table) {
  std::string begin, end;
  AppendRowKey(table, 0, &begin);
  AppendRowKey(table, ~uint64_t{0}, &end);
  end.push_back('\0');  // past the last key
  return FromRocks(db_->DeleteRange(StoreWriteOptions(), db_->DefaultColumnFamily(), begin, end),
                   absl::StrFormat("shard %d: deleting table '%s' from the store", shard_, table));
}

void ShardStore::DropDeferredLocked() {
  if (deferred_memory_ != nullptr) deferred_memory_->Release(deferred_bytes_);
  deferred_.clear();
  deferred_bytes_ = 0;
  deferred_memory_ = nullptr;
}

absl::Status ShardStore::Read(absl::string_view table, absl::Span<const uint64_t> keys, int floats, float* rows,
                              std::vector<uint8_t>* found) {
  const size_t n = keys.size();
  found->assign(n, 0);
  if (n == 0) return absl::OkStatus();
  if (!cold_reads_from_rocksdb_.load(std::memory_order_relaxed)) {
    KESTREL_ASSIGN_OR_RETURN(const std::shared_ptr<ColdRowFile> file, ColdFile(table, floats, /*create=*/false));
    if (file == nullptr) return absl::OkStatus();
    return file->Read(keys, rows, absl::MakeSpan(*found));
  }
  thread_local std::vector<std::string> stored_keys;
  thread_local std::vector<rocksdb::Slice> slices;
  stored_keys.resize(n);
  slices.resize(n);
  for (size_t i = 0; i < n; ++i) {
    AppendRowKey(table, keys[i], &stored_keys[i]);
    slices[i] = stored_keys[i];
  }
  std::vector<rocksdb::PinnableSlice> values(n);
  std::vector<rocksdb::Status> statuses(n);
  rocksdb::ReadOptions read_options;
  db_->MultiGet(read_options, db_->DefaultColumnFamily(), n, slices.data(), values.data(), statuses.data(),
                /*sorted_input=*/false);
  const size_t row_bytes = sizeof(float) * floats;
  for (size_t i = 0; i < n; ++i) {
    if (statuses[i].IsNotFound()) continue;
    KESTREL_RETURN_IF_ERROR(FromRocks(statuses[i], absl::StrFormat("shard %d: disk tier read", shard_)));
    if (values[i].size() != row_bytes) {
      return absl::DataLossError(absl::StrFormat("shard %d: disk tier row of table '%s' has %d bytes, expected %d",
                                                 shard_, table, values[i].size(), row_bytes));
    }
    std::memcpy(rows + i * floats, values[i].data(), row_bytes);
    (*found)[i] = 1;
  }
  return absl::OkStatus();
}

ShardStore::ColdFileStats ShardStore::cold_file_stats() const {
  ColdFileStats stats;
  absl::ReaderMutexLock lock(&files_mu_);
  for (const auto& [name, file] : files_) {
    stats.rows += file->size();
    stats.index_bytes += file->memory_bytes();
    stats.file_bytes += file->file_bytes();
  }
  return stats;
}

absl::StatusOr<uint64_t> ShardStore::TEST_DropColdCachedPages() {
  absl::ReaderMutexLock lock(&files_mu_);
  uint64_t resident = 0;
  for (const auto& [name, file] : files_) {
    KESTREL_RETURN_IF_ERROR(file->TEST_DropCachedPages());
    KESTREL_ASSIGN_OR_RETURN(const uint64_t pages, file->ResidentPages());
    resident += pages;
  }
  return resident;
}

absl::Status CheckpointTableReader::ForEachSketch(
    absl::FunctionRef<absl::Status(absl::string_view table, const AdmissionSketchState& state)> fn) {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(SnapshotReadOptions()));
  const std::string& prefix = SketchPrefix();
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    AdmissionSketchState state;
    if (!state.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return absl::DataLossError(absl::StrCat(where_, ": malformed admission sketch"));
    }
    const rocksdb::Slice key = it->key();
    KESTREL_RETURN_IF_ERROR(fn(absl::string_view(key.data() + prefix.size(), key.size() - prefix.size()), state));
  }
  return FromRocks(it->status(), absl::StrCat(where_, ": reading admission sketches"));
}

}  // namespace kestrel
