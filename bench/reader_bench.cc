// reader_bench: data reader throughput per core: the schema reader on a TSV with named columns and a 50-long
// history column, the Criteo preset through the schema parser, and the dedicated Criteo parser.
//
//   bench/run_reader_bench.sh                 # builds with -c opt, runs the defaults, writes bench/results
//   bench/run_reader_bench.sh --rows=50000 --runs=3 --output=/tmp/quick.md
//
// Two files are generated under --dir (seeded, the same every time), then every run (--runs) reads each of them
// to the end, one thread, in batches of --batch examples, in a rotating order:
//   - history TSV, schema reader: BatchReader over a header line and the columns label, user, item, category,
//     history (0 to 50 item ids separated by '|', a MEAN-pooled bag sharing the item vocabulary), price (NUMERIC
//     LOG1P), age (BUCKETIZED by boundaries), hour (BUCKETIZED LOG2_BUCKET), city (HASH);
//   - Criteo TSV, preset: BatchReader with the Criteo preset (13 bucketized integers, 26 hex categories, 13 dense
//     inputs), which runs the schema parser;
//   - Criteo TSV, dedicated: the RecordReader<CriteoExample> of worker/data/criteo_reader.h and AppendCriteo
//     (worker/data/preset_examples.h), the dedicated Criteo path;
// and the same parsers over the lines held in memory (no file reading): LineParser::Append, and ParseCriteoLine +
// AppendCriteo. Every figure is per core: rows and bytes over the process's CPU seconds of the pass (one
// thread); the ratios are taken within each run, then their median.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "common/status.h"
#include "google/protobuf/text_format.h"
#include "worker/data/batch.h"
#include "worker/data/preset_examples.h"
#include "worker/batch_reader.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/schema.h"
#include "worker/data/schema_parser.h"

ABSL_FLAG(int64_t, rows, 200000, "Rows of each generated file.");
ABSL_FLAG(int, runs, 5, "Runs; every figure is the median (min, max) over runs.");
ABSL_FLAG(int64_t, batch, 4096, "Examples per Fill.");
ABSL_FLAG(std::string, dir, "/tmp", "Where the data files are generated (a fresh directory in it, removed after).");
ABSL_FLAG(std::string, output, "bench/results/reader_bench.md", "Markdown report path ('' to skip).");
ABSL_FLAG(std::string, git_commit, "", "Commit being measured (default: git rev-parse --short HEAD, if any).");
ABSL_FLAG(std::string, invocation, "", "The command that reproduces this run (the wrapper script's).");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the generated data.");

namespace kestrel {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kHistory = 50;

using bench::Median;

// A Zipf-like id: small ids are frequent.
int64_t Id(std::mt19937_64& rng, int64_t vocabulary) {
  const double u = std::uniform_real_distribution<double>(0, 1)(rng);
  return static_cast<int64_t>(std::pow(static_cast<double>(vocabulary), u)) - 1;
}

std::string HistoryFile(const std::string& path, int64_t rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::ofstream out(path, std::ios::binary);
  out << "label\tuser\titem\tcategory\thistory\tprice\tage\thour\tcity\n";
  static const char* kCities[] = {"paris", "rome", "berlin", "madrid", "lisbon", "vienna", "oslo", ""};
  std::string line;
  for (int64_t r = 0; r < rows; ++r) {
    line.clear();
    absl::StrAppend(&line, rng() % 4 == 0 ? 1 : 0, "\tu", Id(rng, 1000000), "\ti", Id(rng, 200000), "\tc",
                    Id(rng, 500), "\t");
    const int n = static_cast<int>(rng() % (kHistory + 1));
    for (int h = 0; h < n; ++h) absl::StrAppend(&line, h > 0 ? "|" : "", "i", Id(rng, 200000));
    absl::StrAppend(&line, "\t", absl::StrFormat("%.2f", 0.01 * static_cast<double>(rng() % 100000)), "\t",
                    rng() % 20 == 0 ? "" : absl::StrCat(16 + rng() % 60), "\t", rng() % 24, "\t",
                    kCities[rng() % 8], "\n");
    out << line;
  }
  return path;
}

std::string CriteoFile(const std::string& path, int64_t rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::ofstream out(path, std::ios::binary);
  std::string line;
  for (int64_t r = 0; r < rows; ++r) {
    line.clear();
    absl::StrAppend(&line, rng() % 4 == 0 ? 1 : 0);
    for (int j = 0; j < kCriteoIntegerFields; ++j) {
      absl::StrAppend(&line, "\t", rng() % 10 == 0 ? "" : absl::StrCat(Id(rng, 100000)));
    }
    for (int f = 0; f < kCriteoCategoricalFields; ++f) {
      absl::StrAppend(&line, "\t",
                      rng() % 20 == 0 ? "" : absl::StrFormat("%08x", static_cast<uint32_t>(Id(rng, 1 << 20) * 2654435761u)));
    }
    out << line << "\n";
  }
  return path;
}

std::vector<std::string> Lines(const std::string& path, bool header) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  if (header && !lines.empty()) lines.erase(lines.begin());
  return lines;
}

struct Pass {
  double cpu = 0;
  double wall = 0;
  int64_t rows = 0;
};

// Times `body`, which returns the rows it read.
absl::StatusOr<Pass> Time(const std::function<absl::StatusOr<int64_t>()>& body) {
  const double cpu = bench::ProcessCpuSeconds();
  const Clock::time_point wall = Clock::now();
  absl::StatusOr<int64_t> rows = body();
  if (!rows.ok()) return rows.status();
  return Pass{bench::ProcessCpuSeconds() - cpu, std::chrono::duration<double>(Clock::now() - wall).count(), *rows};
}

absl::StatusOr<int64_t> ReadAll(const std::shared_ptr<const Schema>& schema, const std::string& file, int64_t batch_size,
                                Batch* batch) {
  KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<BatchReader> reader, BatchReader::Open(schema, {file}, ReaderOptions{}));
  int64_t rows = 0;
  while (true) {
    KESTREL_ASSIGN_OR_RETURN(int64_t n, reader->Fill(batch_size, batch));
    rows += n;
    if (n < batch_size) return rows;
  }
}

// Today's dedicated Criteo path: CriteoReader + AppendCriteo.
absl::StatusOr<int64_t> ReadAllDedicated(const std::string& file, int64_t batch_size, int dense_dim, Batch* batch) {
  KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<CriteoReader> reader, OpenCriteoReader({file}));
  CriteoExample example;
  int64_t rows = 0;
  while (true) {
    batch->Reset(kCriteoFields, dense_dim);
    while (batch->size < batch_size) {
      KESTREL_ASSIGN_OR_RETURN(bool more, reader->Next(&example));
      if (!more) break;
      AppendCriteo(example, batch);
    }
    rows += batch->size;
    if (batch->size < batch_size) return rows;
  }
}

absl::StatusOr<int64_t> ParseAll(const std::shared_ptr<const Schema>& schema, const std::vector<std::string>& lines,
                                 int64_t batch_size, Batch* batch) {
  LineParser parser(schema);
  batch->Reset(schema->fields(), schema->dense_dim());
  for (const std::string& line : lines) {
    if (batch->size == batch_size) batch->Reset(schema->fields(), schema->dense_dim());
    KESTREL_RETURN_IF_ERROR(parser.Append(line, batch));
  }
  return static_cast<int64_t>(lines.size());
}

absl::StatusOr<int64_t> ParseAllDedicated(const std::vector<std::string>& lines, int64_t batch_size, int dense_dim,
                                          Batch* batch) {
  CriteoExample example;
  batch->Reset(kCriteoFields, dense_dim);
  for (const std::string& line : lines) {
    if (batch->size == batch_size) batch->Reset(kCriteoFields, dense_dim);
    KESTREL_RETURN_IF_ERROR(ParseCriteoLine(line, &example));
    AppendCriteo(example, batch);
  }
  return static_cast<int64_t>(lines.size());
}

struct Reader {
  std::string name;
  double bytes = 0;  // per pass
  std::function<absl::StatusOr<int64_t>()> body;
  std::vector<Pass> passes;
};

constexpr char kHistorySchema[] = R"pb(
  format: DELIMITED
  schema {
    header: true
    features { name: "user" }
    features { name: "item" }
    features { name: "history" separator: "|" pooling: POOLING_MEAN max_length: 50 vocabulary: "item" }
    features { name: "category" }
    features { name: "price" kind: NUMERIC transform: LOG1P }
    features { name: "age" kind: BUCKETIZED boundaries: [ 18, 25, 35, 50, 65 ] }
    features { name: "hour" kind: BUCKETIZED }
    features { name: "city" }
  }
)pb";

absl::Status RunBench(int argc, char** argv) {
  const Clock::time_point bench_start = Clock::now();
  const std::string load_start = bench::LoadAverage();
  const int64_t rows = absl::GetFlag(FLAGS_rows);
  const int runs = absl::GetFlag(FLAGS_runs);
  const int64_t batch_size = absl::GetFlag(FLAGS_batch);
  if (rows < 1 || runs < 1 || batch_size < 1) return absl::InvalidArgumentError("--rows, --runs, --batch must be >= 1");
  const bench::Machine machine =
      bench::DescribeMachine(argc, argv, absl::GetFlag(FLAGS_git_commit), absl::GetFlag(FLAGS_invocation));
  const std::string dir = absl::StrCat(bench::UserPath(absl::GetFlag(FLAGS_dir)), "/reader_bench.", getpid());
  fs::create_directories(dir);
  const std::string history = HistoryFile(dir + "/history.tsv", rows, absl::GetFlag(FLAGS_seed));
  const std::string criteo = CriteoFile(dir + "/criteo.tsv", rows, absl::GetFlag(FLAGS_seed) + 1);
  const double history_bytes = static_cast<double>(fs::file_size(history));
  const double criteo_bytes = static_cast<double>(fs::file_size(criteo));

  DataConfig history_data;
  if (!google::protobuf::TextFormat::ParseFromString(kHistorySchema, &history_data)) {
    return absl::InternalError("the history schema does not parse");
  }
  history_data.add_train_files(history);
  ModelConfig model;
  model.set_embedding_dim(8);
  KESTREL_ASSIGN_OR_RETURN(std::shared_ptr<const Schema> history_schema, Schema::Resolve(history_data, model));
  DataConfig criteo_data;
  criteo_data.set_format(DataConfig::CRITEO);
  KESTREL_ASSIGN_OR_RETURN(std::shared_ptr<const Schema> criteo_schema, Schema::Resolve(criteo_data, model));
  const std::vector<std::string> history_lines = Lines(history, /*header=*/true);
  const std::vector<std::string> criteo_lines = Lines(criteo, /*header=*/false);

  Batch batch;
  std::vector<Reader> readers = {
      {"history TSV, schema reader (BatchReader)", history_bytes,
       [&] { return ReadAll(history_schema, history, batch_size, &batch); }},
      {"Criteo TSV, preset (BatchReader)", criteo_bytes, [&] { return ReadAll(criteo_schema, criteo, batch_size, &batch); }},
      {"Criteo TSV, dedicated (CriteoReader + AppendCriteo)", criteo_bytes,
       [&] { return ReadAllDedicated(criteo, batch_size, kCriteoIntegerFields, &batch); }},
      {"history lines in memory, LineParser", history_bytes,
       [&] { return ParseAll(history_schema, history_lines, batch_size, &batch); }},
      {"Criteo lines in memory, LineParser (preset)", criteo_bytes,
       [&] { return ParseAll(criteo_schema, criteo_lines, batch_size, &batch); }},
      {"Criteo lines in memory, ParseCriteoLine + AppendCriteo", criteo_bytes,
       [&] { return ParseAllDedicated(criteo_lines, batch_size, kCriteoIntegerFields, &batch); }},
  };
  // Warm-up: the page cache, the allocator, the batch's capacity.
  for (Reader& r : readers) KESTREL_RETURN_IF_ERROR(r.body().status());
  for (int run = 0; run < runs; ++run) {
    for (size_t i = 0; i < readers.size(); ++i) {
      Reader& r = readers[(i + run) % readers.size()];
      KESTREL_ASSIGN_OR_RETURN(Pass pass, Time(r.body));
      if (pass.rows != rows) return absl::InternalError(absl::StrCat(r.name, " read ", pass.rows, " rows, not ", rows));
      r.passes.push_back(pass);
    }
    std::printf("run %d:", run + 1);
    for (const Reader& r : readers) std::printf(" %.3f", r.passes.back().cpu);
    std::printf(" CPU s\n");
    std::fflush(stdout);
  }
  std::error_code error;
  fs::remove_all(dir, error);

  // The report.
  std::string md = "# Kestrel reader_bench: the schema reader vs. the dedicated Criteo parser\n\n";
  absl::StrAppend(&md, "## Machine\n\n", bench::MachineMarkdown(machine, load_start));
  absl::StrAppend(&md, absl::StrFormat("| Bench runtime | %.0f s |\n\n",
                                       std::chrono::duration<double>(Clock::now() - bench_start).count()));
  absl::StrAppend(&md, bench::CommandMarkdown(machine));
  absl::StrAppend(
      &md, "## What is measured\n\n",
      absl::StrFormat("Two generated files of %d rows each (seeded): a history TSV (%.1f MB, %.0f bytes a row) with "
                      "a header and the columns label, user, item, category, history (0 to %d item ids separated "
                      "by '|', MEAN-pooled, sharing the item vocabulary), price (NUMERIC LOG1P), age (BUCKETIZED, 5 "
                      "boundaries), hour (BUCKETIZED LOG2_BUCKET), city (HASH): 8 fields and 1 dense input; and a "
                      "Criteo TSV (%.1f MB, %.0f bytes a row; 10%% of the integers and 5%% of the categories "
                      "missing). ",
                      rows, history_bytes / 1e6, history_bytes / rows, kHistory, criteo_bytes / 1e6,
                      criteo_bytes / rows),
      absl::StrFormat("Each of %d runs reads every file to the end on one thread, in batches of %d examples, "
                      "the readers in a rotating order after one warm-up pass each (the files are in the page "
                      "cache). The in-memory rows parse lines already read into strings, so they time the parser "
                      "alone. Per core = over the process's CPU seconds of the pass (CLOCK_PROCESS_CPUTIME_ID); "
                      "1 MB = 10^6 bytes of the file. Figures are medians (min, max) over runs; ratios are taken "
                      "within each run, then their median.\n\n",
                      runs, batch_size));
  absl::StrAppend(&md, "## Results\n\n| Reader | rows/s per core | MB/s per core | CPU s | wall s | rows/s per core, "
                       "runs |\n|---|---:|---:|---:|---:|---|\n");
  std::vector<std::vector<double>> rates_of(readers.size());
  for (size_t i = 0; i < readers.size(); ++i) {
    const Reader& r = readers[i];
    std::vector<double> rate, mbs, cpu, wall;
    std::vector<std::string> runs_text;
    for (const Pass& p : r.passes) {
      rate.push_back(p.rows / p.cpu);
      mbs.push_back(r.bytes / 1e6 / p.cpu);
      cpu.push_back(p.cpu);
      wall.push_back(p.wall);
      runs_text.push_back(absl::StrFormat("%.0f", p.rows / p.cpu));
    }
    rates_of[i] = rate;
    absl::StrAppend(&md, absl::StrFormat("| %s | %.0f (%.0f, %.0f) | %.1f | %.3f | %.3f | %s |\n", r.name, Median(rate),
                                         *std::min_element(rate.begin(), rate.end()),
                                         *std::max_element(rate.begin(), rate.end()), Median(mbs), Median(cpu),
                                         Median(wall), absl::StrJoin(runs_text, ", ")));
  }
  auto ratio = [&](const std::string& name, int a, int b) {
    std::vector<double> v;
    for (size_t run = 0; run < rates_of[a].size(); ++run) v.push_back(rates_of[a][run] / rates_of[b][run]);
    std::vector<std::string> text;
    for (double x : v) text.push_back(absl::StrFormat("%.3f", x));
    return absl::StrFormat("| %s | %.3f | %.3f | %.3f | %s |\n", name, Median(v), *std::min_element(v.begin(), v.end()),
                           *std::max_element(v.begin(), v.end()), absl::StrJoin(text, ", "));
  };
  absl::StrAppend(&md, "\n| Ratio of rows/s per core | median | min | max | runs |\n|---|---:|---:|---:|---|\n",
                  ratio("Criteo preset / dedicated, reading files", 1, 2),
                  ratio("Criteo preset / dedicated, parsing in memory", 4, 5),
                  ratio("history schema reader / Criteo preset, reading files", 0, 1), "\n");
  return bench::PublishReport(md, absl::GetFlag(FLAGS_output));
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Kestrel reader_bench: the schema reader's throughput per core vs. the dedicated Criteo parser.\n"
      "Usually run through bench/run_reader_bench.sh.");
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = kestrel::RunBench(argc, argv);
  if (!status.ok()) {
    std::fflush(stdout);
    std::fprintf(stderr, "reader_bench FAILED: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
