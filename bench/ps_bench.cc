// ps_bench: throughput of sparse Pull and Push through the gRPC PsClient against real kestrel_server processes
// on loopback, compared with the same calls on an in-process Shard, plus memory per row of the table store.
//
//   bench/run_ps_bench.sh                       # builds with -c opt, runs the defaults, writes bench/results
//   bench/run_ps_bench.sh --servers=2 --keys=100000 --dims=16 --clients=1
//
// For every (keys, dim, clients) configuration:
//   - the keys are `keys` distinct random 64-bit keys (Partition::FeatureKey of a random window of ids), sorted,
//     so the client's sort/dedup takes its fast path and sorted keys are already grouped by server;
//   - one table per (keys, dim): SPARSE, ZEROS initializer, SGD; pre-populated by one push of all keys, so
//     pulls hit existing rows and pushes update existing rows;
//   - network: `clients` threads, each with its own PsClient (NewGrpcPsClient), call Pull (or Push) with all
//     keys in a loop for --min_seconds; keys/s is the total over threads divided by the wall time, latency is
//     per PsClient call (one call may be split into several RPCs of <= 2 MiB, sent in parallel);
//   - in-process: the same calls directly on one Shard (Partition::Uniform(1)), `clients` threads on that Shard;
//   - every figure is the median of --runs runs; runs of the network and in-process paths are interleaved, and
//     the ratio network / in-process is computed from the medians of this invocation.
// Every call's Status is checked: a failure aborts the bench with the configuration and the error. At the end the
// servers' own counters must match the keys this process sent, with no rejected request.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "bench/bench.pb.h"
#include "bench/bench_util.h"
#include "common/json.h"
#include "common/process_setup.h"
#include "common/partition.h"
#include "common/status.h"
#include "common/testing_certs.h"
#include "common/tls.h"
#include "proto/table.pb.h"
#include "server/shard.h"
#include "tests/server_process.h"
#include "worker/grpc_ps_client.h"
#include "worker/ps_client.h"

ABSL_FLAG(int, servers, 1, "Number of kestrel_server processes to spawn on loopback.");
ABSL_FLAG(std::string, keys, "10000,100000", "Comma-separated numbers of keys per call.");
ABSL_FLAG(std::string, dims, "1,16,64", "Comma-separated row dimensions (floats per key).");
ABSL_FLAG(std::string, clients, "1,2",
          "Comma-separated numbers of client threads; over the network each has its own PsClient, in-process "
          "they share one Shard.");
ABSL_FLAG(int, runs, 3, "Runs per measurement; every reported figure is the median over runs.");
ABSL_FLAG(double, min_seconds, 1.0, "Seconds each measurement (one run of one op) lasts at least.");
ABSL_FLAG(std::string, output, "bench/results/ps_bench.md", "Markdown report path ('' to skip).");
ABSL_FLAG(std::string, json, "", "If set, also write the results as JSON to this path.");
ABSL_FLAG(std::string, server_binary, "",
          "kestrel_server to spawn. Default: the runfiles copy, else bazel-bin/server/kestrel_server.");
ABSL_FLAG(int, replicas, 1,
          "R >= 2 also measures a replicated set of --servers servers (needs --servers >= R): a kestrel_scheduler and "
          "servers started with --replicas=R, every push forwarded to a backup before it is acknowledged "
          "(docs/replication.md), fp32 only, its runs interleaved with the unreplicated ones. 1 (default): off.");
ABSL_FLAG(std::string, scheduler_binary, "",
          "kestrel_scheduler for --replicas (default: found next to this binary or in the runfiles).");
ABSL_FLAG(int, server_threads, 0, "--threads of each kestrel_server (0: the server's default, handlers inline on gRPC's threads).");
ABSL_FLAG(int64_t, max_request_bytes, 0,
          "PsClientOptions::max_request_bytes of the network clients (0: the library default, 2 MiB).");
ABSL_FLAG(int, channels_per_server, 0,
          "PsClientOptions::channels_per_server of the network clients (0: the library default).");
ABSL_FLAG(std::string, git_commit, "", "Commit being measured (default: git rev-parse --short HEAD, if any).");
ABSL_FLAG(std::string, invocation, "", "The command that reproduces this run (run_ps_bench.sh passes its own).");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the key windows and gradients.");
ABSL_FLAG(std::string, ops, "pull,push", "Comma-separated ops to measure: pull, push.");
ABSL_FLAG(std::string, wire_types, "float32,bfloat16,float16",
          "Comma-separated wire types of the tables (TableConfig.wire_type): float32, bfloat16, float16. The "
          "in-process path stores fp32 whatever the wire type, so it is measured once, with the float32 tables.");
ABSL_FLAG(bool, network, true,
          "Measure the network path (false: in-process only, e.g. for profiling the table; servers still start).");
ABSL_FLAG(bool, in_process, true,
          "Also measure the in-process path (false: network only, e.g. for profiling the network path).");
ABSL_FLAG(bool, tls, true,
          "Also measure the network path over mutual TLS (a second set of servers and clients with certificates of "
          "a throwaway CA, runs interleaved with the plaintext ones): the report gains the mTLS / plaintext ratio.");
ABSL_FLAG(int64_t, memory_rows, 1000000, "Rows of the memory-per-row tables (0 skips that section).");
ABSL_FLAG(int, memory_dim, 16, "Dim of the memory-per-row tables.");
ABSL_FLAG(bool, memory_only, false,
          "Measure only the memory per row (in this process, no servers) and print its table; writes no report. "
          "Default: false.");

namespace kestrel {
namespace {

using bench::Machine;
using bench::UserPath;
using bench::WriteFile;
using Clock = std::chrono::steady_clock;

constexpr char kJob[] = "kestrel";

// ---------------------------------------------------------------------------------------------------------
// Small helpers.

absl::StatusOr<std::vector<int64_t>> ParseList(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int64_t v;
    if (!absl::SimpleAtoi(part, &v) || v <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", part, "' is not a positive integer"));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return out;
}

using bench::Median;

// Nearest-rank percentile of sorted values.
double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(q * sorted.size()));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

// ---------------------------------------------------------------------------------------------------------
// Measurement: `threads` threads call op(thread) in a loop from a common start until min_seconds have passed.

struct Sample {
  double keys_per_s = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  int64_t calls = 0;
};

using Op = std::function<absl::Status(int thread)>;

absl::StatusOr<Sample> Measure(int threads, size_t keys_per_call, double min_seconds, const Op& op) {
  std::mutex mu;
  absl::Status error;
  std::atomic<bool> stop{false};
  auto fail = [&](absl::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    if (error.ok()) error = std::move(s);
    stop.store(true);
  };
  std::vector<std::vector<double>> latencies(threads);
  std::vector<Clock::time_point> ends(threads);
  std::vector<int64_t> calls(threads, 0);
  absl::BlockingCounter ready(threads);
  absl::Notification go;
  Clock::time_point start;
  const auto duration = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(min_seconds));

  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      // One untimed call warms connections, buffers and caches.
      absl::Status warm = op(t);
      if (!warm.ok()) fail(std::move(warm));
      latencies[t].reserve(4096);
      ready.DecrementCount();
      go.WaitForNotification();
      Clock::time_point now = start;
      while (!stop.load(std::memory_order_relaxed) && now - start < duration) {
        const Clock::time_point t0 = Clock::now();
        absl::Status s = op(t);
        now = Clock::now();
        if (!s.ok()) {
          fail(std::move(s));
          break;
        }
        latencies[t].push_back(std::chrono::duration<double, std::milli>(now - t0).count());
        ++calls[t];
      }
      ends[t] = now;
    });
  }
  ready.Wait();
  start = Clock::now();
  go.Notify();
  for (auto& w : workers) w.join();
  if (!error.ok()) return error;

  Sample sample;
  std::vector<double> all;
  Clock::time_point end = start;
  for (int t = 0; t < threads; ++t) {
    all.insert(all.end(), latencies[t].begin(), latencies[t].end());
    end = std::max(end, ends[t]);
    sample.calls += calls[t];
  }
  std::sort(all.begin(), all.end());
  const double seconds = std::chrono::duration<double>(end - start).count();
  sample.keys_per_s = static_cast<double>(sample.calls) * keys_per_call / seconds;
  sample.p50_ms = Percentile(all, 0.50);
  sample.p99_ms = Percentile(all, 0.99);
  return sample;
}

// ---------------------------------------------------------------------------------------------------------
// Results.

struct Figures {  // medians over runs
  bool measured = false;
  double keys_per_s = 0, mb_per_s = 0, p50_ms = 0, p99_ms = 0;
  int64_t calls = 0;  // total timed calls over all runs
};

struct Row {
  int64_t keys = 0;
  int dim = 0;
  ValueType wire = VALUE_TYPE_FLOAT32;
  int clients = 0;
  std::string op;  // "pull" | "push"
  Figures net, local;
  Figures tls;  // the network path over mutual TLS (--tls)
  Figures replicated;  // the network path with --replicas copies of every range
  bool has_ratio() const { return net.measured && local.measured && local.keys_per_s > 0; }
  double ratio() const { return has_ratio() ? net.keys_per_s / local.keys_per_s : 0; }
};

Figures Summarize(const std::vector<Sample>& samples, int dim) {
  Figures f;
  f.measured = !samples.empty();
  if (!f.measured) return f;
  std::vector<double> kps, p50, p99;
  for (const Sample& s : samples) {
    kps.push_back(s.keys_per_s);
    p50.push_back(s.p50_ms);
    p99.push_back(s.p99_ms);
    f.calls += s.calls;
  }
  f.keys_per_s = Median(kps);
  f.mb_per_s = f.keys_per_s * dim * sizeof(float) / 1e6;
  f.p50_ms = Median(p50);
  f.p99_ms = Median(p99);
  return f;
}

struct MemoryRow {
  std::string optimizer;
  uint64_t rows = 0, memory_bytes = 0, raw_bytes = 0;
  double insert_rows_per_s = 0;
};

// ---------------------------------------------------------------------------------------------------------
// The benchmark.

TableConfig MakeTable(const std::string& name, int dim, OptimizerConfig::Type optimizer,
                      ValueType wire = VALUE_TYPE_FLOAT32) {
  TableConfig config;
  config.set_wire_type(wire);
  config.set_name(name);
  config.set_kind(TableConfig::SPARSE);
  config.set_dim(dim);
  config.set_seed(1);
  config.mutable_initializer()->set_type(InitializerConfig::ZEROS);
  config.mutable_optimizer()->set_type(optimizer);
  config.mutable_optimizer()->set_learning_rate(0.01f);
  return config;
}

const char* WireName(ValueType wire) {
  switch (wire) {
    case VALUE_TYPE_FLOAT16:
      return "float16";
    case VALUE_TYPE_BFLOAT16:
      return "bfloat16";
    default:
      return "float32";
  }
}

absl::StatusOr<std::vector<ValueType>> ParseWireTypes(const std::string& list) {
  std::vector<ValueType> out;
  for (absl::string_view name : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    if (name == "float32") {
      out.push_back(VALUE_TYPE_FLOAT32);
    } else if (name == "bfloat16") {
      out.push_back(VALUE_TYPE_BFLOAT16);
    } else if (name == "float16") {
      out.push_back(VALUE_TYPE_FLOAT16);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--wire_types: unknown type '", name, "'"));
    }
  }
  if (out.empty()) return absl::InvalidArgumentError("--wire_types is empty");
  return out;
}

// `n` distinct keys spread over the whole key space: FeatureKey of a random window of feature ids, sorted.
std::vector<uint64_t> MakeKeys(size_t n, std::mt19937_64& rng) {
  const uint64_t base = rng();
  std::vector<uint64_t> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = Partition::FeatureKey(base + i);
  std::sort(keys.begin(), keys.end());
  return keys;
}

std::vector<float> MakeGrads(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-1e-3f, 1e-3f);
  std::vector<float> grads(n);
  for (float& g : grads) g = dist(rng);
  return grads;
}

absl::Status WithContext(absl::Status s, const std::string& what) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

// The throughput section. Every (keys, dim) gets its keys, gradients and tables up front; then each run measures
// every configuration once, so that a burst of foreign load on the machine spoils one run of several
// configurations (which the median over runs discards) rather than every run of one configuration.
class Bench {
 public:
  Bench(std::vector<std::unique_ptr<PsClient>> clients, Shard* shard, std::vector<int64_t> client_counts,
        std::vector<std::string> op_names)
      : clients_(std::move(clients)),
        shard_(shard),
        client_counts_(std::move(client_counts)),
        op_names_(std::move(op_names)) {}

  // Whether AddConfig and runs cover the in-process path too (--in_process; the mTLS bench measures the network
  // only, and may have no shard). Set before AddConfig.
  void set_in_process(bool measure) { in_process_ = measure; }
  uint64_t net_keys_pulled() const { return net_keys_pulled_.load(); }
  uint64_t net_keys_pushed() const { return net_keys_pushed_.load(); }

  // Generates the keys and gradients of (num_keys, dim) and creates and pre-populates its tables on the servers
  // and on the in-process Shard, so pulls hit existing rows and pushes update existing rows.
  absl::Status AddConfig(int64_t num_keys, int dim, ValueType wire, std::mt19937_64& rng) {
    auto c = std::make_unique<Config>();
    c->num_keys = num_keys;
    c->dim = dim;
    c->wire = wire;
    c->in_process = in_process_ && wire == VALUE_TYPE_FLOAT32;
    c->name = absl::StrCat("bench_k", num_keys, "_d", dim, "_", WireName(wire));
    c->keys = MakeKeys(num_keys, rng);
    c->grads = MakeGrads(c->keys.size() * dim, rng);
    const TableConfig config = MakeTable(c->name, dim, OptimizerConfig::SGD, wire);
    KESTREL_RETURN_IF_ERROR(WithContext(clients_[0]->CreateTable(config), "network CreateTable " + c->name));
    KESTREL_RETURN_IF_ERROR(WithContext(clients_[0]->Push(c->name, c->keys, dim, c->grads.data()),
                                        "network pre-populating push " + c->name));
    net_keys_pushed_ += c->keys.size();
    if (c->in_process) {
      KESTREL_RETURN_IF_ERROR(
          WithContext(shard_->CreateTable(ctx_, config).status(), "in-process CreateTable " + c->name));
      KESTREL_RETURN_IF_ERROR(WithContext(shard_->Push(ctx_, c->name, c->keys, c->grads, dim),
                                          "in-process pre-populating push " + c->name));
    }
    const int max_threads = static_cast<int>(*std::max_element(client_counts_.begin(), client_counts_.end()));
    c->pulled.assign(max_threads, std::vector<float>(c->keys.size() * dim));
    c->local_values.resize(max_threads);
    for (int64_t clients : client_counts_) {
      for (const char* op : {"pull", "push"}) {
        if (!absl::c_linear_search(op_names_, op)) continue;
        c->cells.push_back({static_cast<int>(clients), op, {}, {}});
      }
    }
    configs_.push_back(std::move(c));
    return absl::OkStatus();
  }

  // One run: every configuration, client count and op once, network then in-process.
  absl::Status Run(int run, double min_seconds) {
    for (auto& c : configs_) {
      for (Cell& cell : c->cells) {
        const std::string what =
            absl::StrFormat("%s keys=%d dim=%d clients=%d run %d", cell.op, c->num_keys, c->dim, cell.clients, run + 1);
        const bool pull = std::string(cell.op) == "pull";
        if (absl::GetFlag(FLAGS_network)) {
          absl::StatusOr<Sample> n = Measure(cell.clients, c->keys.size(), min_seconds, NetworkOp(*c, pull));
          if (!n.ok()) return WithContext(n.status(), "network " + what);
          cell.net.push_back(*n);
        }
        if (c->in_process) {
          absl::StatusOr<Sample> l = Measure(cell.clients, c->keys.size(), min_seconds, LocalOp(*c, pull));
          if (!l.ok()) return WithContext(l.status(), "in-process " + what);
          cell.local.push_back(*l);
        }
      }
    }
    return absl::OkStatus();
  }

  // The medians over runs, one row per (keys, dim, clients, op).
  std::vector<Row> Rows() const {
    std::vector<Row> rows;
    for (const auto& c : configs_) {
      for (const Cell& cell : c->cells) {
        Row row;
        row.keys = c->num_keys;
        row.dim = c->dim;
        row.wire = c->wire;
        row.clients = cell.clients;
        row.op = cell.op;
        row.net = Summarize(cell.net, c->dim);
        row.local = Summarize(cell.local, c->dim);
        rows.push_back(row);
      }
    }
    // A half-type row's in-process figures: its float32 twin's (the Shard stores fp32 either way).
    for (Row& row : rows) {
      if (row.local.measured) continue;
      for (const Row& twin : rows) {
        if (twin.local.measured && twin.keys == row.keys && twin.dim == row.dim && twin.clients == row.clients &&
            twin.op == row.op) {
          row.local = twin.local;
        }
      }
    }
    return rows;
  }

 private:
  // One (keys, dim, clients, op) and its samples so far.
  struct Cell {
    int clients;
    const char* op;
    std::vector<Sample> net, local;
  };
  // One (keys, dim): its keys, gradients, per-thread output buffers and measurements.
  struct Config {
    int64_t num_keys = 0;
    int dim = 0;
    ValueType wire = VALUE_TYPE_FLOAT32;
    bool in_process = false;  // measured in-process too (the float32 tables only)
    std::string name;
    std::vector<uint64_t> keys;
    std::vector<float> grads;
    std::vector<std::vector<float>> pulled;  // per client thread, network pulls
    std::vector<std::string> local_values;   // per client thread, in-process pulls
    std::vector<Cell> cells;
  };

  Op NetworkOp(Config& c, bool pull) {
    if (pull) {
      return [this, &c](int t) {
        net_keys_pulled_.fetch_add(c.keys.size(), std::memory_order_relaxed);
        return clients_[t]->Pull(c.name, c.keys, c.dim, c.pulled[t].data());
      };
    }
    return [this, &c](int t) {
      net_keys_pushed_.fetch_add(c.keys.size(), std::memory_order_relaxed);
      return clients_[t]->Push(c.name, c.keys, c.dim, c.grads.data());
    };
  }

  Op LocalOp(Config& c, bool pull) {
    if (pull) return [this, &c](int t) { return shard_->Pull(ctx_, c.name, c.keys, c.dim, &c.local_values[t]); };
    return [this, &c](int) { return shard_->Push(ctx_, c.name, c.keys, c.grads, c.dim); };
  }

  const std::vector<std::unique_ptr<PsClient>> clients_;
  bool in_process_ = absl::GetFlag(FLAGS_in_process);
  Shard* const shard_;
  const std::vector<int64_t> client_counts_;
  const std::vector<std::string> op_names_;
  const RequestContext ctx_{kJob};
  std::vector<std::unique_ptr<Config>> configs_;
  std::atomic<uint64_t> net_keys_pulled_{0}, net_keys_pushed_{0};
};

void PrintRow(const Row& r) {
  std::printf(
      "  keys=%-7lld dim=%-3d %-8s clients=%d %s: network %7.2fM keys/s (p50 %7.3f ms), in-process %7.2fM keys/s "
      "(p50 %7.3f ms), ratio %.2f\n",
      static_cast<long long>(r.keys), r.dim, WireName(r.wire), r.clients, r.op.c_str(), r.net.keys_per_s / 1e6, r.net.p50_ms,
      r.local.keys_per_s / 1e6, r.local.p50_ms, r.ratio());
}

absl::StatusOr<std::vector<MemoryRow>> MeasureMemory(int64_t rows, int dim, std::mt19937_64& rng) {
  std::vector<MemoryRow> out;
  if (rows <= 0) return out;
  const std::vector<uint64_t> keys = MakeKeys(rows, rng);
  constexpr size_t kBatch = 1 << 16;
  const std::vector<float> grads = MakeGrads(kBatch * dim, rng);
  const RequestContext ctx{kJob};
  struct Variant {
    const char* label;
    OptimizerConfig::Type optimizer;
    ValueType storage;  // TableConfig.storage.type
  };
  const Variant variants[] = {
      {"fp32 SGD", OptimizerConfig::SGD, VALUE_TYPE_FLOAT32},
      {"fp32 Adagrad", OptimizerConfig::ADAGRAD, VALUE_TYPE_FLOAT32},
      {"fp32 row-wise Adagrad", OptimizerConfig::ROWWISE_ADAGRAD, VALUE_TYPE_FLOAT32},
      {"fp32 Adam", OptimizerConfig::ADAM, VALUE_TYPE_FLOAT32},
      {"bf16 Adagrad", OptimizerConfig::ADAGRAD, VALUE_TYPE_BFLOAT16},
      {"bf16 row-wise Adagrad", OptimizerConfig::ROWWISE_ADAGRAD, VALUE_TYPE_BFLOAT16},
      {"fp16 row-wise Adagrad", OptimizerConfig::ROWWISE_ADAGRAD, VALUE_TYPE_FLOAT16},
      {"bf16 SGD", OptimizerConfig::SGD, VALUE_TYPE_BFLOAT16}};
  for (const auto& [label, type, storage] : variants) {
    ShardOptions options;
    options.job_id = kJob;
    KESTREL_ASSIGN_OR_RETURN(Partition partition, Partition::Uniform(1));
    KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<Shard> shard, Shard::Create(options, partition));
    const std::string name = absl::StrReplaceAll(absl::StrCat("memory_", label), {{" ", "_"}});
    TableConfig config = MakeTable(name, dim, type);
    config.mutable_storage()->set_type(storage);
    KESTREL_RETURN_IF_ERROR(shard->CreateTable(ctx, config).status());
    const Clock::time_point start = Clock::now();
    for (size_t first = 0; first < keys.size(); first += kBatch) {
      const size_t n = std::min(kBatch, keys.size() - first);
      KESTREL_RETURN_IF_ERROR(WithContext(shard->Push(ctx, name, absl::MakeConstSpan(keys).subspan(first, n),
                                                      absl::MakeConstSpan(grads).subspan(0, n * dim), dim),
                                          absl::StrCat("memory table ", name)));
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const ShardStats stats = shard->Stats();
    if (stats.tables.size() != 1) return absl::InternalError("memory shard should hold exactly one table");
    MemoryRow m;
    m.optimizer = label;
    m.rows = stats.tables[0].rows;
    m.memory_bytes = stats.tables[0].memory_bytes;
    m.raw_bytes = stats.tables[0].raw_bytes;
    m.insert_rows_per_s = rows / seconds;
    if (m.rows != static_cast<uint64_t>(rows)) {
      return absl::InternalError(absl::StrFormat("memory table %s holds %d rows, expected %d", name, m.rows, rows));
    }
    out.push_back(m);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// Report.

// The memory-per-row section: a heading and a table, one row per optimizer.
std::string MemoryMarkdown(const std::vector<MemoryRow>& memory, int memory_dim) {
  std::string s = absl::StrCat("## Memory per row (in-process, ", memory[0].rows, " rows x dim ", memory_dim, ")\n\n");
  absl::StrAppend(&s,
                  "raw bytes = key (8) + values (fp32, or bf16/fp16: TableConfig.storage) + optimizer slots; "
                  "memory bytes = arena chunks + hash index + row flags (Table::memory_bytes()); rows vs fp32 "
                  "Adagrad = its memory B/row over this one's (the rows a budget holds, relative).\n\n");
  absl::StrAppend(&s,
                  "| values, optimizer | rows | raw B/row | memory B/row | memory / raw | overhead B/row | "
                  "M rows per GiB | rows vs fp32 Adagrad | insert Mrows/s |\n");
  absl::StrAppend(&s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  double adagrad = 0;  // memory B/row of fp32 Adagrad
  for (const MemoryRow& mr : memory) {
    if (mr.optimizer == "fp32 Adagrad") adagrad = static_cast<double>(mr.memory_bytes) / mr.rows;
  }
  for (const MemoryRow& mr : memory) {
    const double raw = static_cast<double>(mr.raw_bytes) / mr.rows;
    const double mem = static_cast<double>(mr.memory_bytes) / mr.rows;
    absl::StrAppend(&s, absl::StrFormat("| %s | %d | %.1f | %.1f | %.3f | %.1f | %.2f | %.2fx | %.2f |\n",
                                        mr.optimizer, mr.rows, raw, mem, mem / raw, mem - raw, (1 << 30) / mem / 1e6,
                                        adagrad / mem, mr.insert_rows_per_s / 1e6));
  }
  return s;
}

std::string Markdown(const Machine& m, const std::string& load_start, int servers, int runs, double min_seconds,
                     const std::string& server_binary, const std::vector<Row>& rows,
                     const std::vector<MemoryRow>& memory, int memory_dim, double total_seconds) {
  std::string s = "# Kestrel ps_bench: sparse Pull/Push throughput, network vs. in-process\n\n";
  const int64_t request_bytes = absl::GetFlag(FLAGS_max_request_bytes) > 0
                                    ? absl::GetFlag(FLAGS_max_request_bytes)
                                    : static_cast<int64_t>(PsClientOptions().max_request_bytes);
  absl::StrAppend(&s, "## Machine\n\n");
  absl::StrAppend(&s, bench::MachineMarkdown(m, load_start));
  absl::StrAppend(&s, "| Bench runtime | ", absl::StrFormat("%.0f s", total_seconds), " |\n\n");
  absl::StrAppend(&s, bench::CommandMarkdown(m));
  absl::StrAppend(&s, "## Setup\n\n");
  absl::StrAppend(&s, "- Network: ", servers, " kestrel_server process(es) (",
                  std::filesystem::path(server_binary).filename().string(),
                  ") on 127.0.0.1, Partition::Uniform(", servers,
                  "); each client thread has its own PsClient (NewGrpcPsClient; a call is split into requests of at "
                  "most ",
                  request_bytes, " bytes, up to ", PsClientOptions().max_inflight_per_server,
                  " of them in flight per server, over ",
                  absl::GetFlag(FLAGS_channels_per_server) > 0 ? absl::GetFlag(FLAGS_channels_per_server)
                                                               : PsClientOptions().channels_per_server,
                  " connections per server).\n");
  absl::StrAppend(&s,
                  "- In-process: Shard::Pull / Shard::Push on one Shard (Partition::Uniform(1)); with N clients, N "
                  "threads call the same Shard.\n");
  absl::StrAppend(&s,
                  "- Every call carries all `keys` keys: distinct random 64-bit keys (FeatureKey of a random id "
                  "window), sorted. Table: SPARSE, ZEROS initializer, SGD, pre-populated by one push, so pulls "
                  "read existing rows and pushes update them. All clients use the same keys.\n");
  absl::StrAppend(&s, "- Each figure is the median of ", runs, " runs of at least ", min_seconds,
                  " s each (each run measures every configuration once, network then in-process); the ratio is network "
                  "/ in-process of those "
                  "medians. keys/s is the total over clients; MB/s counts values only (keys/s x dim x 4 B). "
                  "Latency is per PsClient / Shard call (with few calls per run, p99 is close to the maximum).\n\n");

  absl::StrAppend(&s, "## Throughput\n\n");
  absl::StrAppend(&s,
                  "| keys | dim | wire | clients | op | net Mkeys/s | net MB/s | net p50 ms | net p99 ms | in-proc "
                  "Mkeys/s | in-proc MB/s | in-proc p50 ms | in-proc p99 ms | net / in-proc |\n");
  absl::StrAppend(&s, "|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  auto cells = [](const Figures& f) {
    if (!f.measured) return std::string("- | - | - | -");
    return absl::StrFormat("%.2f | %.0f | %.3f | %.3f", f.keys_per_s / 1e6, f.mb_per_s, f.p50_ms, f.p99_ms);
  };
  for (const Row& r : rows) {
    absl::StrAppend(
        &s, absl::StrFormat("| %d | %d | %s | %d | %s | %s | %s | %s |\n", r.keys, r.dim, WireName(r.wire), r.clients,
                            r.op, cells(r.net),
                            cells(r.local), r.has_ratio() ? absl::StrFormat("%.2f", r.ratio()) : "-"));
  }

  // Goals (from the project's issues; not tests): 1.5x ps-lite's published 16.3M pull / 17.3M push keys/s at
  // this setting, or 60% of the in-process shard.
  absl::StrAppend(&s, "\n### Goals (1 server, 1 client, 100000 keys x 16 floats)\n\n");
  absl::StrAppend(&s,
                  "Goal: >= 1.5x ps-lite's figures at this setting (16.3M pull, 17.3M push keys/s, so >= 24.5M / "
                  ">= 26M), or >= 60% of the in-process shard. Bytes on the wire per key: 8 (key) + 16 x the "
                  "value width (4 for float32, 2 for the half types).\n\n");
  bool any_goal = false;
  for (const Row& r : rows) {
    if (servers != 1 || r.keys != 100000 || r.dim != 16 || r.clients != 1 || !r.has_ratio()) continue;
    any_goal = true;
    const double goal = r.op == "pull" ? 24.5e6 : 26e6;
    std::string vs_fp32;
    for (const Row& f : rows) {
      if (r.wire != VALUE_TYPE_FLOAT32 && f.wire == VALUE_TYPE_FLOAT32 && f.keys == r.keys && f.dim == r.dim &&
          f.clients == r.clients && f.op == r.op && f.net.keys_per_s > 0) {
        vs_fp32 = absl::StrFormat("; %.2fx float32's keys/s with %.0f%% of its bytes per key",
                                  r.net.keys_per_s / f.net.keys_per_s, 100.0 * (8 + 16 * 2) / (8 + 16 * 4));
      }
    }
    absl::StrAppend(&s, absl::StrFormat("- %s %s: network %.1fM keys/s = %.2fx ps-lite (goal >= 24.5M / 26M: %s), "
                                        "network / in-process %.0f%% (goal >= 60%%: %s)%s\n",
                                        WireName(r.wire), r.op, r.net.keys_per_s / 1e6,
                                        r.net.keys_per_s / (r.op == "pull" ? 16.3e6 : 17.3e6),
                                        r.net.keys_per_s >= goal ? "met" : "missed", 100 * r.ratio(),
                                        r.ratio() >= 0.6 ? "met" : "missed", vs_fp32));
  }
  if (!any_goal) absl::StrAppend(&s, "- (this invocation did not measure that configuration)\n");

  if (!memory.empty()) absl::StrAppend(&s, "\n", MemoryMarkdown(memory, memory_dim));
  return s;
}

std::string Json(const Machine& m, int servers, int runs, double min_seconds, const std::vector<Row>& rows,
                 const std::vector<MemoryRow>& memory, int memory_dim, double total_seconds) {
  auto set_figures = [](const Figures& f, bench::PsBenchReport::Figures* out) {
    out->set_keys_per_s(f.keys_per_s);
    out->set_mb_per_s(f.mb_per_s);
    out->set_p50_ms(f.p50_ms);
    out->set_p99_ms(f.p99_ms);
    out->set_calls(f.calls);
  };
  bench::PsBenchReport report;
  *report.mutable_machine() = bench::MachineReportOf(m);
  report.set_servers(servers);
  report.set_runs(runs);
  report.set_min_seconds(min_seconds);
  report.set_total_seconds(total_seconds);
  for (const Row& r : rows) {
    bench::PsBenchReport::Throughput* t = report.add_throughput();
    t->set_keys(r.keys);
    t->set_dim(r.dim);
    t->set_wire(WireName(r.wire));
    t->set_clients(r.clients);
    t->set_op(r.op);
    if (r.net.measured) set_figures(r.net, t->mutable_network());
    if (r.local.measured) set_figures(r.local, t->mutable_in_process());
    t->set_ratio(r.ratio());
  }
  for (const MemoryRow& mr : memory) {
    bench::PsBenchReport::Memory* out = report.add_memory();
    out->set_optimizer(mr.optimizer);
    out->set_dim(memory_dim);
    out->set_rows(mr.rows);
    out->set_memory_bytes(mr.memory_bytes);
    out->set_raw_bytes(mr.raw_bytes);
    out->set_insert_rows_per_s(mr.insert_rows_per_s);
  }
  ToJsonOptions options;
  options.multiline = true;
  return ToJson(report, options) + "\n";
}

// ---------------------------------------------------------------------------------------------------------

// A section comparing one network path (`other` of each row) with plaintext unreplicated, per row, from the same
// run: `title`, then `text` describing the other path, then the table with `column` naming it.
std::string CompareSection(const std::vector<Row>& rows, Figures Row::*other, const std::string& title,
                           const std::string& text, const std::string& column) {
  std::vector<double> ratios;
  std::string table;
  for (const Row& r : rows) {
    const Figures& f = r.*other;
    if (!r.net.measured || !f.measured || r.net.keys_per_s <= 0) continue;
    const double ratio = f.keys_per_s / r.net.keys_per_s;
    ratios.push_back(ratio);
    absl::StrAppend(&table, absl::StrFormat("| %d | %d | %d | %s | %.2f | %.2f | %.2f |\n", r.keys, r.dim, r.clients,
                                            r.op, r.net.keys_per_s / 1e6, f.keys_per_s / 1e6, ratio));
  }
  if (ratios.empty()) return "";
  std::sort(ratios.begin(), ratios.end());
  return absl::StrCat("\n## ", title, " (same run)\n\n", text, " ", column, " / plaintext: median ",
                      absl::StrFormat("%.2f", ratios[ratios.size() / 2]), ", lowest ",
                      absl::StrFormat("%.2f", ratios.front()), ".\n\n| keys | dim | clients | op | plaintext M keys/s | ",
                      column, " M keys/s | ", column, " / plaintext |\n|---:|---:|---:|---|---:|---:|---:|\n", table);
}

// The mTLS section of the report (--tls).
std::string TlsSection(const std::vector<Row>& rows) {
  return CompareSection(
      rows, &Row::tls, "Mutual TLS against plaintext",
      "The network path again, against a second set of kestrel_server processes started with --tls_ca, --tls_cert "
      "and --tls_key (certificates of a throwaway CA), the clients presenting a worker's certificate; its runs "
      "interleave with the plaintext ones; medians over runs.",
      "mTLS");
}

// The replication section (--replicas).
std::string ReplicasSection(const std::vector<Row>& rows, int replicas) {
  return CompareSection(
      rows, &Row::replicated, absl::StrCat(replicas, " copies of every range against one"),
      absl::StrCat("The network path again, against a set of kestrel_server processes started with --replicas=",
                   replicas,
                   " under a kestrel_scheduler: pulls are served by each range's primary, and a push is acknowledged "
                   "only once the primary and its backup have applied it (forwarded once checked, applied on both at once; docs/replication.md); its "
                   "runs interleave with the unreplicated ones; medians over runs."),
      absl::StrCat("R=", replicas));
}

absl::Status StopServers(std::vector<ServerProcess>* servers) {
  absl::Status first;
  for (size_t i = 0; i < servers->size(); ++i) {
    absl::StatusOr<int> code = (*servers)[i].Stop(SIGTERM);
    absl::Status s =
        code.ok() ? (*code == 0 ? absl::OkStatus() : absl::InternalError(absl::StrCat("exited with code ", *code)))
                  : code.status();
    if (!s.ok() && first.ok()) {
      first =
          absl::Status(s.code(), absl::StrCat("server ", i, " (log ", (*servers)[i].log_path(), "): ", s.message()));
    }
  }
  return first;
}

// Checks the servers' counters against what this process sent: nothing rejected, nothing lost.
absl::Status CheckServerCounters(PsClient& client, uint64_t keys_pulled, uint64_t keys_pushed) {
  KESTREL_ASSIGN_OR_RETURN(std::vector<StatsResponse> stats, client.Stats());
  uint64_t pulled = 0, pushed = 0, rejected = 0;
  for (const StatsResponse& s : stats) {
    pulled += s.keys_pulled();
    pushed += s.keys_pushed();
    rejected += s.rejected_requests();
  }
  if (rejected != 0 || pulled != keys_pulled || pushed != keys_pushed) {
    return absl::DataLossError(absl::StrFormat(
        "server counters disagree with the client: %d rejected requests, keys pulled %d (sent %d), keys pushed "
        "%d (sent %d)",
        rejected, pulled, keys_pulled, pushed, keys_pushed));
  }
  std::printf("server counters agree: %llu keys pulled, %llu keys pushed, 0 rejected\n",
              static_cast<unsigned long long>(pulled), static_cast<unsigned long long>(pushed));
  return absl::OkStatus();
}

absl::Status RunBench(int argc, char** argv) {
  const Clock::time_point bench_start = Clock::now();
  const std::string load_start = bench::LoadAverage();
  const int num_servers = absl::GetFlag(FLAGS_servers);
  const int runs = absl::GetFlag(FLAGS_runs);
  const double min_seconds = absl::GetFlag(FLAGS_min_seconds);
  if (num_servers < 1) return absl::InvalidArgumentError("--servers must be >= 1");
  if (runs < 1) return absl::InvalidArgumentError("--runs must be >= 1");
  if (!(min_seconds > 0)) return absl::InvalidArgumentError("--min_seconds must be > 0");
  KESTREL_ASSIGN_OR_RETURN(std::vector<int64_t> key_counts, ParseList("keys", absl::GetFlag(FLAGS_keys)));
  KESTREL_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ParseList("dims", absl::GetFlag(FLAGS_dims)));
  KESTREL_ASSIGN_OR_RETURN(std::vector<ValueType> wires, ParseWireTypes(absl::GetFlag(FLAGS_wire_types)));
  KESTREL_ASSIGN_OR_RETURN(std::vector<int64_t> client_counts, ParseList("clients", absl::GetFlag(FLAGS_clients)));
  const std::vector<std::string> op_names = absl::StrSplit(absl::GetFlag(FLAGS_ops), ',', absl::SkipWhitespace());
  for (const std::string& op : op_names) {
    if (op != "pull" && op != "push") return absl::InvalidArgumentError(absl::StrCat("--ops: unknown op '", op, "'"));
  }
  KESTREL_ASSIGN_OR_RETURN(std::string server_binary, bench::FindBinary(absl::GetFlag(FLAGS_server_binary),
                                                                       "server/kestrel_server", argv[0],
                                                                       "server_binary"));
  const Machine machine =
      bench::DescribeMachine(argc, argv, absl::GetFlag(FLAGS_git_commit), absl::GetFlag(FLAGS_invocation));
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  if (absl::GetFlag(FLAGS_memory_only)) {
    const int dim = absl::GetFlag(FLAGS_memory_dim);
    KESTREL_ASSIGN_OR_RETURN(std::vector<MemoryRow> memory, MeasureMemory(absl::GetFlag(FLAGS_memory_rows), dim, rng));
    if (memory.empty()) return absl::InvalidArgumentError("--memory_only needs --memory_rows > 0");
    std::printf("%s", MemoryMarkdown(memory, dim).c_str());
    return absl::OkStatus();
  }

  std::printf("ps_bench: %d server(s), keys {%s}, dims {%s}, clients {%s}, %d runs x >= %.2f s\n", num_servers,
              absl::GetFlag(FLAGS_keys).c_str(), absl::GetFlag(FLAGS_dims).c_str(),
              absl::GetFlag(FLAGS_clients).c_str(), runs, min_seconds);
  std::printf("machine: %d cpus, %s, %s, %s, commit %s\n", machine.nproc, machine.cpu.c_str(), machine.memory.c_str(),
              machine.kernel.c_str(), machine.commit.c_str());

  // Servers.
  char dir_template[] = "/tmp/ps_bench.XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::string work_dir = dir_template;
  std::vector<ServerProcess> servers;
  // Starts num_servers servers named <name><i>, server i with extra_args(i) too; returns their addresses.
  using Args = absl::StatusOr<std::vector<std::string>>;
  auto start_servers = [&](const std::string& name, const std::function<Args(int)>& extra_args) -> Args {
    std::vector<std::string> started;
    for (int i = 0; i < num_servers; ++i) {
      std::vector<std::string> args = {absl::StrCat("--rank=", i), absl::StrCat("--num_servers=", num_servers),
                                       absl::StrCat("--job_id=", kJob)};
      if (absl::GetFlag(FLAGS_server_threads) > 0)
        args.push_back(absl::StrCat("--threads=", absl::GetFlag(FLAGS_server_threads)));
      KESTREL_ASSIGN_OR_RETURN(std::vector<std::string> extra, extra_args(i));
      args.insert(args.end(), extra.begin(), extra.end());
      KESTREL_ASSIGN_OR_RETURN(ServerProcess p,
                               ServerProcess::Start(server_binary, args, work_dir, absl::StrCat(name, i)));
      started.push_back(p.address());
      servers.push_back(std::move(p));
    }
    return started;
  };
  KESTREL_ASSIGN_OR_RETURN(const std::vector<std::string> addresses,
                           start_servers("server", [](int) -> Args { return std::vector<std::string>(); }));
  std::printf("servers: %s (logs in %s)\n", absl::StrJoin(addresses, " ").c_str(), work_dir.c_str());
  // The same servers over mutual TLS: certificates of a throwaway CA (the openssl command), one per server and
  // one worker's for the clients.
  std::vector<std::string> tls_addresses;
  std::shared_ptr<grpc::ChannelCredentials> tls_credentials;
  if (absl::GetFlag(FLAGS_tls)) {
    KESTREL_ASSIGN_OR_RETURN(TestingCa ca, TestingCa::Create(work_dir + "/certs", "ps-bench-ca"));
    KESTREL_ASSIGN_OR_RETURN(tls_addresses, start_servers("tls_server", [&](int i) -> Args {
                               KESTREL_ASSIGN_OR_RETURN(TlsConfig tls, ca.Issue(kJob, "server", i));
                               return TestingCa::Flags(tls);
                             }));
    KESTREL_ASSIGN_OR_RETURN(TlsConfig worker, ca.Issue(kJob, "worker", 0));
    KESTREL_ASSIGN_OR_RETURN(tls_credentials, MakeChannelCredentials(worker));
    std::printf("mTLS servers: %s\n", absl::StrJoin(tls_addresses, " ").c_str());
  }

  // The replicated set: a scheduler (it tells the servers where their backups are) and servers with --replicas.
  const int replicas = absl::GetFlag(FLAGS_replicas);
  std::vector<std::string> replicated_addresses;
  if (replicas > 1) {
    if (replicas > num_servers) return absl::InvalidArgumentError("--replicas needs --servers >= --replicas");
    KESTREL_ASSIGN_OR_RETURN(std::string scheduler_binary,
                             bench::FindBinary(absl::GetFlag(FLAGS_scheduler_binary), "scheduler/kestrel_scheduler",
                                               argv[0], "scheduler_binary"));
    KESTREL_ASSIGN_OR_RETURN(
        ServerProcess scheduler,
        ServerProcess::Start(scheduler_binary,
                             {absl::StrCat("--job_id=", kJob), absl::StrCat("--num_servers=", num_servers),
                              "--num_workers=1", "--consistency=asp", absl::StrCat("--replicas=", replicas),
                              "--heartbeat_interval=500ms"},
                             work_dir, "scheduler"));
    const std::string scheduler_address = scheduler.address();
    servers.push_back(std::move(scheduler));  // stopped with the servers
    KESTREL_ASSIGN_OR_RETURN(replicated_addresses, start_servers("replicated_server", [&](int) -> Args {
                               return std::vector<std::string>{absl::StrCat("--replicas=", replicas),
                                                               "--scheduler=" + scheduler_address};
                             }));
    std::printf("servers with %d replicas: %s\n", replicas, absl::StrJoin(replicated_addresses, " ").c_str());
  }

  std::vector<Row> rows;
  std::vector<MemoryRow> memory;
  absl::Status status = [&]() -> absl::Status {
    KESTREL_ASSIGN_OR_RETURN(Partition partition, Partition::Uniform(num_servers));
    const int max_clients = static_cast<int>(*std::max_element(client_counts.begin(), client_counts.end()));
    std::vector<std::unique_ptr<PsClient>> clients;
    PsClientOptions options;
    options.job_id = kJob;
    if (absl::GetFlag(FLAGS_max_request_bytes) > 0) {
      options.max_request_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_max_request_bytes));
    }
    if (absl::GetFlag(FLAGS_channels_per_server) > 0) {
      options.channels_per_server = absl::GetFlag(FLAGS_channels_per_server);
    }
    for (int c = 0; c < max_clients; ++c) {
      KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client, NewGrpcPsClient(options, partition, addresses));
      clients.push_back(std::move(client));
    }
    std::unique_ptr<PsClient> stats_client;
    { KESTREL_ASSIGN_OR_RETURN(stats_client, NewGrpcPsClient(options, partition, addresses)); }
    ShardOptions shard_options;
    shard_options.job_id = kJob;
    KESTREL_ASSIGN_OR_RETURN(Partition local_partition, Partition::Uniform(1));
    KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<Shard> shard, Shard::Create(shard_options, local_partition));

    Bench bench(std::move(clients), shard.get(), client_counts, op_names);
    std::mt19937_64 tls_rng = rng;  // the mTLS bench gets the same keys and gradients
    for (int64_t k : key_counts) {
      for (int64_t d : dims) {
        for (ValueType w : wires) KESTREL_RETURN_IF_ERROR(bench.AddConfig(k, static_cast<int>(d), w, rng));
      }
    }
    // The mTLS clients (as worker 0, whose certificate they present); network only, so no in-process shard.
    std::unique_ptr<Bench> tls_bench;
    if (!tls_addresses.empty()) {
      PsClientOptions tls_options = options;
      tls_options.worker_rank = 0;
      std::vector<std::unique_ptr<PsClient>> tls_clients;
      for (int c = 0; c < max_clients; ++c) {
        KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client,
                                 NewGrpcPsClient(tls_options, partition, tls_addresses, tls_credentials));
        tls_clients.push_back(std::move(client));
      }
      tls_bench = std::make_unique<Bench>(std::move(tls_clients), /*shard=*/nullptr, client_counts, op_names);
      tls_bench->set_in_process(false);
      for (int64_t k : key_counts) {
        for (int64_t d : dims) {
          KESTREL_RETURN_IF_ERROR(tls_bench->AddConfig(k, static_cast<int>(d), VALUE_TYPE_FLOAT32, tls_rng));
        }
      }
    }
    // The replicated clients route by the scheduler's routing (every server in service throughout).
    std::unique_ptr<Bench> replicated_bench;
    if (!replicated_addresses.empty()) {
      KESTREL_ASSIGN_OR_RETURN(Partition replicated, partition.WithReplicas(replicas));
      PsClientOptions replicated_options = options;
      replicated_options.routing = std::make_shared<RoutingTable>(replicated);
      std::vector<std::unique_ptr<PsClient>> replicated_clients;
      for (int c = 0; c < max_clients; ++c) {
        KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client,
                                 NewGrpcPsClient(replicated_options, replicated, replicated_addresses));
        replicated_clients.push_back(std::move(client));
      }
      replicated_bench =
          std::make_unique<Bench>(std::move(replicated_clients), /*shard=*/nullptr, client_counts, op_names);
      replicated_bench->set_in_process(false);
      std::mt19937_64 replicated_rng(absl::GetFlag(FLAGS_seed));
      for (int64_t k : key_counts) {
        for (int64_t d : dims) {
          KESTREL_RETURN_IF_ERROR(
              replicated_bench->AddConfig(k, static_cast<int>(d), VALUE_TYPE_FLOAT32, replicated_rng));
        }
      }
    }
    for (int r = 0; r < runs; ++r) {
      const Clock::time_point run_start = Clock::now();
      KESTREL_RETURN_IF_ERROR(bench.Run(r, min_seconds));
      if (tls_bench != nullptr) KESTREL_RETURN_IF_ERROR(WithContext(tls_bench->Run(r, min_seconds), "mTLS"));
      if (replicated_bench != nullptr) {
        KESTREL_RETURN_IF_ERROR(WithContext(replicated_bench->Run(r, min_seconds), "replicated"));
      }
      std::printf("run %d of %d done in %.0f s\n", r + 1, runs,
                  std::chrono::duration<double>(Clock::now() - run_start).count());
      std::fflush(stdout);
    }
    rows = bench.Rows();
    // The other paths' figures go into the matching rows of the plain one.
    auto merge = [&rows](const Bench* other, Figures Row::*field) {
      if (other == nullptr) return;
      for (const Row& t : other->Rows()) {
        for (Row& row : rows) {
          if (t.keys == row.keys && t.dim == row.dim && t.clients == row.clients && t.op == row.op &&
              t.wire == row.wire) {
            row.*field = t.net;
          }
        }
      }
    };
    merge(tls_bench.get(), &Row::tls);
    merge(replicated_bench.get(), &Row::replicated);
    std::printf("medians over %d runs:\n", runs);
    for (const Row& r : rows) PrintRow(r);
    KESTREL_RETURN_IF_ERROR(CheckServerCounters(*stats_client, bench.net_keys_pulled(), bench.net_keys_pushed()));
    shard.reset();  // free the throughput tables before the memory section
    std::printf("memory per row: %lld rows x dim %d, SGD / Adagrad / row-wise Adagrad / Adam\n",
                static_cast<long long>(absl::GetFlag(FLAGS_memory_rows)), absl::GetFlag(FLAGS_memory_dim));
    std::fflush(stdout);
    KESTREL_ASSIGN_OR_RETURN(memory,
                             MeasureMemory(absl::GetFlag(FLAGS_memory_rows), absl::GetFlag(FLAGS_memory_dim), rng));
    return absl::OkStatus();
  }();
  const absl::Status stopped = StopServers(&servers);
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat(status.message(), " (server logs in ", work_dir, ")"));
  }
  KESTREL_RETURN_IF_ERROR(WithContext(stopped, "stopping servers with SIGTERM"));
  std::error_code ignored;
  std::filesystem::remove_all(work_dir, ignored);  // the servers' logs and port files; kept on failure

  const double total_seconds = std::chrono::duration<double>(Clock::now() - bench_start).count();
  std::string md = Markdown(machine, load_start, num_servers, runs, min_seconds, server_binary, rows, memory,
                                  absl::GetFlag(FLAGS_memory_dim), total_seconds);
  md += TlsSection(rows);
  md += ReplicasSection(rows, absl::GetFlag(FLAGS_replicas));
  KESTREL_RETURN_IF_ERROR(bench::PublishReport(md, absl::GetFlag(FLAGS_output)));
  const std::string json = UserPath(absl::GetFlag(FLAGS_json));
  if (!json.empty()) {
    KESTREL_RETURN_IF_ERROR(WriteFile(json, Json(machine, num_servers, runs, min_seconds, rows, memory,
                                                 absl::GetFlag(FLAGS_memory_dim), total_seconds)));
    std::printf("wrote %s\n", json.c_str());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  kestrel::TuneMallocForLargeBuffers();
  absl::SetProgramUsageMessage(
      "Kestrel ps_bench: sparse Pull/Push throughput over gRPC vs. in-process, and memory per row.\n"
      "Usually run through bench/run_ps_bench.sh.");
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = kestrel::RunBench(argc, argv);
  if (!status.ok()) {
    std::fflush(stdout);
    std::fprintf(stderr, "ps_bench FAILED: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
