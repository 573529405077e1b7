// Schema guessing: a job config (proto/job.proto, DELIMITED data with a proto/schema.proto schema) written from
// the header line and the first rows of a user's CSV or TSV file, as a starting point the user checks
// (`kestrel init`, worker/data/schema_guess_main.cc).
//
// The rules, applied to each column but the label and the weight over the sampled rows (empty values and the
// missing tokens "NA", "N/A", "NaN", "nan", "null", "NULL", "None" and "?" left out):
//   - no value, or a single distinct one: left out (it carries nothing).
//   - a name like an id ("id", "user_id", "userId", "item-id", "uuid"): CATEGORICAL, HASH encoding, whatever
//     its values; ids are keys, never magnitudes, and their cardinality is usually huge.
//   - every value a number:
//       integers with at most `max_integer_vocabulary` distinct values, which are at most 100 or repeat in 10
//         rows each on average: CATEGORICAL (codes, counts of a few levels, hours, ratings);
//       otherwise NUMERIC, with LOG1P when every value is >= 0 and the sample's skewness is above 1 (a long
//         right tail: counts, prices, durations), else STANDARDIZE (stddev left 0: computed from the training
//         files before training). A missing token seen among numbers joins the schema's missing_tokens.
//       Models without an MLP (LOGISTIC_REGRESSION, FM) take no dense inputs: there the column is BUCKETIZED
//         instead, by the sample's quantiles (up to 16 buckets).
//   - any other value: CATEGORICAL, HASH encoding. Multi-valued, pooled by POOLING_MEAN (POOLING_SQRT_N for the
//     words of a text, separated by " "), when one of the
//     separators "|", ";" and " " (not the delimiter; for " ", not counting spaces at either end) occurs in at
//     least 10% of its values; the most frequent one is the separator. Not " " when the values repeat in 10 rows
//     each on average: they are labels with spaces ("no checking").
//   - a multi-valued column and a single-valued categorical one with 20 or more distinct values, each of whose
//     values (counted with repeats) occur at least half in the other's: one vocabulary, named after the
//     single-valued feature, so a history of item ids and the target item id share keys and embedding rows; and
//     a match feature "<history>_has_<target>" (FeatureConfig.match): how often the target occurs in the history.
// Every categorical feature uses HASH encoding: it accepts any token, so a value the sample did not show
// cannot fail the job. No BUCKETIZED copy of a NUMERIC column is added (the MLP sees the number itself).
//
// The training frame (docs/tuning.md has the measurements): embedding_dim 16, hidden [64, 32] (the MLP models),
// shuffle_buffer 100000 (a file sorted by date or by label still trains on mixed batches); a validation split
// held out of the training files (validation_every 10, or 20 below 100000 rows) with early stopping (the default
// patience 2) over at most 300000 / training rows epochs, rounded, 1 to 30; below 100000 rows batch_size 128,
// the wide FTRL's alpha 0.05 and the dense Adam's 0.003, else batch_size 256 and the model's default optimizers.

#ifndef KESTREL_WORKER_DATA_SCHEMA_GUESS_H_
#define KESTREL_WORKER_DATA_SCHEMA_GUESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace kestrel {

struct SchemaGuessOptions {
  // The training files: the first one's header and first `sample_rows` rows are sampled, the others' headers
  // must equal it. Required.
  std::vector<std::string> train_files;
  // The test files (their headers must equal the training files'). Default: none.
  std::vector<std::string> test_files;
  // The label column. Default: "label".
  std::string label = "label";
  // The example-weight column. Default: none.
  std::string weight;
  // The column separator. Default: 0 = ',' for a first training file ending in ".csv", '\t' for ".tsv" or
  // ".tab", else whichever of the two the header line holds more of (outside quotes).
  char delimiter = 0;
  // The model the config trains. Default: DEEPFM.
  ModelConfig::Type model = ModelConfig::DEEPFM;
  // Rows of the first training file sampled. Default: 10000.
  int64_t sample_rows = 10000;
  // Integer columns with at most this many distinct values in the sample are CATEGORICAL. Default: 1000.
  int64_t max_integer_vocabulary = 1000;
  // The wide weights' FTRL alpha and the embeddings' Adagrad learning rate instead of the guess's choice (`kestrel
  // init --search` tries a few). Default: 0 = the guess's (by the data's size, else the model's defaults).
  float wide_learning_rate = 0;
  float embedding_learning_rate = 0;
  // A time column: the validation split is the last tenth (twentieth below 100000 rows) of the training lines by
  // it (DataConfig.validation_column and validation_from, worker/data/time_split.h) instead of lines drawn by a
  // hash, and the column is no feature. Default: "" = none.
  std::string time_column;
};

struct SchemaGuess {
  JobConfig job;
  // Rows sampled, and how many of them had a positive label (above 0).
  int64_t sampled_rows = 0;
  int64_t positive_rows = 0;
  // Whether the sample holds every row of the first training file.
  bool whole_file = false;
  // The training files' rows: counted when the sample holds every row of a single training file, else estimated
  // from the files' sizes and the sampled rows' mean length.
  int64_t train_rows = 0;
  // One line per column of the header, in order: what it became and why, e.g.
  // "price: NUMERIC LOG1P (2913 distinct numbers >= 0, skewness 4.1)".
  std::vector<std::string> notes;
};

// Guesses a job config from `options.train_files`. InvalidArgument names what is wrong with the input: an
// empty file, a header that is missing (the first line is all numbers), has an unnamed or repeated column, or
// lacks the label (the message lists the columns) or the weight; a row with another column count than the
// header, or broken quoting ("file:line: problem"); a label or weight that is not a number; headers that differ
// between files, a time_column that is not a column (or is the label or the weight). FailedPrecondition: a
// time column without an order to split (worker/data/time_split.h). NotFound: a file that cannot be opened.
[[nodiscard]] absl::StatusOr<SchemaGuess> GuessJobConfig(const SchemaGuessOptions& options);

// The guess as a job config in protobuf text format, after a comment block saying that it was guessed, from
// which rows, and what to check (the notes).
std::string GuessedJobConfigText(const SchemaGuess& guess, const SchemaGuessOptions& options);

}  // namespace kestrel

#endif  // KESTREL_WORKER_DATA_SCHEMA_GUESS_H_
