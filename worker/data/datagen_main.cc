// kestrel_datagen: writes Criteo-format train/test files from a planted ground truth, plus the test split's
// Bayes-optimal logloss and AUC (truth.txt). See worker/data/datagen.h.
//
//   kestrel_datagen --out_dir=/tmp/data --train_rows=200000 --test_rows=50000 --seed=1
#include <sys/stat.h>

#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/logging.h"
#include "worker/data/datagen.h"

ABSL_FLAG(std::string, out_dir, "data", "Directory to write train.tsv, test.tsv and truth.txt into (created).");
ABSL_FLAG(int64_t, train_rows, 200000, "Training rows.");
ABSL_FLAG(int64_t, test_rows, 50000, "Test rows (>= 1).");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the planted model and of every draw.");
ABSL_FLAG(int, max_vocab, 50000, "Largest vocabulary of a categorical field.");
ABSL_FLAG(double, interaction_stddev, 0.5, "Standard deviation of each planted pairwise interaction's logit term.");
ABSL_FLAG(bool, small, false,
          "The small, nearly linear set of the tests (SmallDatagenOptions: 80k + 10k rows, vocabularies up to "
          "100, interactions 0.1); overrides the size flags.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Kestrel data generator: Criteo-format data from a planted logistic model.");
  absl::ParseCommandLine(argc, argv);
  kestrel::SetLogIdentity("datagen");
  kestrel::DatagenOptions options;
  options.train_rows = absl::GetFlag(FLAGS_train_rows);
  options.test_rows = absl::GetFlag(FLAGS_test_rows);
  options.max_vocab = absl::GetFlag(FLAGS_max_vocab);
  options.interaction_stddev = absl::GetFlag(FLAGS_interaction_stddev);
  if (absl::GetFlag(FLAGS_small)) options = kestrel::SmallDatagenOptions();
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
