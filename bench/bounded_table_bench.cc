// bounded_table_bench: what bounding a sparse table costs and buys (server/bounded_policy.h), measured
// on the server's own core (Shard + ShardStore and its disk tier) in one process, all ratios from one run.
//
//   bench/run_bounded_table_bench.sh            # builds with -c opt, writes bench/results/bounded_tables.{md,svg}
//   bench/run_bounded_table_bench.sh --sections=2   # section 2 only; the report keeps the other sections' text
//
// 1. Memory over time: a Zipf stream over a vocabulary that keeps growing (new ids arrive all the time, most of
//    them seen once; --stream_keys pushes of --batch keys) goes through a table with a --budget_mb budget,
//    admission after 2 pushes and a TTL; the table's accounted memory and the process's resident memory are
//    sampled against the budget and plotted (SVG). The same stream through an unbounded table gives the
//    growth the budget prevents.
// 2. Hit ratios: a table of --rows rows (dim --dim, Adagrad) whose budget holds 100%, 90% or 50% of them in
//    memory (the rest in the disk tier), against the same rows all in memory: pull and push keys/s of random
//    --batch-key requests, runs interleaved, medians of --runs. Three ways: the disk tier's files in the page
//    cache; the same reads from RocksDB (the path before the files, ShardStore::TEST_ReadColdFromRocksDB); and the
//    files NOT cached: before each timed request the files' pages are written back and dropped (fdatasync, then
//    posix_fadvise DONTNEED; ShardStore::TEST_DropColdCachedPages), and the request's device reads are counted
//    (/proc/self/io read_bytes / 4096). Also the files' index memory per disk row.
// 3. Admission and eviction cost: pushes of a stream of new keys into (a) an unbounded table, (b) the same with
//    admission after 2 pushes, (c) with a memory budget 1/4 of the stream (eviction on every push):
//    nanoseconds per key.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "common/checkpoint_layout.h"
#include "common/hash.h"
#include "common/partition.h"
#include "server/shard.h"
#include "server/shard_store.h"
#include "worker/compute/cpu_backend.h"
#include "inprocess/local_trainer.h"

ABSL_FLAG(std::string, output, "bench/results/bounded_tables.md", "Markdown report (the plot goes next to it, .svg).");
ABSL_FLAG(std::string, dir, "/tmp/kestrel_bounded_bench", "Scratch directory for the RocksDB stores (deleted first).");
ABSL_FLAG(int, dim, 16, "Embedding dim.");
ABSL_FLAG(int, batch, 4096, "Keys per request.");
ABSL_FLAG(int64_t, rows, 1000000, "Rows of the hit-ratio tables.");
ABSL_FLAG(int, runs, 5, "Runs per hit-ratio figure (median).");
ABSL_FLAG(double, min_seconds, 1.0, "Seconds per run.");
ABSL_FLAG(int64_t, stream_pushes, 3000, "Pushes of the memory-over-time stream.");
ABSL_FLAG(int, budget_mb, 64, "Memory budget of the memory-over-time table, MiB.");
ABSL_FLAG(std::string, data_dir, "",
          "A kestrel_datagen --large_vocab directory (train.tsv, test.tsv): part 4 trains LR and DeepFM on it with "
          "admission after 2 pushes (dropping earlier ones, or with admit_to_disk keeping them on the disk tier), "
          "after 5 to disk, and TTLs, and reports test AUC and rows in memory and on disk. Default: \"\" = skip.");
ABSL_FLAG(std::string, sections, "1,2,3,4",
          "Sections to run (4 needs --data_dir). The others' text is kept from the existing --output report.");
ABSL_FLAG(std::string, git_commit, "", "Commit measured (default: git rev-parse).");
ABSL_FLAG(std::string, invocation, "", "Command that reproduces the run (the wrapper script's).");

namespace kestrel {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

uint64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

RequestContext Ctx(int64_t clock) {
  RequestContext ctx;
  ctx.job_id = "bench";
  ctx.clock = clock;
  return ctx;
}

TableConfig Emb(int dim, const CapacityPolicy* policy) {
  TableConfig c;
  c.set_name("emb");
  c.set_dim(dim);
  c.mutable_initializer()->set_type(InitializerConfig::NORMAL);
  c.mutable_optimizer()->set_type(OptimizerConfig::ADAGRAD);
  if (policy != nullptr) *c.mutable_capacity() = *policy;
  return c;
}

struct Server {
  std::unique_ptr<Shard> shard;
  std::unique_ptr<ShardStore> store;
};

Server MakeServer(const std::string& dir, int dim, const CapacityPolicy* policy) {
  Server s;
  ShardOptions options;
  options.job_id = "bench";
  options.max_keys_per_request = size_t{1} << 24;
  s.shard = std::move(Shard::Create(options, *Partition::Uniform(1))).value();
  std::filesystem::remove_all(dir);
  s.store = std::move(ShardStore::Open(CheckpointLayout(dir), 0)).value();
  s.shard->SetColdTier(s.store.get());
  if (!s.shard->CreateTable(Ctx(0), Emb(dim, policy)).ok()) std::abort();
  return s;
}

void MustOk(const absl::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, status.ToString().c_str());
    std::exit(1);
  }
}

// A growing-vocabulary Zipf stream: batch b draws ranks from Zipf(1.05) over a window of ids that slides by
// `drift` ids per batch, plus a share of ids never seen again.
class Stream {
 public:
  Stream(int batch, uint64_t vocab, double drift, double new_rate)
      : batch_(batch), vocab_(vocab), drift_(drift), new_rate_(new_rate), rng_(42) {
    cdf_.resize(vocab);
    double sum = 0;
    for (uint64_t r = 0; r < vocab; ++r) cdf_[r] = (sum += std::pow(r + 1.0, -1.05));
    for (double& c : cdf_) c /= sum;
  }
  std::vector<uint64_t> Next(int64_t b) {
    std::uniform_real_distribution<double> u(0, 1);
    std::vector<uint64_t> keys;
    const uint64_t shift = static_cast<uint64_t>(b * drift_);
    for (int i = 0; i < batch_; ++i) {
      if (u(rng_) < new_rate_) {
        keys.push_back(Mix64((uint64_t{1} << 62) + next_new_++));
        continue;
      }
      const uint64_t rank = std::upper_bound(cdf_.begin(), cdf_.end(), u(rng_)) - cdf_.begin();
      keys.push_back(Mix64(std::min(rank, vocab_ - 1) + shift));
    }
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    return keys;
  }

 private:
  const int batch_;
  const uint64_t vocab_;
  const double drift_, new_rate_;
  std::mt19937_64 rng_;
  std::vector<double> cdf_;
  uint64_t next_new_ = 0;
};

std::vector<float> Grads(size_t n, int dim) {
  std::vector<float> g(n * dim);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i % 17) * 0.01f - 0.08f;
  return g;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Sample {
  int64_t push;
  uint64_t distinct;  // distinct keys pushed so far
  uint64_t bounded_bytes, bounded_rss, unbounded_bytes;
};

std::string Svg(const std::vector<Sample>& samples, uint64_t budget) {
  const double w = 720, h = 360, left = 70, bottom = 40, top = 30, right = 20;
  double ymax = budget * 1.5;
  for (const Sample& s : samples) ymax = std::max<double>(ymax, std::max(s.bounded_rss, s.unbounded_bytes));
  const double xmax = samples.back().push;
  auto X = [&](double x) { return left + (w - left - right) * x / xmax; };
  auto Y = [&](double y) { return h - bottom - (h - top - bottom) * y / ymax; };
  std::string svg = absl::StrFormat(
      "<svg xmlns='http://www.w3.org/2000/svg' width='%g' height='%g' font-family='sans-serif' font-size='12'>\n"
      "<rect width='100%%' height='100%%' fill='white'/>\n"
      "<text x='%g' y='18'>Server memory while a growing-vocabulary stream is pushed (MiB)</text>\n",
      w, h, left);
  auto line = [&](auto value, const char* color, const char* label, int row) {
    std::string points;
    for (const Sample& s : samples) absl::StrAppend(&points, absl::StrFormat("%.1f,%.1f ", X(s.push), Y(value(s))));
    absl::StrAppend(&svg, absl::StrFormat("<polyline fill='none' stroke='%s' stroke-width='2' points='%s'/>\n", color, points));
    absl::StrAppend(&svg, absl::StrFormat("<text x='%g' y='%g' fill='%s'>%s</text>\n", left + 10, top + 16 * row, color, label));
  };
  line([](const Sample& s) { return static_cast<double>(s.unbounded_bytes); }, "#c0392b", "unbounded table", 1);
  line([](const Sample& s) { return static_cast<double>(s.bounded_bytes); }, "#2471a3", "bounded table (accounted)", 2);
  line([](const Sample& s) { return static_cast<double>(s.bounded_rss); }, "#7d3c98", "process RSS - baseline (bounded run)", 3);
  absl::StrAppend(&svg, absl::StrFormat("<line x1='%g' x2='%g' y1='%.1f' y2='%.1f' stroke='black' stroke-dasharray='6,4'/>\n"
                                        "<text x='%g' y='%.1f'>budget</text>\n",
                                        left, w - right, Y(budget), Y(budget), w - right - 50, Y(budget) - 4));
  absl::StrAppend(&svg, absl::StrFormat("<line x1='%g' x2='%g' y1='%g' y2='%g' stroke='black'/>\n", left, w - right, h - bottom, h - bottom));
  absl::StrAppend(&svg, absl::StrFormat("<line x1='%g' x2='%g' y1='%g' y2='%g' stroke='black'/>\n", left, left, top, h - bottom));
  for (int i = 0; i <= 4; ++i) {
    const double y = ymax * i / 4;
    absl::StrAppend(&svg, absl::StrFormat("<text x='5' y='%.1f'>%.0f</text>\n", Y(y) + 4, y / (1 << 20)));
    const double x = xmax * i / 4;
    absl::StrAppend(&svg, absl::StrFormat("<text x='%.1f' y='%g'>%.0f</text>\n", X(x) - 10, h - bottom + 16, x));
  }
  absl::StrAppend(&svg, absl::StrFormat("<text x='%g' y='%g'>pushes of %d keys</text>\n</svg>\n", w / 2 - 40, h - 5,
                                        absl::GetFlag(FLAGS_batch)));
  return svg;
}

// Bytes this process has had read from storage devices (/proc/self/io read_bytes; 0 if unreadable).
uint64_t ReadBytes() {
  std::ifstream io("/proc/self/io");
  std::string name;
  uint64_t value = 0;
  while (io >> name >> value) {
    if (name == "read_bytes:") return value;
  }
  return 0;
}

// Section `n` of a report: from its "## n." heading to the next "## " heading (or the end); "" if absent.
std::string SectionOf(const std::string& report, int n) {
  const std::string heading = absl::StrCat("## ", n, ".");
  size_t start = absl::StartsWith(report, heading) ? 0 : report.find("\n" + heading);
  if (start == std::string::npos) return "";
  if (start != 0) ++start;
  const size_t end = report.find("\n## ", start);
  return report.substr(start, end == std::string::npos ? std::string::npos : end + 1 - start);
}

// "commit X, DATE" of a report's header (the parts it has).
std::string PreviousRun(const std::string& report) {
  auto field = [&](absl::string_view name) -> std::string {
    const std::string prefix = absl::StrCat("| ", name, " | ");
    const size_t at = report.find(prefix);
    if (at == std::string::npos) return "";
    const size_t begin = at + prefix.size(), end = report.find(" |", begin);
    return report.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
  };
  return absl::StrCat("commit ", field("Git commit"), ", ", field("Date"));
}

// Section 2: pull and push keys/s with 100%, 90% and 50% of the rows in memory against the all-in-memory table,
// the disk tier's file cached, read through RocksDB instead, and not cached; the index's memory.
std::string HitRatios(const std::string& root, int dim, int batch) {
  std::string md;
  const int64_t rows = absl::GetFlag(FLAGS_rows);
  const int runs = absl::GetFlag(FLAGS_runs);
  const double min_seconds = absl::GetFlag(FLAGS_min_seconds);
  std::vector<uint64_t> all(rows);
  for (int64_t i = 0; i < rows; ++i) all[i] = Mix64(i);
  std::sort(all.begin(), all.end());
  Server reference = MakeServer(root + "/hit_reference", dim, nullptr);
  auto load = [&](Server& s) {
    for (int64_t i = 0; i < rows; i += 65536) {
      const std::vector<uint64_t> keys(all.begin() + i, all.begin() + std::min<int64_t>(rows, i + 65536));
      MustOk(s.shard->Push(Ctx(1), "emb", keys, Grads(keys.size(), dim), dim), "load");
    }
  };
  load(reference);
  const uint64_t all_memory = reference.shard->FindTable("emb")->memory_bytes();
  struct Case {
    double fraction;
    Server server;
    ShardStore::ColdFileStats files;  // after loading
    uint64_t disk_rows;
  };
  std::vector<Case> cases;
  for (double fraction : {1.0, 0.9, 0.5}) {
    // The budget that keeps `fraction` of the rows in memory (the rest on disk): calibrated on the loaded table,
    // since the index grows in powers of two and eviction leaves 1/16 of a stripe free.
    double budget_bytes = all_memory * (fraction < 1 ? fraction : 1.2);
    for (int attempt = 0;; ++attempt) {
      CapacityPolicy policy;
      policy.set_max_memory_bytes(static_cast<uint64_t>(budget_bytes));
      policy.set_max_disk_bytes(uint64_t{8} << 30);
      Server server = MakeServer(absl::StrCat(root, "/hit_", fraction, "_", attempt), dim, &policy);
      load(server);
      const TableTierStats stats = server.shard->FindTable("emb")->tier_stats();
      const double in_memory = 1.0 - static_cast<double>(stats.disk_rows) / rows;
      if (fraction == 1.0 || std::abs(in_memory - fraction) < 0.01 || attempt == 4) {
        MustOk(server.store->Checkpoint(*server.shard, "ckpt-00000001").status(), "flush");
        const ShardStore::ColdFileStats files = server.store->cold_file_stats();
        cases.push_back({in_memory, std::move(server), files, stats.disk_rows});
        break;
      }
      budget_bytes *= fraction / in_memory;
    }
  }
  // Requests are fresh uniform draws over the rows (never a pool cycled through: pushes would then keep exactly
  // the pool's rows in memory), drawn outside the timed part, so only the table's work is measured.
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> pick(0, rows - 1);
  std::vector<uint64_t> keys;
  const std::vector<float> grads = Grads(batch, dim);
  int64_t clock = 2;
  std::string values;
  // Draws a request, then times it; returns its seconds and adds its keys to *keys_done.
  auto request = [&](Server& s, bool push, uint64_t* keys_done) {
    keys.resize(batch);
    for (uint64_t& k : keys) k = all[pick(rng)];
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    const Clock::time_point start = Clock::now();
    if (push) {
      MustOk(s.shard->Push(Ctx(clock), "emb", keys, absl::MakeConstSpan(grads.data(), keys.size() * dim), dim), "push");
    } else {
      MustOk(s.shard->Pull(Ctx(clock), "emb", keys, dim, &values), "pull");
    }
    *keys_done += keys.size();
    return Seconds(start, Clock::now());
  };
  // Keys/s of requests for min_seconds (of requests).
  auto measure = [&](Server& s, bool push) {
    double seconds = 0;
    uint64_t keys_done = 0;
    while (seconds < min_seconds) seconds += request(s, push, &keys_done);
    ++clock;
    return keys_done / seconds;
  };
  // The same with reads from RocksDB.
  auto measure_rocksdb = [&](Server& s, bool push) {
    s.store->TEST_ReadColdFromRocksDB(true);
    const double keys_per_second = measure(s, push);
    s.store->TEST_ReadColdFromRocksDB(false);
    return keys_per_second;
  };
  // Uncached: the disk tier's pages dropped before each request (not timed), for min_seconds of requests.
  struct Uncached {
    uint64_t requests = 0, read_bytes = 0, resident_after_drop = 0;
  };
  auto measure_uncached = [&](Server& s, bool push, Uncached* u) {
    double seconds = 0;
    uint64_t keys_done = 0;
    while (seconds < min_seconds) {
      const absl::StatusOr<uint64_t> resident = s.store->TEST_DropColdCachedPages();
      MustOk(resident.status(), "dropping the disk tier's pages");
      u->resident_after_drop = std::max(u->resident_after_drop, *resident);
      const uint64_t read_before = ReadBytes();
      seconds += request(s, push, &keys_done);
      u->read_bytes += ReadBytes() - read_before;
      ++u->requests;
    }
    ++clock;
    return keys_done / seconds;
  };
  const size_t n = cases.size();
  std::vector<std::vector<double>> pull(n), push(n), ref_pull(n), ref_push(n), rocks_pull(n), rocks_push(n),
      cold_pull(n), cold_push(n), cold_ref_pull(n), cold_ref_push(n);
  std::vector<double> hit(n);
  std::vector<Uncached> cold_pull_io(n), cold_push_io(n);
  std::vector<uint64_t> cold_disk_hits(n);
  auto tier = [&](size_t i) { return cases[i].server.shard->FindTable("emb")->tier_stats(); };
  // Cached (the disk tier's pages as writing left them: all in the page cache) pulls, then pushes; then the same
  // uncached. Requests are uniform, so pushes moving rows leave the pulls' hit ratio as it was.
  for (int r = 0; r < runs; ++r) {
    for (size_t i = 0; i < n; ++i) {
      const TableTierStats before = tier(i);
      ref_pull[i].push_back(measure(reference, false));
      pull[i].push_back(measure(cases[i].server, false));
      const TableTierStats after = tier(i);
      const double memory_hits = after.pull_memory_hits - before.pull_memory_hits;
      const double total = memory_hits + (after.pull_disk_hits - before.pull_disk_hits) +
                           (after.pull_misses - before.pull_misses);
      hit[i] = memory_hits / std::max(1.0, total);
      if (r == 0) {
        std::printf("case %zu: pulled keys from memory %.0f, disk %.0f, initial %.0f\n", i, memory_hits,
                    static_cast<double>(after.pull_disk_hits - before.pull_disk_hits),
                    static_cast<double>(after.pull_misses - before.pull_misses));
      }
      rocks_pull[i].push_back(measure_rocksdb(cases[i].server, false));
    }
  }
  for (int r = 0; r < runs; ++r) {
    for (size_t i = 0; i < n; ++i) {
      ref_push[i].push_back(measure(reference, true));
      push[i].push_back(measure(cases[i].server, true));
      rocks_push[i].push_back(measure_rocksdb(cases[i].server, true));
    }
  }
  for (int r = 0; r < runs; ++r) {
    for (size_t i = 0; i < n; ++i) {
      cold_ref_pull[i].push_back(measure(reference, false));
      const uint64_t disk_hits = tier(i).pull_disk_hits;
      cold_pull[i].push_back(measure_uncached(cases[i].server, false, &cold_pull_io[i]));
      cold_disk_hits[i] += tier(i).pull_disk_hits - disk_hits;
    }
  }
  for (int r = 0; r < runs; ++r) {
    for (size_t i = 0; i < n; ++i) {
      cold_ref_push[i].push_back(measure(reference, true));
      cold_push[i].push_back(measure_uncached(cases[i].server, true, &cold_push_io[i]));
    }
  }
  absl::StrAppend(
      &md, "## 2. Throughput at memory hit ratios\n\n",
      absl::StrFormat(
          "%d rows (dim %d, Adagrad) on one server; random requests of %d keys (uniform over the rows, so the hit "
          "ratio is the share in memory; drawn before timing); the rest of the rows in the disk tier: RocksDB (the "
          "record) and the table's file of fixed-size records with an in-memory index, which serves the reads. "
          "Ratio: bounded / all-in-memory table, medians of %d interleaved runs of %.1f s.\n\n",
          rows, dim, batch, runs, min_seconds),
      "**The disk tier's file in the page cache.** The RocksDB columns read the same rows from RocksDB "
      "(`MultiGet`, its pages cached too: the path before the files).\n\n",
      "| in memory | measured hit ratio | pull keys/s | pull ratio | pull ratio, RocksDB reads | push keys/s | "
      "push ratio | push ratio, RocksDB reads |\n|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < n; ++i) {
    const double p = Median(pull[i]), rp = Median(ref_pull[i]), q = Median(push[i]), rq = Median(ref_push[i]);
    absl::StrAppend(&md, absl::StrFormat("| %.1f%% | %.3f | %.3g | %.2f | %.2f | %.3g | %.2f | %.2f |\n",
                                         100 * cases[i].fraction, hit[i], p, p / rp, Median(rocks_pull[i]) / rp, q,
                                         q / rq, Median(rocks_push[i]) / rq));
    std::printf("in memory %.1f%%: hit %.3f, pull %.3g keys/s (ratio %.2f, RocksDB %.2f), push %.3g (ratio %.2f, "
                "RocksDB %.2f)\n",
                100 * cases[i].fraction, hit[i], p, p / rp, Median(rocks_pull[i]) / rp, q, q / rq,
                Median(rocks_push[i]) / rq);
  }
  uint64_t resident = 0;
  for (size_t i = 0; i < n; ++i) {
    resident = std::max({resident, cold_pull_io[i].resident_after_drop, cold_push_io[i].resident_after_drop});
  }
  absl::StrAppend(
      &md, "\n**The disk tier's file not cached.** Before each timed request (the drop not timed), the file is "
      "written back and its pages dropped from the page cache (`madvise(MADV_DONTNEED)` on its mapping, "
      "`fdatasync`, then `posix_fadvise(POSIX_FADV_DONTNEED)`; ",
      absl::StrFormat("at most %d of its pages were still resident after a drop", resident),
      "). Device reads: `/proc/self/io` `read_bytes` over the request / 4096. A push also reads the page of each "
      "row it moves to disk over an older copy of it (rewritten in place). All-in-memory reference measured again "
      "alongside.\n\n",
      "| in memory | pull keys/s | pull ratio | disk rows per pull | device reads per pull | push keys/s | "
      "push ratio | device reads per push |\n|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < n; ++i) {
    const double p = Median(cold_pull[i]), rp = Median(cold_ref_pull[i]), q = Median(cold_push[i]),
                 rq = Median(cold_ref_push[i]);
    const double pulls = std::max<uint64_t>(1, cold_pull_io[i].requests);
    const double pushes = std::max<uint64_t>(1, cold_push_io[i].requests);
    absl::StrAppend(&md, absl::StrFormat("| %.1f%% | %.3g | %.2f | %.0f | %.0f | %.3g | %.2f | %.0f |\n",
                                         100 * cases[i].fraction, p, p / rp, cold_disk_hits[i] / pulls,
                                         cold_pull_io[i].read_bytes / 4096.0 / pulls, q, q / rq,
                                         cold_push_io[i].read_bytes / 4096.0 / pushes));
    std::printf("uncached, in memory %.1f%%: pull %.3g keys/s (ratio %.2f), %.0f disk rows and %.0f reads per pull; "
                "push %.3g (ratio %.2f), %.0f reads per push\n",
                100 * cases[i].fraction, p, p / rp, cold_disk_hits[i] / pulls,
                cold_pull_io[i].read_bytes / 4096.0 / pulls, q, q / rq, cold_push_io[i].read_bytes / 4096.0 / pushes);
  }
  absl::StrAppend(&md, "\n**Memory of the disk tier's index** (outside the table's budget), after loading: the "
                       "file's rows (disk rows, and stale copies of rows brought back, as in RocksDB).\n\n",
                  "| in memory | disk rows | file rows | index bytes | bytes per file row | "
                  "file MiB (64 MiB segments) |\n|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < n; ++i) {
    const ShardStore::ColdFileStats& f = cases[i].files;
    const std::string per_row =
        f.rows == 0 ? std::string("-") : absl::StrFormat("%.1f", static_cast<double>(f.index_bytes) / f.rows);
    absl::StrAppend(&md, absl::StrFormat("| %.1f%% | %d | %d | %d | %s | %.1f |\n", 100 * cases[i].fraction,
                                         cases[i].disk_rows, f.rows, f.index_bytes, per_row,
                                         f.file_bytes / 1048576.0));
  }
  absl::StrAppend(&md, "\n");
  return md;
}

int Main(int argc, char** argv) {
  const std::string load_start = bench::LoadAverage();
  const bench::Machine machine = bench::DescribeMachine(argc, argv, absl::GetFlag(FLAGS_git_commit), absl::GetFlag(FLAGS_invocation));
  const std::string root = absl::GetFlag(FLAGS_dir);
  const int dim = absl::GetFlag(FLAGS_dim);
  const int batch = absl::GetFlag(FLAGS_batch);
  const std::string output = bench::UserPath(absl::GetFlag(FLAGS_output));
  std::vector<int> sections;
  for (absl::string_view n : absl::StrSplit(absl::GetFlag(FLAGS_sections), ',', absl::SkipEmpty())) {
    int section = 0;
    if (!absl::SimpleAtoi(n, &section) || section < 1 || section > 4) {
      std::fprintf(stderr, "--sections: expected numbers 1 to 4, got '%s'\n", std::string(n).c_str());
      return 2;
    }
    sections.push_back(section);
  }
  auto run = [&](int section) { return std::find(sections.begin(), sections.end(), section) != sections.end(); };
  // The report being replaced: the text of the sections not run is kept.
  std::string previous;
  {
    std::ifstream in(output);
    previous.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::string md;

  // ---- 1. Memory over time.
  const uint64_t budget = static_cast<uint64_t>(absl::GetFlag(FLAGS_budget_mb)) << 20;
  std::vector<Sample> samples;
  TableTierStats final_stats;
  uint64_t distinct = 0, unbounded_rows = 0;
  if (!run(1)) {
    absl::StrAppend(&md, SectionOf(previous, 1));
  } else {
    CapacityPolicy policy;
    policy.set_max_memory_bytes(budget);
    policy.set_admit_after(2);
    policy.set_ttl_clocks(500);
    const int64_t pushes = absl::GetFlag(FLAGS_stream_pushes);
    const uint64_t rss0 = ResidentBytes();
    Server bounded = MakeServer(root + "/stream_bounded", dim, &policy);
    Server unbounded = MakeServer(root + "/stream_unbounded", dim, nullptr);
    Stream stream(batch, 2000000, /*drift=*/200, /*new_rate=*/0.3);
    std::vector<uint64_t> seen_new;
    for (int64_t p = 1; p <= pushes; ++p) {
      const std::vector<uint64_t> keys = stream.Next(p);
      const std::vector<float> g = Grads(keys.size(), dim);
      MustOk(bounded.shard->Push(Ctx(p), "emb", keys, g, dim), "bounded push");
      MustOk(unbounded.shard->Push(Ctx(p), "emb", keys, g, dim), "unbounded push");
      if (p % std::max<int64_t>(1, pushes / 60) == 0 || p == pushes) {
        const Table& b = *bounded.shard->FindTable("emb");
        const Table& u = *unbounded.shard->FindTable("emb");
        // RSS of the bounded run alone is not separable in one process: report RSS minus the unbounded table.
        const uint64_t rss = ResidentBytes();
        const uint64_t rss_bounded = rss > rss0 + u.memory_bytes() ? rss - rss0 - u.memory_bytes() : 0;
        samples.push_back({p, u.num_rows(), b.memory_bytes(), rss_bounded, u.memory_bytes()});
      }
    }
    final_stats = bounded.shard->FindTable("emb")->tier_stats();
    distinct = unbounded.shard->FindTable("emb")->num_rows();
    unbounded_rows = distinct;
    uint64_t peak = 0, peak_rss = 0;
    for (const Sample& s : samples) {
      peak = std::max(peak, s.bounded_bytes);
      peak_rss = std::max(peak_rss, s.bounded_rss);
    }
    const std::string svg_path = absl::StrCat(output.substr(0, output.size() - 3), ".svg");
    MustOk(bench::WriteFile(svg_path, Svg(samples, budget)), "writing the plot");
    const Table& b = *bounded.shard->FindTable("emb");
    absl::StrAppend(
        &md, "## 1. Memory over time\n\n",
        absl::StrFormat(
            "%d pushes of %d keys (dim %d, Adagrad): Zipf(1.05) ranks over a 2M-id window sliding 200 ids per push, "
            "30%% of keys new ids never seen again. Bounded table: budget %d MiB, admit_after 2, ttl_clocks 500.\n\n",
            samples.back().push, batch, dim, budget >> 20),
        "![memory over time](", std::filesystem::path(svg_path).filename().string(), ")\n\n",
        "| | unbounded | bounded |\n|---|---|---|\n",
        absl::StrFormat("| distinct keys pushed | %d | %d |\n", distinct, distinct),
        absl::StrFormat("| rows at the end | %d | %d (%.1fx fewer) |\n", unbounded_rows, b.num_rows(),
                        static_cast<double>(unbounded_rows) / std::max<uint64_t>(1, b.num_rows())),
        absl::StrFormat("| table memory at the end (MiB) | %.1f | %.1f |\n", samples.back().unbounded_bytes / 1048576.0,
                        samples.back().bounded_bytes / 1048576.0),
        absl::StrFormat("| peak accounted memory / budget | | %.3f |\n", static_cast<double>(peak) / budget),
        absl::StrFormat("| peak RSS growth (minus the unbounded table) / budget | | %.3f |\n",
                        static_cast<double>(peak_rss) / budget),
        absl::StrFormat("| admitted / not admitted (pushed keys) | | %d / %d |\n", final_stats.admitted,
                        final_stats.not_admitted),
        absl::StrFormat("| evicted: ttl / capacity | | %d / %d |\n\n", final_stats.expired,
                        final_stats.capacity_dropped));
    std::printf("memory: peak %.3f x budget, rows %llu vs %llu\n", static_cast<double>(peak) / budget,
                static_cast<unsigned long long>(b.num_rows()), static_cast<unsigned long long>(
                unbounded_rows));
  }

  // ---- 2. Hit ratios.
  absl::StrAppend(&md, run(2) ? HitRatios(root, dim, batch) : SectionOf(previous, 2));

  // ---- 3. Admission and eviction cost.
  if (!run(3)) {
    absl::StrAppend(&md, SectionOf(previous, 3));
  } else {
    const int64_t pushes = 200;
    auto cost = [&](const CapacityPolicy* policy, const std::string& name) {
      Server s = MakeServer(root + "/cost_" + name, dim, policy);
      std::vector<double> ns;
      uint64_t next = 0;
      for (int64_t p = 1; p <= pushes; ++p) {
        std::vector<uint64_t> keys(batch);
        for (uint64_t& k : keys) k = Mix64(next++);
        std::sort(keys.begin(), keys.end());
        const std::vector<float> g = Grads(keys.size(), dim);
        const Clock::time_point start = Clock::now();
        MustOk(s.shard->Push(Ctx(p), "emb", keys, g, dim), "cost push");
        ns.push_back(Seconds(start, Clock::now()) * 1e9 / keys.size());
      }
      return Median(ns);
    };
    CapacityPolicy admission;
    admission.set_admit_after(2);
    CapacityPolicy to_disk = admission;
    to_disk.set_admit_to_disk(true);
    to_disk.set_max_disk_bytes(uint64_t{16} << 30);
    CapacityPolicy eviction;
    // A quarter of the stream's rows fit: once full, every push evicts.
    eviction.set_max_memory_bytes(static_cast<uint64_t>(pushes) * batch * (8 + 4 * (2 * dim + 2)) / 4);
    const double plain = cost(nullptr, "plain"), admit = cost(&admission, "admission"),
                 staged = cost(&to_disk, "to_disk"), evict = cost(&eviction, "eviction");
    absl::StrAppend(&md, "## 3. Admission and eviction cost\n\n",
                    absl::StrFormat("%d pushes of %d new keys each (dim %d); median ns per pushed key.\n\n", pushes,
                                    batch, dim),
                    "| table | ns/key | extra over unbounded |\n|---|---|---|\n",
                    absl::StrFormat("| unbounded | %.0f | |\n", plain),
                    absl::StrFormat("| admission after 2 pushes (every key counted, none admitted) | %.0f | %+.0f |\n",
                                    admit, admit - plain),
                    absl::StrFormat("| admission after 2 pushes to disk (every key's first push applied to a row "
                                    "written to the disk tier: RocksDB and the spill file) | %.0f | %+.0f |\n",
                                    staged, staged - plain),
                    absl::StrFormat("| memory budget 1/4 of the stream (evicts 1/16 of a stripe when full) | %.0f | %+.0f |\n\n",
                                    evict, evict - plain));
    std::printf("cost: plain %.0f ns/key, admission %.0f, to disk %.0f, eviction %.0f\n", plain, admit, staged,
                evict);
  }
  // ---- 4. AUC effect.
  if (const std::string data = absl::GetFlag(FLAGS_data_dir); !run(4) || data.empty()) {
    absl::StrAppend(&md, SectionOf(previous, 4));
  } else {
    absl::StrAppend(&md, "## 4. Test AUC and rows on a large-vocabulary set\n\n",
                    "Data: `kestrel_datagen --large_vocab` in ", data,
                    " (1M train rows, 100k test rows; ids drift and 5% of values are ids seen once). One epoch, "
                    "batch 1024, in-process training (one server). Rows: the sparse tables' rows at the end, in "
                    "memory and (admit_to_disk: keys pushed fewer than admit_after times, kept on the disk tier) on "
                    "disk; memory share: memory rows / the unbounded table's rows.\n\n",
                    "| model | policy | test AUC | AUC - unbounded | memory rows | disk rows | memory share |\n"
                    "|---|---|---|---|---|---|---|\n");
    struct Policy {
      std::string name;
      uint32_t admit_after;
      int64_t ttl;
      bool to_disk;  // CapacityPolicy.admit_to_disk, with a disk tier
    };
    const std::vector<Policy> policies = {{"unbounded", 0, 0, false},
                                          {"admit after 2", 2, 0, false},
                                          {"admit after 2, to disk", 2, 0, true},
                                          {"admit after 5, to disk", 5, 0, true},
                                          {"ttl 300 clocks", 0, 300, false},
                                          {"admit after 2, ttl 200 clocks", 2, 200, false}};
    for (const std::string model : {"LOGISTIC_REGRESSION", "DEEPFM"}) {
      double base_auc = 0;
      uint64_t base_rows = 0;
      for (const Policy& p : policies) {
        JobConfig job;
        ModelConfig::Type type;
        ModelConfig::Type_Parse(model, &type);
        job.mutable_model()->set_type(type);
        if (type == ModelConfig::DEEPFM) {
          job.mutable_model()->set_embedding_dim(16);
          job.mutable_model()->add_hidden(256);
          job.mutable_model()->add_hidden(128);
        }
        if (p.name != "unbounded") {
          CapacityPolicy* c = job.mutable_model()->mutable_sparse_capacity();
          c->set_admit_after(p.admit_after);
          c->set_ttl_clocks(p.ttl);
          if (p.to_disk) {
            c->set_admit_to_disk(true);
            c->set_max_disk_bytes(uint64_t{16} << 30);
          }
        }
        job.mutable_data()->add_train_files(data + "/train.tsv");
        job.mutable_data()->add_test_files(data + "/test.tsv");
        job.mutable_train()->set_batch_size(1024);
        job.mutable_train()->set_log_every_steps(100000);
        uint64_t rows = 0, disk_rows = 0;
        LocalTrainingOptions options;
        std::vector<std::unique_ptr<ShardStore>> stores;  // the disk tiers (admit_to_disk)
        if (p.to_disk) {
          options.prepare = [&](const std::vector<Shard*>& shards) {
            for (size_t s = 0; s < shards.size(); ++s) {
              const std::string dir = absl::StrCat(absl::GetFlag(FLAGS_dir), "/auc_tier");
              stores.push_back(std::move(ShardStore::Open(CheckpointLayout(dir), static_cast<int>(s))).value());
              shards[s]->SetColdTier(stores.back().get());
            }
          };
        }
        options.inspect = [&](const std::vector<Shard*>& shards) {
          for (Shard* shard : shards) {
            for (const TableStats& t : shard->Stats().tables) {
              if (t.config.kind() != TableConfig::SPARSE) continue;
              rows += t.rows - t.tier.disk_rows;
              disk_rows += t.tier.disk_rows;
            }
          }
        };
        std::unique_ptr<Backend> backend = NewCpuBackend();
        absl::StatusOr<TrainResult> result = TrainInProcess(job, backend.get(), options);
        MustOk(result.status(), "training");
        const double auc = result->eval.auc;
        if (p.name == "unbounded") {
          base_auc = auc;
          base_rows = rows;
        }
        absl::StrAppend(&md, absl::StrFormat("| %s | %s | %.5f | %+.5f | %d | %d | %.2f |\n", model, p.name, auc,
                                             auc - base_auc, rows, disk_rows,
                                             static_cast<double>(rows) / static_cast<double>(base_rows)));
        std::printf("%s %s: auc %.5f (%+.5f), memory rows %llu, disk rows %llu\n", model.c_str(), p.name.c_str(),
                    auc, auc - base_auc, static_cast<unsigned long long>(rows),
                    static_cast<unsigned long long>(disk_rows));
        std::fflush(stdout);
      }
    }
    absl::StrAppend(&md, "\n");
  }
  // The header last: the load average at the end is now's.
  std::string kept;
  for (int section = 1; section <= 4; ++section) {
    const bool ran = run(section) && (section < 4 || !absl::GetFlag(FLAGS_data_dir).empty());
    if (!ran && !SectionOf(previous, section).empty()) absl::StrAppend(&kept, kept.empty() ? "" : ", ", section);
  }
  std::string header = "# Bounded tables: memory, hit ratios, admission and eviction cost\n\n";
  absl::StrAppend(&header, bench::MachineMarkdown(machine, load_start), "\n\n", bench::CommandMarkdown(machine));
  if (!kept.empty()) {
    absl::StrAppend(&header, "Sections ", kept, ": kept from the previous report (", PreviousRun(previous),
                    "); this run wrote the others.\n\n");
  }
  MustOk(bench::WriteFile(output, header + md), "writing the report");
  std::filesystem::remove_all(root);
  return 0;
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return kestrel::Main(argc, argv);
}
