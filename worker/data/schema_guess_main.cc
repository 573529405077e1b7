// kestrel_schema_guess: prints a job config for a CSV or TSV file with a header line, guessed from its first
// rows (worker/data/schema_guess.h has the rules), for the user to check and train with (`kestrel init`).
//
//   kestrel_schema_guess --train=my_train.csv --test=my_test.csv --label=clicked > job.pbtxt
//
// Exit codes: 0 printed, 1 failed, 2 bad flags or input (the message names the problem: a missing header or
// label column, with the columns found, a malformed row, a file that cannot be opened).
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "common/command_line.h"
#include "common/logging.h"
#include "worker/data/schema_guess.h"

ABSL_FLAG(std::string, train, "", "Comma-separated training files; the first one is sampled (required).");
ABSL_FLAG(std::string, test, "", "Comma-separated test files. Default: none.");
ABSL_FLAG(std::string, label, "label", "The label column. Default: label.");
ABSL_FLAG(std::string, weight, "", "The example-weight column. Default: none.");
ABSL_FLAG(std::string, delimiter, "",
          "The column separator: one character, or \"tab\". Default: ',' for a .csv file, tab for .tsv / .tab, "
          "else the one the header line holds more of.");
ABSL_FLAG(std::string, model, "DEEPFM",
          "The model: LR (LOGISTIC_REGRESSION), FM, DEEPFM, WIDE_AND_DEEP or DLRM, any case. Default: DEEPFM.");
ABSL_FLAG(int64_t, sample_rows, 10000, "Rows of the first training file sampled. Default: 10000.");
ABSL_FLAG(int64_t, max_integer_vocabulary, 1000,
          "Integer columns with at most this many distinct values are categorical. Default: 1000.");
ABSL_FLAG(std::string, time_column, "",
          "A time column (numbers, or ISO dates and times): the validation split is the last tenth of the training "
          "lines by it (the last twentieth below 100000 rows), and it is no feature. Default: none (a hashed "
          "holdout).");
ABSL_FLAG(double, wide_learning_rate, 0,
          "The wide weights' FTRL alpha instead of the guess's. Default: 0 = the guess's (docs/tuning.md).");
ABSL_FLAG(double, embedding_learning_rate, 0,
          "The embeddings' Adagrad learning rate instead of the guess's. Default: 0 = the guess's.");

namespace kestrel {
namespace {

int Run() {
  SetLogIdentity("schema_guess");
  SchemaGuessOptions options;
  options.train_files = absl::StrSplit(absl::GetFlag(FLAGS_train), ',', absl::SkipEmpty());
  options.test_files = absl::StrSplit(absl::GetFlag(FLAGS_test), ',', absl::SkipEmpty());
  options.label = absl::GetFlag(FLAGS_label);
  options.weight = absl::GetFlag(FLAGS_weight);
  options.time_column = absl::GetFlag(FLAGS_time_column);
  options.sample_rows = absl::GetFlag(FLAGS_sample_rows);
  options.max_integer_vocabulary = absl::GetFlag(FLAGS_max_integer_vocabulary);
  options.wide_learning_rate = static_cast<float>(absl::GetFlag(FLAGS_wide_learning_rate));
  options.embedding_learning_rate = static_cast<float>(absl::GetFlag(FLAGS_embedding_learning_rate));
  if (!(options.wide_learning_rate >= 0) || !(options.embedding_learning_rate >= 0) ||
      !std::isfinite(options.wide_learning_rate) || !std::isfinite(options.embedding_learning_rate)) {
    KLOG(Error) << "--wide_learning_rate and --embedding_learning_rate: finite, >= 0 (0: the guess's)";
    return 2;
  }
  if (options.train_files.empty()) {
    KLOG(Error) << "give --train, the training file(s)";
    return 2;
  }
  const std::string delimiter = absl::GetFlag(FLAGS_delimiter);
  if (delimiter == "tab" || delimiter == "\\t") {
    options.delimiter = '\t';
  } else if (delimiter.size() == 1 && delimiter != "\"" && delimiter != "\n") {
    options.delimiter = delimiter[0];
  } else if (!delimiter.empty()) {
    KLOG(Error) << "--delimiter=" << delimiter << ": one character (not '\"'), or \"tab\"";
    return 2;
  }
  std::string model = absl::AsciiStrToUpper(absl::GetFlag(FLAGS_model));
  if (model == "LR") model = "LOGISTIC_REGRESSION";
  if (!ModelConfig::Type_Parse(model, &options.model)) {
    KLOG(Error) << "--model=" << absl::GetFlag(FLAGS_model)
                << ": one of LR (LOGISTIC_REGRESSION), FM, DEEPFM, WIDE_AND_DEEP, DLRM";
    return 2;
  }
  absl::StatusOr<SchemaGuess> guess = GuessJobConfig(options);
  if (!guess.ok()) {
    KLOG(Error) << guess.status().message();
    const absl::StatusCode code = guess.status().code();
    return code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kNotFound ? 2 : 1;
  }
  std::cout << GuessedJobConfigText(*guess, options);
  std::cout.flush();
  if (!std::cout.good()) {
    KLOG(Error) << "cannot write the job config to stdout";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  kestrel::ParseCommandLine(argc, argv,
                            "kestrel_schema_guess --train=FILE[,FILE] [--test=FILE] [--label=COLUMN] > job.pbtxt: a "
                            "job config guessed from a CSV/TSV file's header and first rows.");
  return kestrel::Run();
}
