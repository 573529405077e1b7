// checkpoint_bench: ShardStore checkpoint and restore throughput, against RocksDB's own batched write rate.
//
//   bench/run_checkpoint_bench.sh               # builds with -c opt, runs the defaults, writes bench/results
//   bench/run_checkpoint_bench.sh --rows=100000 --runs=3 --output=/tmp/quick.md
//
// One process, one Shard (Partition::Uniform(1)) with one sparse table "emb": dim 16, NORMAL initializer, ADAM,
// so a stored row is 16 values + 33 optimizer floats (m, v, step) = 196 bytes, and RocksDB's key is "emb", a
// zero byte and the key as 8 bytes big-endian (12 bytes): 208 bytes per row. The table is filled once with
// --rows distinct random keys (random batches of --batch keys, each batch sorted, as workers push them).
// Then every run (--runs) measures, in this order:
//   1. RocksDB's own rate, the ceiling: a fresh RocksDB with ShardStore's working-store options (no compression,
//      64 MiB write buffer, 2 background jobs), WAL disabled, write batches of ~8 MiB, holding exactly the
//      table's rows (same keys, same bytes), then Flush. Twice: in the table's storage order (stripe by
//      stripe, rows within a stripe in insertion order: how checkpoints wrote before they sorted each stripe)
//      and in key order (how Table::ForEachDirtyRow hands rows to the checkpoint now).
//   2. Full checkpoint: a fresh ShardStore (empty working store), every row marked dirty (Table::MarkAllDirty
//      under Shard::Exclusive), ShardStore::Checkpoint timed alone; then the manifest is committed
//      (AddShardsToManifest, WriteManifest, MoveLatest; timed apart).
//   3. Incremental checkpoint: a push of --changed random existing keys (default 1% of the rows), then
//      ShardStore::Checkpoint of the same store again.
//   4. Restore: the LATEST manifest (the incremental checkpoint) into a fresh Shard with a fresh ShardStore
//      (the source store is closed first: both use the shard's working directory); ShardStore::Restore timed,
//      which includes its CRC-32C check of every file, reading the rows and re-creating the working store. The
//      restored shard's Fingerprint() must equal the source's, or the bench fails.
// Ratios are computed within each run; every figure is reported as the median (min, max) over runs.
// Everything lives under --dir (a fresh directory made inside it and removed at the end).
#include <sys/statfs.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_util.h"
#include "common/checkpoint_layout.h"
#include "common/partition.h"
#include "common/status.h"
#include "proto/checkpoint.pb.h"
#include "proto/table.pb.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"
#include "server/shard.h"
#include "server/shard_store.h"

ABSL_FLAG(int64_t, rows, 1000000, "Rows of the table (distinct random keys).");
ABSL_FLAG(int64_t, changed, -1, "Rows changed before the incremental checkpoint (-1: 1% of --rows).");
ABSL_FLAG(int, runs, 5, "Runs; every figure is the median (min, max) over runs.");
ABSL_FLAG(int64_t, batch, 65536, "Keys per push when filling the table.");
ABSL_FLAG(std::string, dir, "/tmp",
          "Where the checkpoints and RocksDB stores go: a fresh directory is made inside it and removed at the end.");
ABSL_FLAG(std::string, output, "bench/results/checkpoint_bench.md", "Markdown report path ('' to skip).");
ABSL_FLAG(std::string, git_commit, "", "Commit being measured (default: git rev-parse --short HEAD, if any).");
ABSL_FLAG(std::string, invocation, "",
          "The command that reproduces this run (run_checkpoint_bench.sh passes its own).");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the keys and gradients.");

namespace kestrel {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr char kJob[] = "kestrel";
constexpr char kTable[] = "emb";
constexpr int kDim = 16;
// As server/shard_store.cc: rows go to RocksDB in write batches of about this many bytes.
constexpr size_t kBatchBytes = size_t{8} << 20;

using bench::SecondsSince;

RequestContext Ctx() {
  RequestContext ctx;
  ctx.job_id = kJob;
  return ctx;
}

TableConfig Emb() {
  TableConfig c;
  c.set_name(kTable);
  c.set_dim(kDim);
  c.set_seed(7);
  c.mutable_initializer()->set_type(InitializerConfig::NORMAL);
  c.mutable_optimizer()->set_type(OptimizerConfig::ADAM);
  return c;
}

absl::Status FromRocks(const rocksdb::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", status.ToString()));
}

// The working store's options of server/shard_store.cc (LiveOptions).
rocksdb::Options LiveOptions() {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.error_if_exists = true;
  options.compression = rocksdb::kNoCompression;
  options.write_buffer_size = 64 << 20;
  options.max_background_jobs = 2;
  options.keep_log_file_num = 2;
  return options;
}

// ShardStore's row key: table name, a zero byte, the key big-endian.
void AppendRowKey(absl::string_view table, uint64_t key, std::string* out) {
  out->assign(table.data(), table.size());
  out->push_back('\0');
  for (int shift = 56; shift >= 0; shift -= 8) out->push_back(static_cast<char>(key >> shift));
}

// ---------------------------------------------------------------------------------------------------------
// The file system the bench writes to (rates depend on it).

std::string FsTypeName(int64_t magic) {
  switch (static_cast<uint64_t>(magic) & 0xffffffffu) {
    case 0xEF53: return "ext2/3/4";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x01021994: return "tmpfs";
    case 0x794C7630: return "overlayfs";
    case 0x6969: return "nfs";
    case 0x2FC12FC1: return "zfs";
    case 0xF2F52010: return "f2fs";
    case 0x65735546: return "fuse";
    case 0x858458F6: return "ramfs";
    default: return absl::StrFormat("statfs type 0x%x", static_cast<uint64_t>(magic));
  }
}

// "ext4, /dev/vda mounted on / (82.0 GB free)": the mount holding `dir` (longest prefix in /proc/self/mounts)
// and the statfs type.
std::string DescribeFileSystem(const std::string& dir) {
  std::error_code error;
  const std::string path = fs::weakly_canonical(dir, error).string();
  std::string device = "?", mount_point, type = "?";
  std::ifstream mounts("/proc/self/mounts");
  std::string line;
  while (std::getline(mounts, line)) {
    std::istringstream fields(line);
    std::string dev, mnt, fstype;
    if (!(fields >> dev >> mnt >> fstype)) continue;
    const bool inside = path == mnt || mnt == "/" || (path.size() > mnt.size() && path.compare(0, mnt.size(), mnt) == 0 &&
                                                      path[mnt.size()] == '/');
    if (inside && mnt.size() >= mount_point.size()) {
      device = dev;
      mount_point = mnt;
      type = fstype;
    }
  }
  std::string out = absl::StrCat(type, ", ", device, " mounted on ", mount_point.empty() ? "?" : mount_point);
  struct statfs st;
  if (::statfs(path.c_str(), &st) == 0) {
    absl::StrAppendFormat(&out, " (statfs: %s, %.1f GB free)", FsTypeName(st.f_type),
                          static_cast<double>(st.f_bavail) * st.f_bsize / 1e9);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// The pieces of one run.

// The table's rows, copied out once: keys in the order the checkpoint writes them and the stored floats.
struct RowCopy {
  std::vector<uint64_t> keys;
  std::vector<float> floats;  // keys.size() * stored_floats
  size_t row_bytes = 0;
};

RowCopy CopyRows(const Table& table) {
  RowCopy copy;
  const size_t floats = table.stored_floats();
  copy.row_bytes = floats * sizeof(float);
  copy.keys.reserve(table.num_rows());
  copy.floats.reserve(table.num_rows() * floats);
  table.ForEachRow([&](uint64_t key, const float* values, const float*) {
    copy.keys.push_back(key);
    copy.floats.insert(copy.floats.end(), values, values + floats);  // values and slots are contiguous
  });
  return copy;
}

// Writes the rows of `copy` in the order of `order` (indices into it) into a fresh RocksDB at `dir` with the
// working store's options, in ~8 MiB batches without WAL, then flushes. Returns the seconds of the writes and
// the flush (not of opening the store, closing it or deleting it).
absl::StatusOr<double> RocksDbWrite(const std::string& dir, const RowCopy& copy, const std::vector<uint32_t>& order) {
  std::error_code error;
  fs::remove_all(dir, error);
  rocksdb::DB* raw = nullptr;
  KESTREL_RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(LiveOptions(), dir, &raw), absl::StrCat("opening ", dir)));
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::WriteOptions write_options;
  write_options.disableWAL = true;
  const size_t floats = copy.row_bytes / sizeof(float);
  const Clock::time_point start = Clock::now();
  rocksdb::WriteBatch batch;
  std::string key;
  for (uint32_t i : order) {
    AppendRowKey(kTable, copy.keys[i], &key);
    batch.Put(key, rocksdb::Slice(reinterpret_cast<const char*>(copy.floats.data() + i * floats), copy.row_bytes));
    if (batch.GetDataSize() >= kBatchBytes) {
      KESTREL_RETURN_IF_ERROR(FromRocks(db->Write(write_options, &batch), "RocksDB write"));
      batch.Clear();
    }
  }
  if (batch.Count() > 0) KESTREL_RETURN_IF_ERROR(FromRocks(db->Write(write_options, &batch), "RocksDB write"));
  KESTREL_RETURN_IF_ERROR(FromRocks(db->Flush(rocksdb::FlushOptions()), "RocksDB flush"));
  const double seconds = SecondsSince(start);
  db.reset();
  fs::remove_all(dir, error);
  return seconds;
}

struct Checkpointed {
  ShardCheckpoint answer;
  uint64_t sequence = 0;
  double checkpoint_seconds = 0;  // ShardStore::Checkpoint
  double commit_seconds = 0;      // AddShardsToManifest + WriteManifest + MoveLatest
};

// Checkpoints the shard and commits the manifest, as the scheduler does (server/shard_store_test.cc).
absl::StatusOr<Checkpointed> CheckpointAndCommit(ShardStore& store, Shard& shard, const CheckpointLayout& layout,
                                                 const Partition& partition, int64_t clock) {
  CheckpointManifest manifest;
  manifest.set_format_version(1);
  KESTREL_ASSIGN_OR_RETURN(const uint64_t sequence, layout.NextSequence());
  manifest.set_sequence(sequence);
  manifest.set_clock(clock);
  manifest.set_job_id(kJob);
  manifest.set_partition(partition.ToString());
  manifest.set_num_servers(partition.num_servers());
  manifest.set_reason("checkpoint_bench");
  const std::string name = CheckpointLayout::CheckpointName(sequence);
  Checkpointed out;
  out.sequence = sequence;
  Clock::time_point start = Clock::now();
  KESTREL_ASSIGN_OR_RETURN(out.answer, store.Checkpoint(shard, name));
  out.checkpoint_seconds = SecondsSince(start);
  start = Clock::now();
  KESTREL_RETURN_IF_ERROR(AddShardsToManifest({out.answer}, partition.num_servers(), &manifest));
  KESTREL_RETURN_IF_ERROR(layout.WriteManifest(manifest));
  KESTREL_RETURN_IF_ERROR(layout.MoveLatest(name));
  out.commit_seconds = SecondsSince(start);
  return out;
}

std::vector<float> Grads(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> g(n * kDim);
  for (float& x : g) x = normal(rng);
  return g;
}

// `n` distinct random keys of `keys`, sorted.
std::vector<uint64_t> Sample(const std::vector<uint64_t>& keys, size_t n, std::mt19937_64& rng) {
  std::vector<uint64_t> pool = keys;
  n = std::min(n, pool.size());
  for (size_t i = 0; i < n; ++i) std::swap(pool[i], pool[i + rng() % (pool.size() - i)]);
  pool.resize(n);
  std::sort(pool.begin(), pool.end());
  return pool;
}

// ---------------------------------------------------------------------------------------------------------

std::string Markdown(const bench::Machine& m, const std::string& load_start, double total_seconds,
                     const std::string& file_system, int64_t rows, int64_t changed, int runs, int64_t batch,
                     int64_t row_bytes, double fill_seconds, const bench::Figures& figures) {
  std::string md = "# Kestrel checkpoint_bench: ShardStore checkpoint and restore vs. RocksDB's write rate\n\n";
  absl::StrAppend(&md, "## Machine\n\n", bench::MachineMarkdown(m, load_start));
  absl::StrAppend(&md, "| Checkpoint directory's file system | ", file_system, " |\n");
  absl::StrAppend(&md, absl::StrFormat("| Bench runtime | %.0f s |\n\n", total_seconds));
  absl::StrAppend(&md, bench::CommandMarkdown(m));
  absl::StrAppend(
      &md, "## What is measured\n\n",
      absl::StrFormat(
          "One process, one Shard (Partition::Uniform(1)), one sparse table \"emb\": dim %d, ADAM, so a stored "
          "row is 16 values + 33 optimizer floats (m, v, step) = 196 bytes; with RocksDB's 12-byte key "
          "(\"emb\", 0, 8-byte big-endian key) %d bytes per row, the unit of every MB/s (1 MB = 10^6 bytes). "
          "The table holds %d rows: distinct random keys pushed once in random batches of %d keys, each batch "
          "sorted (fill: %.1f s). Each of %d runs, in order:\n\n",
          kDim, row_bytes, rows, batch, fill_seconds, runs),
      "- **RocksDB write** (the ceiling): a fresh RocksDB with ShardStore's working-store options (no "
      "compression, 64 MiB write buffer, 2 background jobs), WAL disabled, ~8 MiB write batches, holding exactly "
      "the table's rows (same keys and bytes, copied out beforehand), then Flush; timed from the first write to "
      "the end of the flush. Once in the table's storage order (stripe by stripe, rows within a stripe in "
      "insertion order: how checkpoints wrote before each stripe's dirty rows were sorted) and once in key order "
      "(how checkpoints write now). The key-order ratio is the one that says how close a checkpoint gets to "
      "RocksDB's own rate.\n",
      "- **Full checkpoint**: a fresh ShardStore (empty working store), every row marked dirty, then "
      "ShardStore::Checkpoint alone is timed: `write` = iterating the dirty rows and writing them (its "
      "write_seconds), `snapshot` = Flush + RocksDB checkpoint (hard links) + CRC-32C of every file "
      "(snapshot_seconds). The manifest commit (AddShardsToManifest, WriteManifest, MoveLatest, with fsyncs) "
      "is timed apart. Ratio = checkpoint rate / RocksDB rate of the same run.\n",
      absl::StrFormat("- **Incremental checkpoint**: a push of %d random existing keys (%.1f%% of the rows), "
                      "then ShardStore::Checkpoint of the same store. Ratio = its time / the full checkpoint's.\n",
                      changed, 100.0 * changed / rows),
      "- **Restore**: ShardStore::Restore of the LATEST manifest (the incremental checkpoint) into a fresh Shard "
      "with a fresh ShardStore: it verifies every file's size and CRC-32C, reads every row through a RocksDB "
      "iterator (checksums verified) into the Shard, and re-creates the empty working store. The restored "
      "shard's Fingerprint() must equal the source's (checked every run). `verify alone` is "
      "CheckpointLayout::VerifyShard timed separately afterwards (the part of Restore that only reads files). "
      "Ratio = restore time / full checkpoint time.\n\n",
      "Figures are medians (min, max) over runs; ratios are computed within each run, then their median is "
      "taken. The files were written moments before they are read back, so restore reads them from the page "
      "cache; RocksDB fsyncs its SST files on flush, so writes reach the disk.\n\n");
  absl::StrAppend(&md, "## Results\n\n", figures.Markdown(), "\n");
  return md;
}

absl::Status RunBench(int argc, char** argv) {
  const Clock::time_point bench_start = Clock::now();
  const std::string load_start = bench::LoadAverage();
  const int64_t rows = absl::GetFlag(FLAGS_rows);
  const int runs = absl::GetFlag(FLAGS_runs);
  const int64_t batch = absl::GetFlag(FLAGS_batch);
  const int64_t changed = absl::GetFlag(FLAGS_changed) >= 0 ? absl::GetFlag(FLAGS_changed) : rows / 100;
  if (rows < 1 || rows > (int64_t{1} << 31)) return absl::InvalidArgumentError("--rows must be in [1, 2^31]");
  if (runs < 1) return absl::InvalidArgumentError("--runs must be >= 1");
  if (batch < 1) return absl::InvalidArgumentError("--batch must be >= 1");
  if (changed < 1 || changed > rows) return absl::InvalidArgumentError("--changed must be in [1, --rows]");
  const bench::Machine machine =
      bench::DescribeMachine(argc, argv, absl::GetFlag(FLAGS_git_commit), absl::GetFlag(FLAGS_invocation));

  const std::string parent = bench::UserPath(absl::GetFlag(FLAGS_dir));
  std::error_code error;
  fs::create_directories(parent, error);
  std::string dir_template = absl::StrCat(parent, "/checkpoint_bench.XXXXXX");
  if (::mkdtemp(dir_template.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp in ", parent, " failed"));
  }
  const std::string work_dir = dir_template;
  const std::string file_system = DescribeFileSystem(work_dir);
  std::printf("checkpoint_bench: %lld rows, %lld changed, %d runs, in %s (%s)\n", static_cast<long long>(rows),
              static_cast<long long>(changed), runs, work_dir.c_str(), file_system.c_str());
  std::printf("machine: %d cpus, %s, %s, %s, commit %s\n", machine.nproc, machine.cpu.c_str(), machine.memory.c_str(),
              machine.kernel.c_str(), machine.commit.c_str());
  std::fflush(stdout);

  bench::Figures figures;
  double fill_seconds = 0;
  int64_t row_bytes = 0;
  absl::Status status = [&]() -> absl::Status {
    const CheckpointLayout layout(absl::StrCat(work_dir, "/ckpt"));
    const std::string rocks_dir = absl::StrCat(work_dir, "/rocksdb");
    KESTREL_ASSIGN_OR_RETURN(const Partition partition, Partition::Uniform(1));
    ShardOptions options;
    options.job_id = kJob;
    KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<Shard> shard, Shard::Create(options, partition));
    KESTREL_RETURN_IF_ERROR(shard->CreateTable(Ctx(), Emb()).status());

    // Fill: distinct random keys, pushed in random batches, each sorted.
    std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
    std::vector<uint64_t> keys(rows);
    for (uint64_t& k : keys) k = rng();
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    while (static_cast<int64_t>(keys.size()) < rows) keys.push_back(rng());  // (2^64 keys: never in practice)
    std::shuffle(keys.begin(), keys.end(), rng);
    Clock::time_point start = Clock::now();
    for (int64_t i = 0; i < rows; i += batch) {
      std::vector<uint64_t> part(keys.begin() + i, keys.begin() + std::min(rows, i + batch));
      std::sort(part.begin(), part.end());
      KESTREL_RETURN_IF_ERROR(shard->Push(Ctx(), kTable, part, Grads(part.size(), rng), kDim));
    }
    fill_seconds = SecondsSince(start);
    const Table* table = shard->FindTable(kTable);
    if (table == nullptr || table->num_rows() != static_cast<uint64_t>(rows)) {
      return absl::InternalError("the table does not hold every pushed row");
    }
    {
      std::string key;
      AppendRowKey(kTable, 0, &key);
      row_bytes = key.size() + sizeof(float) * table->stored_floats();
    }
    const double mb = static_cast<double>(rows) * row_bytes / 1e6;
    std::printf("fill: %lld rows x %d bytes (%.0f MB) in %.2f s\n", static_cast<long long>(rows),
                static_cast<int>(row_bytes), mb, fill_seconds);
    std::fflush(stdout);

    for (int run = 0; run < runs; ++run) {
      // 1. RocksDB's own rate on the same rows, in the checkpoint's order and in key order.
      double rocks_seconds = 0, rocks_sorted_seconds = 0;
      {
        const RowCopy copy = CopyRows(*table);
        std::vector<uint32_t> order(copy.keys.size());
        std::iota(order.begin(), order.end(), 0u);
        KESTREL_ASSIGN_OR_RETURN(rocks_seconds, RocksDbWrite(rocks_dir, copy, order));
        std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return copy.keys[a] < copy.keys[b]; });
        KESTREL_ASSIGN_OR_RETURN(rocks_sorted_seconds, RocksDbWrite(rocks_dir, copy, order));
      }
      figures.Add("RocksDB write, storage order: s", "%.3f", rocks_seconds);
      figures.Add("RocksDB write, storage order: MB/s", "%.0f", mb / rocks_seconds);
      figures.Add("RocksDB write, storage order: Mrows/s", "%.3f", rows / rocks_seconds / 1e6);
      figures.Add("RocksDB write, key order: s", "%.3f", rocks_sorted_seconds);
      figures.Add("RocksDB write, key order: MB/s", "%.0f", mb / rocks_sorted_seconds);

      // 2. Full checkpoint into a fresh working store.
      KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<ShardStore> store, ShardStore::Open(layout, 0));
      KESTREL_RETURN_IF_ERROR(shard->Exclusive([](const std::vector<Table*>& tables) {
        for (Table* t : tables) t->MarkAllDirty();
        return absl::OkStatus();
      }));
      KESTREL_ASSIGN_OR_RETURN(const Checkpointed full, CheckpointAndCommit(*store, *shard, layout, partition, 2 * run));
      if (full.answer.rows_written() != static_cast<uint64_t>(rows) ||
          full.answer.bytes_written() != static_cast<uint64_t>(rows * row_bytes)) {
        return absl::InternalError(absl::StrFormat("full checkpoint wrote %d rows (%d bytes), expected %d (%d)",
                                                   full.answer.rows_written(), full.answer.bytes_written(), rows,
                                                   rows * row_bytes));
      }
      const double full_s = full.checkpoint_seconds;
      figures.Add("Full checkpoint: s", "%.3f", full_s);
      figures.Add("Full checkpoint: write s", "%.3f", full.answer.write_seconds());
      figures.Add("Full checkpoint: snapshot s (flush + links + CRC)", "%.3f", full.answer.snapshot_seconds());
      figures.Add("Full checkpoint: MB/s", "%.0f", mb / full_s);
      figures.Add("Full checkpoint: Mrows/s", "%.3f", rows / full_s / 1e6);
      figures.Add("Full checkpoint rate / RocksDB rate (storage order)", "%.2f", rocks_seconds / full_s);
      figures.Add("Full checkpoint rate / RocksDB rate (key order)", "%.2f", rocks_sorted_seconds / full_s);
      figures.Add("Commit (manifest + LATEST): ms", "%.2f", 1e3 * full.commit_seconds);

      // 3. Incremental: a push of `changed` existing keys, then a checkpoint of the same store.
      const std::vector<uint64_t> touched = Sample(keys, changed, rng);
      KESTREL_RETURN_IF_ERROR(shard->Push(Ctx(), kTable, touched, Grads(touched.size(), rng), kDim));
      KESTREL_ASSIGN_OR_RETURN(const Checkpointed incremental,
                               CheckpointAndCommit(*store, *shard, layout, partition, 2 * run + 1));
      if (incremental.answer.rows_written() != touched.size()) {
        return absl::InternalError(absl::StrFormat("incremental checkpoint wrote %d rows, expected %d",
                                                   incremental.answer.rows_written(), touched.size()));
      }
      figures.Add("Incremental checkpoint: s", "%.4f", incremental.checkpoint_seconds);
      figures.Add("Incremental checkpoint: write s", "%.4f", incremental.answer.write_seconds());
      figures.Add("Incremental checkpoint: snapshot s", "%.4f", incremental.answer.snapshot_seconds());
      figures.Add("Incremental / full checkpoint time", "%.3f", incremental.checkpoint_seconds / full_s);

      // 4. Restore the latest checkpoint into a fresh Shard and store. The source store goes first: both
      // stores use the shard's working directory, which Open re-creates.
      const uint64_t source_fingerprint = shard->Fingerprint();
      store.reset();
      KESTREL_ASSIGN_OR_RETURN(const std::optional<CheckpointManifest> latest, layout.ReadLatest());
      if (!latest.has_value() || latest->sequence() != incremental.sequence ||
          latest->shards_size() != 1 || latest->shards(0).rows_written() != touched.size()) {
        return absl::InternalError("LATEST is not the incremental checkpoint");
      }
      KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<Shard> target, Shard::Create(options, partition));
      KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<ShardStore> target_store, ShardStore::Open(layout, 0));
      start = Clock::now();
      KESTREL_RETURN_IF_ERROR(target_store->Restore(*latest, *target, /*min_worker_generation=*/1));
      const double restore_s = SecondsSince(start);
      start = Clock::now();
      KESTREL_RETURN_IF_ERROR(layout.VerifyShard(*latest, 0));
      const double verify_s = SecondsSince(start);
      const Table* restored = target->FindTable(kTable);
      if (restored == nullptr || restored->num_rows() != static_cast<uint64_t>(rows)) {
        return absl::DataLossError(absl::StrFormat("restore: %d rows, expected %d",
                                                   restored == nullptr ? 0 : restored->num_rows(), rows));
      }
      const uint64_t restored_fingerprint = target->Fingerprint();
      if (restored_fingerprint != source_fingerprint) {
        return absl::DataLossError(absl::StrFormat("run %d: restored shard's fingerprint %016x != source's %016x",
                                                   run + 1, restored_fingerprint, source_fingerprint));
      }
      figures.Add("Restore: s", "%.3f", restore_s);
      figures.Add("Restore: verify alone s", "%.3f", verify_s);
      figures.Add("Restore: MB/s", "%.0f", mb / restore_s);
      figures.Add("Restore: Mrows/s", "%.3f", rows / restore_s / 1e6);
      figures.Add("Restore time / full checkpoint time", "%.2f", restore_s / full_s);
      target_store.reset();
      target.reset();
      KESTREL_RETURN_IF_ERROR(layout.Prune(1).status());

      std::printf(
          "run %d of %d: RocksDB %.3f s (key order %.3f s), full checkpoint %.3f s (write %.3f + snapshot %.3f; "
          "%.2fx RocksDB's rate), incremental %.4f s (%.3f of full), restore %.3f s (verify %.3f; %.2fx full), "
          "fingerprint ok\n",
          run + 1, runs, rocks_seconds, rocks_sorted_seconds, full_s, full.answer.write_seconds(),
          full.answer.snapshot_seconds(), rocks_seconds / full_s, incremental.checkpoint_seconds,
          incremental.checkpoint_seconds / full_s, restore_s, verify_s, restore_s / full_s);
      std::fflush(stdout);
    }
    return absl::OkStatus();
  }();
  fs::remove_all(work_dir, error);
  KESTREL_RETURN_IF_ERROR(status);

  const std::string md = Markdown(machine, load_start, SecondsSince(bench_start), file_system, rows, changed, runs, batch,
                                  row_bytes, fill_seconds, figures);
  return bench::PublishReport(md, absl::GetFlag(FLAGS_output));
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Kestrel checkpoint_bench: ShardStore checkpoint and restore throughput vs. RocksDB's batched write rate.\n"
      "Usually run through bench/run_checkpoint_bench.sh.");
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = kestrel::RunBench(argc, argv);
  if (!status.ok()) {
    std::fflush(stdout);
    std::fprintf(stderr, "checkpoint_bench FAILED: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
