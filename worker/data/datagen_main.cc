// kestrel_datagen: writes Criteo-format train/test files from a planted ground truth, plus the test split's
// Bayes-optimal logloss and AUC (truth.txt). See worker/data/datagen.h.
//
//   kestrel_datagen --out_dir=/tmp/data --train_rows=200000 --test_rows=50000 --seed=1
//   kestrel_datagen --out_dir=/tmp/large_vocab --large_vocab   # a large, growing vocabulary
#include <sys/stat.h>

#include <string>

#include "absl/flags/flag.h"
#include "common/command_line.h"
#include "common/logging.h"
#include "worker/data/datagen.h"

ABSL_FLAG(std::string, out_dir, "data", "Directory to write train.tsv, test.tsv and truth.txt into (created).");
ABSL_FLAG(int64_t, train_rows, 200000, "Training rows (default 200000).");
ABSL_FLAG(int64_t, test_rows, 50000, "Test rows, >= 1 (default 50000).");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the planted model and of every draw (default 1).");
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

int main(int argc, char** argv) {
  kestrel::ParseCommandLine(argc, argv, "Kestrel data generator: Criteo-format data from a planted logistic model.");
  kestrel::SetLogIdentity("datagen");
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
  const std::string dir = absl::GetFlag(FLAGS_out_dir);
  mkdir(dir.c_str(), 0755);
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
