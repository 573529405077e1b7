// A planted ground truth for data with a feature schema (proto/schema.proto): what `kestrel_datagen
// --format=schema` writes — delimited text with a header of named columns, user histories as multi-valued
// columns, and a click signal that only a model pooling the history can recover — with the job config that
// trains on it.
//
// Columns, in order (SchemaDatagenColumns): label, weight (only with `weight_column`), user_id ("u<id>"),
// item_id (the target item, a decimal id), item_category ("c<id>"), hist_items (up to max_history item ids,
// "|"-separated, oldest first), hist_categories (the categories of hist_items, aligned with them), device (a
// small vocabulary, one value holding a comma so that CSV quotes it), price (log-normal, two decimals) and hour
// (0 to 23). Device and price are missing (an empty column) with missing_rate.
//
// The draws: a user (Zipf(user_zipf_exponent) over `users`) has three favourite categories (uniform draws over
// `categories`). Each of the history's n items (n = floor((max_history + 1) u^2), u uniform: from 0 to
// max_history, a third of it on average) is from a favourite category with probability 0.8, else from a
// Zipf-drawn category; the target item is from a favourite category with probability target_favorite_rate.
// A row's history is drawn afresh from its user's favourites, so it tells more than the user id does. Within
// its category an item is a Zipf draw over items / categories items; item a belongs to category a mod
// categories. An item's price is fixed per item (log-normal around its category's level) up to a small
// per-row noise.
//
// The click probability is
//   sigmoid(bias + w_user(user) + w_item(item) + w_cat(category) + w_device(device) + u_h(hour)
//           - price_weight (log1p(price) - 3) + history_weight (1 - 2^-k))
// where k is the number of times the target's category occurs in hist_categories: the first occurrence
// adds history_weight / 2, each further one half the rest. w are Normal draws per value (value_weight_stddev,
// user_weight_stddev for users), u_h a daily curve of amplitude hour_weight. Only a model that relates the
// target's category to the pooled history (an FM or MLP term over both) can learn the history term; a model
// without the history columns sees only the users' average affinity to categories.
//
// Every draw is keyed by (seed, split, row), so any row can be regenerated alone and the output is
// byte-for-byte reproducible; the files are written as they are drawn (memory: the test split's
// probabilities, 8 bytes per test row). Thread-safe (immutable after construction).
#ifndef KESTREL_WORKER_DATA_SCHEMA_DATAGEN_H_
#define KESTREL_WORKER_DATA_SCHEMA_DATAGEN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "worker/data/datagen_draws.h"

namespace kestrel {

struct SchemaDatagenOptions {
  uint64_t seed = 1;                   // Default: 1.
  int64_t train_rows = 200000;         // Default: 200000.
  int64_t test_rows = 50000;           // Default: 50000.
  // Write comma-separated train.csv / test.csv (quoting values that hold a comma) instead of tab-separated
  // train.tsv / test.tsv. Default: false.
  bool csv = false;
  // Add a "weight" column (0.5, 1 or 2, drawn independently of everything else, so the Bayes-optimal model
  // is unchanged) and name it in the schema. Default: false.
  bool weight_column = false;
  int64_t users = 50000;               // Default: 50000.
  int64_t items = 100000;              // Default: 100000 (at least `categories`).
  int64_t categories = 100;            // Default: 100.
  int max_history = 50;                // Longest history, 1 to 4096. Default: 50.
  double zipf_exponent = 1.1;          // Popularity of categories and items. Default: 1.1.
  double user_zipf_exponent = 0.8;     // Activity of users. Default: 0.8.
  double target_favorite_rate = 0.5;   // In [0, 1]. Default: 0.5.
  double missing_rate = 0.02;          // Of device and price, in [0, 1). Default: 0.02.
  double bias = -2.7;                  // Default: -2.7 (about a quarter of the labels positive).
  double value_weight_stddev = 0.3;    // Items, categories, devices. Default: 0.3.
  double user_weight_stddev = 0.2;     // Default: 0.2.
  double hour_weight = 0.3;            // Default: 0.3.
  double price_weight = 0.3;           // Default: 0.3.
  double history_weight = 2.5;         // Default: 2.5.
};

// One example of the schema data. Ids are 0-based; -1 marks a missing device, price_cents < 0 a missing price.
struct SchemaExample {
  float label = 0;
  float weight = 1;
  int64_t user = 0;
  int64_t item = 0;
  int64_t category = 0;
  std::vector<int64_t> hist_items;       // oldest first
  std::vector<int64_t> hist_categories;  // aligned with hist_items
  int device = -1;
  int64_t price_cents = -1;
  int hour = 0;
};

// The header's column names, in order.
std::vector<std::string> SchemaDatagenColumns(const SchemaDatagenOptions& options);

// The devices' names, by id.
const std::vector<std::string>& SchemaDatagenDevices();

class HistoryModel {
 public:
  // `options` must be valid (GenerateSchemaData checks them).
  explicit HistoryModel(const SchemaDatagenOptions& options);

  // Draws example `row` of `split` (0 = train, 1 = test) into `out` and returns its true click probability.
  double Draw(int split, int64_t row, SchemaExample* out) const;
  // The true click probability of any example (its label and weight play no part).
  double Probability(const SchemaExample& example) const;
  // The example as one line of columns (SchemaDatagenColumns) separated by `delimiter` ('\t' or ','), no
  // newline; a value holding the delimiter is quoted.
  std::string FormatLine(const SchemaExample& example, char delimiter) const;

 private:
  int64_t ItemIn(int64_t category, double u) const;

  SchemaDatagenOptions options_;
  std::vector<double> user_cdf_, category_cdf_, item_cdf_;  // Zipf ranks of users, categories, items in one
};

// The counts behind the planted history signal, over the test split.
struct HistorySignal {
  double in_history_fraction = 0;          // of the rows whose target category occurs in the history
  double click_rate_in_history = 0;        // labels' mean over those rows
  double click_rate_not_in_history = 0;    // and over the others
};

struct SchemaDatagenTruth {
  DatagenTruth bayes;
  HistorySignal signal;
};

// The job config that trains `model_type` on the files: data.format DELIMITED with the schema of the columns —
// item_id and hist_items one vocabulary and table ("items"), item_category and hist_categories another
// ("categories"), the histories pooled MEAN with max_length max_history, user_id and device in the model's
// table, price a LOG1P numeric input, hour BUCKETIZED every 3 hours — and a train section for them.
JobConfig SchemaDatagenJobConfig(const SchemaDatagenOptions& options, ModelConfig::Type model_type,
                                 const std::string& train_file, const std::string& test_file);

// The file names GenerateSchemaData writes for each split ("train.tsv", or "train.csv" with `csv`).
std::string SchemaDatagenFile(const SchemaDatagenOptions& options, int split);

// Writes <out_dir>/train.tsv and test.tsv (.csv with options.csv), truth.txt (the test split's Bayes-optimal
// scores and HistorySignal) and job.pbtxt (SchemaDatagenJobConfig of `model_type`, naming the files as
// <out_dir>/<file>, so it works from the directory out_dir is relative to). InvalidArgument, naming the option,
// for options out of range.
[[nodiscard]] absl::StatusOr<SchemaDatagenTruth> GenerateSchemaData(const SchemaDatagenOptions& options,
                                                      ModelConfig::Type model_type, const std::string& out_dir);

}  // namespace kestrel

#endif  // KESTREL_WORKER_DATA_SCHEMA_DATAGEN_H_
