// kestrel_datagen: writes train/test files from a planted ground truth, plus the test split's Bayes-optimal
// logloss and AUC (truth.txt): Criteo-format data (worker/data/datagen.h), or with --format=schema delimited
// data with a header, user histories and the job config that trains on it (worker/data/schema_datagen.h).
//
//   kestrel_datagen --out_dir=/tmp/data --train_rows=200000 --test_rows=50000 --seed=1
//   kestrel_datagen --out_dir=/tmp/large_vocab --large_vocab   # a large, growing vocabulary
//   kestrel_datagen --format=schema --out_dir=/tmp/history --train_rows=500000 [--csv] [--model=fm]
//   kestrel_worker --config=/tmp/history/job.pbtxt --local     # trains on it
#include <sys/stat.h>

#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/time/clock.h"
#include "common/command_line.h"
#include "common/logging.h"
#include "proto/job.pb.h"
#include "worker/data/datagen.h"
#include "worker/data/schema_datagen.h"

ABSL_FLAG(std::string, format, "criteo",
          "criteo: Criteo-format data (label, 13 integers, 26 hex categories); schema: delimited data with a header "
          "of named columns (user, target item and category, |-separated histories of items and categories, "
          "device, price, hour) and the job config for it, job.pbtxt (default criteo).");
ABSL_FLAG(std::string, out_dir, "data",
          "Directory to write train.tsv, test.tsv and truth.txt into (created); --format=schema adds job.pbtxt.");
ABSL_FLAG(int64_t, train_rows, 200000, "Training rows (default 200000).");
ABSL_FLAG(int64_t, test_rows, 50000, "Test rows, >= 1 (default 50000).");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the planted model and of every draw (default 1).");
ABSL_FLAG(bool, csv, false, "--format=schema: write train.csv / test.csv instead of .tsv (default false).");
ABSL_FLAG(bool, weight_column, false,
          "--format=schema: add an example-weight column (0.5, 1 or 2, independent of everything else) "
          "(default false).");
ABSL_FLAG(int64_t, users, 50000, "--format=schema: users, >= 1 (default 50000).");
ABSL_FLAG(int64_t, items, 100000, "--format=schema: items, >= --categories (default 100000).");
ABSL_FLAG(int64_t, categories, 100, "--format=schema: item categories, >= 1 (default 100).");
ABSL_FLAG(int, max_history, 50, "--format=schema: longest history, 1 to 4096 (default 50).");
ABSL_FLAG(double, history_weight, 2.5,
          "--format=schema: the most the target's category occurring in the history adds to the click logit "
          "(default 2.5).");
ABSL_FLAG(std::string, model, "deepfm",
          "--format=schema: the model of job.pbtxt: lr, fm, deepfm, wide_and_deep or dlrm (default deepfm).");
ABSL_FLAG(int, min_vocab, 8, "Smallest vocabulary of a categorical field, >= 1 (default 8).");
ABSL_FLAG(int, max_vocab, 50000, "Largest vocabulary of a categorical field, >= min_vocab (default 50000).");
ABSL_FLAG(double, zipf_exponent, 1.1,
          "Exponent of the Zipf law of value popularity, >= 0; smaller is flatter (default 1.1).");
ABSL_FLAG(double, interaction_stddev, 0.5,
          "Standard deviation of each planted pairwise interaction's logit term (default 0.5).");
ABSL_FLAG(double, new_id_rate, 0,
          "Probability in [0, 1) that a non-missing categorical value is a brand-new id seen in that row only, "
          "with no planted weight (default 0).");
ABSL_FLAG(double, vocab_drift, 0,
          "Ids (>= 0) by which each field's popularity ranks shift per training row: new popular ids keep "
          "arriving and old ones fade; the test split uses the shift after the last training row (default 0: a "
          "fixed vocabulary).");
ABSL_FLAG(bool, small, false,
          "The small, nearly linear set of the tests (SmallDatagenOptions: 80k + 10k rows, vocabularies up to "
          "100, interactions 0.1); overrides every data flag but --seed (default false).");
ABSL_FLAG(bool, large_vocab, false,
          "A large, growing vocabulary for bounded embedding tables (LargeVocabDatagenOptions): 1M + 100k rows, "
          "--max_vocab=200000 --zipf_exponent=1.05 --new_id_rate=0.05 --vocab_drift=0.05 "
          "--interaction_stddev=0.3, other options at their defaults; overrides every data flag but --seed "
          "(default false).");

namespace kestrel {
namespace {

int GenerateSchema(const std::string& dir) {
  SchemaDatagenOptions options;
  options.seed = absl::GetFlag(FLAGS_seed);
  options.train_rows = absl::GetFlag(FLAGS_train_rows);
  options.test_rows = absl::GetFlag(FLAGS_test_rows);
  options.zipf_exponent = absl::GetFlag(FLAGS_zipf_exponent);
  options.csv = absl::GetFlag(FLAGS_csv);
  options.weight_column = absl::GetFlag(FLAGS_weight_column);
  options.users = absl::GetFlag(FLAGS_users);
  options.items = absl::GetFlag(FLAGS_items);
  options.categories = absl::GetFlag(FLAGS_categories);
  options.max_history = absl::GetFlag(FLAGS_max_history);
  options.history_weight = absl::GetFlag(FLAGS_history_weight);
  const std::string model = absl::GetFlag(FLAGS_model);
  ModelConfig::Type type;
  if (model == "lr") {
    type = ModelConfig::LOGISTIC_REGRESSION;
  } else if (!ModelConfig::Type_Parse(absl::AsciiStrToUpper(model), &type)) {
    KLOG(Error) << "--model=" << model << ": expected lr, fm, deepfm, wide_and_deep or dlrm";
    return 2;
  }
  const absl::Time start = absl::Now();
  auto truth = GenerateSchemaData(options, type, dir);
  if (!truth.ok()) {
    KLOG(Error) << truth.status();
    return truth.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const int64_t rows = options.train_rows + options.test_rows;
  KLOG(Info) << "wrote " << options.train_rows << " + " << options.test_rows << " rows to " << dir << " in "
             << seconds << " s (" << static_cast<int64_t>(rows / seconds) << " rows/s); test positive rate "
             << truth->bayes.positive_rate << ", Bayes-optimal logloss " << truth->bayes.bayes_logloss << ", AUC "
             << truth->bayes.bayes_auc << "; click rate " << truth->signal.click_rate_in_history
             << " with the target's category in the history (" << truth->signal.in_history_fraction
             << " of the rows), " << truth->signal.click_rate_not_in_history << " without; train with "
             << "kestrel_worker --config=" << dir << "/job.pbtxt --local";
  return 0;
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  kestrel::ParseCommandLine(argc, argv,
                            "Kestrel data generator: Criteo-format data from a planted logistic model, or "
                            "(--format=schema) delimited data with user histories and its job config.");
  kestrel::SetLogIdentity("datagen");
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "criteo" && format != "schema") {
    KLOG(Error) << "--format=" << format << ": expected criteo or schema";
    return 2;
  }
  if (format == "schema" && (absl::GetFlag(FLAGS_small) || absl::GetFlag(FLAGS_large_vocab))) {
    KLOG(Error) << "--small and --large_vocab are Criteo-format presets: not with --format=schema";
    return 2;
  }
  const std::string dir = absl::GetFlag(FLAGS_out_dir);
  mkdir(dir.c_str(), 0755);
  if (format == "schema") return kestrel::GenerateSchema(dir);
  if (absl::GetFlag(FLAGS_small) && absl::GetFlag(FLAGS_large_vocab)) {
    KLOG(Error) << "--small and --large_vocab are two different presets: give at most one";
    return 2;
  }
  kestrel::DatagenOptions options;
  options.train_rows = absl::GetFlag(FLAGS_train_rows);
  options.test_rows = absl::GetFlag(FLAGS_test_rows);
  options.min_vocab = absl::GetFlag(FLAGS_min_vocab);
  options.max_vocab = absl::GetFlag(FLAGS_max_vocab);
  options.zipf_exponent = absl::GetFlag(FLAGS_zipf_exponent);
  options.interaction_stddev = absl::GetFlag(FLAGS_interaction_stddev);
  options.new_id_rate = absl::GetFlag(FLAGS_new_id_rate);
  options.vocab_drift = absl::GetFlag(FLAGS_vocab_drift);
  if (absl::GetFlag(FLAGS_small)) options = kestrel::SmallDatagenOptions();
  if (absl::GetFlag(FLAGS_large_vocab)) options = kestrel::LargeVocabDatagenOptions();
  options.seed = absl::GetFlag(FLAGS_seed);
  auto truth = kestrel::GenerateCriteoData(options, dir);
  if (!truth.ok()) {
    KLOG(Error) << truth.status();
    return truth.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  KLOG(Info) << "wrote " << options.train_rows << " + " << options.test_rows << " rows to " << dir
             << "; test positive rate " << truth->positive_rate << ", Bayes-optimal logloss "
             << truth->bayes_logloss << ", AUC " << truth->bayes_auc;
  return 0;
}
