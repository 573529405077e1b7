#include "server/checkpoint_cut.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/checkpoint_layout.h"
#include "common/fault_injection.h"
#include "common/status.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "server/checkpoint_row_codec.h"
#include "server/checkpoint_rows.h"

namespace kestrel {
namespace {

// Rows are flushed to RocksDB in write batches of about this many bytes.
constexpr size_t kBatchBytes = size_t{8} << 20;

// Runs `fn` on a thread of its own at a lower CPU priority than the request handlers (nice + kWriterNice): a
// checkpoint written while training goes on takes the CPU training leaves, not a core from it.
constexpr int kWriterNice = 10;

[[nodiscard]] absl::Status RunInBackground(absl::FunctionRef<absl::Status()> fn) {
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

// Rows, tombstones and sketches of one checkpoint into the working store, in write batches of about kBatchBytes.
class BatchWriter {
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
    KESTREL_RETURN_IF_ERROR(FromRocks(db_->Write(StoreWriteOptions(), &batch_),
                                      absl::StrFormat("server %d: writing checkpoint rows", rank_)));
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

}  // namespace

CheckpointCut::CheckpointCut(std::string name, std::string dir, Shard& shard)
    : name_(std::move(name)), dir_(std::move(dir)), shard_(&shard), rank_(shard.owner()), start_(absl::Now()) {
  answer_.set_shard(rank_);
  answer_.set_dir(CheckpointLayout::ShardDirName(rank_));
}

void CheckpointCut::Take(const std::vector<Table*>& tables) {
  for (Table* table : tables) {
    *answer_.add_tables() = table->config();
    answer_.set_rows(answer_.rows() + table->num_rows());
  }
  tables_ = tables;
}

void CheckpointCut::BeginCopyOnWrite() {
  for (Table* table : tables_) sketches_.push_back(table->BeginCut());
  copy_on_write_ = true;
}

absl::Status CheckpointCut::WriteInside(rocksdb::DB* db) {
  BatchWriter writer(db, rank_);
  for (Table* table : tables_) {
    const std::string& table_name = table->config().name();
    KESTREL_RETURN_IF_ERROR(writer.StartTable(table->config()));
    // Rows that left the table since the last checkpoint: a tombstone, not a resurrection on restore (written
    // before the rows: a key that left and came back is a row again).
    KESTREL_RETURN_IF_ERROR(table->ForEachTombstone([&](uint64_t k) { return writer.Delete(table_name, k); }));
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
  for (Table* table : tables_) table->ClearDirty();
  writer.Count(&answer_);
  written_at_ = absl::Now();
  return absl::OkStatus();
}

absl::Status CheckpointCut::WriteStripes(rocksdb::DB* db, int64_t fail_after_rows) {
  KESTREL_RETURN_IF_ERROR(RunInBackground([&] { return WriteStripesNow(db, fail_after_rows); }));
  CrashPoint("server.checkpoint.rows_written");
  written_at_ = absl::Now();
  return absl::OkStatus();
}

absl::Status CheckpointCut::WriteStripesNow(rocksdb::DB* db, int64_t fail_after_rows) {
  BatchWriter writer(db, rank_);
  absl::Status status;
  int64_t rows_before_failure = fail_after_rows;
  const size_t half = tables_.size() * Table::kStripes / 2;
  size_t stripes_written = 0;
  for (size_t t = 0; t < tables_.size(); ++t) {
    Table* table = tables_[t];
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
    if (status.ok() && sketches_[t].has_value()) status = writer.PutSketch(table_name, *sketches_[t]);
  }
  if (status.ok()) status = writer.Flush();
  writer.Count(&answer_);
  return status;
}

}  // namespace kestrel
