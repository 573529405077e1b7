#include "worker/data/schema_datagen.h"

#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/counter_random.h"
#include "google/protobuf/text_format.h"

namespace kestrel {
namespace {

// Stream ids of the different draws (so they are independent). Append only: the values key every draw.
enum Stream : uint64_t {
  kRow = 1,          // the row's draws, with one of the sub-streams below
  kUserWeight,
  kItemWeight,
  kCategoryWeight,
  kDeviceWeight,
  kFavorite,         // a user's favourite categories
  kItemPrice,        // an item's price level
  kCategoryPrice,    // a category's price level
  kLabel,
};

// Sub-streams of a row (HashCombine(row base, sub-stream), counter = the draw's index).
enum RowStream : uint64_t {
  kUser = 1,
  kHistoryLength,
  kFromFavorite,     // per history item (and kTargetIndex for the target)
  kFavoriteIndex,    // which favourite
  kCategory,         // a non-favourite category
  kItem,             // the item's rank in its category
  kDevice,
  kMissing,          // counter 0: device, 1: price
  kPrice,
  kHour,
  kWeight,
};

constexpr int kFavorites = 3;
constexpr double kFromFavoriteRate = 0.8;
// The history's index of the target's draws in the per-item sub-streams.
constexpr uint64_t kTargetIndex = 1u << 20;
// The devices and their popularity (cumulative).
struct Device {
  const char* name;
  double cdf;
};
constexpr Device kDevices[] = {{"android", 0.45}, {"ios", 0.75}, {"web", 0.90}, {"tablet", 0.97}, {"tv,console", 1.0}};
constexpr int kNumDevices = sizeof(kDevices) / sizeof(kDevices[0]);

double DeviceTerm(const SchemaDatagenOptions& o, int device) {
  return device < 0 ? 0 : o.value_weight_stddev * CounterNormal(DrawStream(o.seed, kDeviceWeight, 0), device);
}

double HourTerm(const SchemaDatagenOptions& o, int hour) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  return o.hour_weight * std::cos(kTwoPi * (hour - 20) / 24.0);  // evenings click most, mornings least
}

// The history term of k occurrences of the target's category: history_weight (1 - 2^-k).
double HistoryTerm(const SchemaDatagenOptions& o, int k) { return o.history_weight * (1.0 - std::ldexp(1.0, -k)); }

int CountOf(const std::vector<int64_t>& values, int64_t v) {
  int k = 0;
  for (int64_t x : values) k += x == v;
  return k;
}

// Appends `value` to `line`, quoted (a doubled quote inside) when it holds the delimiter or a quote.
void AppendColumn(absl::string_view value, char delimiter, std::string* line) {
  if (value.find(delimiter) == absl::string_view::npos && value.find('"') == absl::string_view::npos) {
    line->append(value.data(), value.size());
    return;
  }
  line->push_back('"');
  for (char c : value) {
    if (c == '"') line->push_back('"');
    line->push_back(c);
  }
  line->push_back('"');
}

[[nodiscard]] absl::Status CheckOptions(const SchemaDatagenOptions& o) {
  auto invalid = [](absl::string_view name, auto value, absl::string_view range) {
    return absl::InvalidArgumentError(absl::StrCat("schema datagen needs ", name, " ", range, ", got ", value));
  };
  if (o.train_rows < 0) return invalid("train_rows", o.train_rows, ">= 0");
  if (o.test_rows < 1) return invalid("test_rows", o.test_rows, ">= 1");
  if (o.users < 1) return invalid("users", o.users, ">= 1");
  if (o.categories < 1) return invalid("categories", o.categories, ">= 1");
  if (o.items < o.categories) return invalid("items", o.items, ">= categories");
  if (o.max_history < 1 || o.max_history > 4096) return invalid("max_history", o.max_history, "in [1, 4096]");
  if (!(std::isfinite(o.zipf_exponent) && o.zipf_exponent >= 0)) return invalid("zipf_exponent", o.zipf_exponent, ">= 0");
  if (!(std::isfinite(o.user_zipf_exponent) && o.user_zipf_exponent >= 0)) {
    return invalid("user_zipf_exponent", o.user_zipf_exponent, ">= 0");
  }
  if (!(o.target_favorite_rate >= 0 && o.target_favorite_rate <= 1)) {
    return invalid("target_favorite_rate", o.target_favorite_rate, "in [0, 1]");
  }
  if (!(o.missing_rate >= 0 && o.missing_rate < 1)) return invalid("missing_rate", o.missing_rate, "in [0, 1)");
  for (double w : {o.bias, o.value_weight_stddev, o.user_weight_stddev, o.hour_weight, o.price_weight,
                   o.history_weight}) {
    if (!std::isfinite(w)) return invalid("finite weights (bias, *_weight, *_stddev)", w, "");
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> SchemaDatagenColumns(const SchemaDatagenOptions& options) {
  std::vector<std::string> columns = {"label"};
  if (options.weight_column) columns.push_back("weight");
  for (const char* c : {"user_id", "item_id", "item_category", "hist_items", "hist_categories", "device", "price",
                        "hour"}) {
    columns.push_back(c);
  }
  return columns;
}

const std::vector<std::string>& SchemaDatagenDevices() {
  static const auto* const devices = [] {
    auto* names = new std::vector<std::string>;
    for (const Device& d : kDevices) names->push_back(d.name);
    return names;
  }();
  return *devices;
}

HistoryModel::HistoryModel(const SchemaDatagenOptions& options)
    : options_(options),
      user_cdf_(ZipfCdf(options.users, options.user_zipf_exponent)),
      category_cdf_(ZipfCdf(options.categories, options.zipf_exponent)),
      item_cdf_(ZipfCdf(options.items / options.categories, options.zipf_exponent)) {}

int64_t HistoryModel::ItemIn(int64_t category, double u) const {
  return ZipfRank(item_cdf_, u) * options_.categories + category;
}

double HistoryModel::Draw(int split, int64_t row, SchemaExample* e) const {
  const SchemaDatagenOptions& o = options_;
  const uint64_t base = DrawStream(o.seed, kRow, static_cast<uint64_t>(split), static_cast<uint64_t>(row));
  auto uniform = [base](RowStream s, uint64_t counter) { return CounterUniform01(HashCombine(base, s), counter); };
  e->user = ZipfRank(user_cdf_, uniform(kUser, 0));
  const uint64_t favorites = DrawStream(o.seed, kFavorite, static_cast<uint64_t>(e->user));
  // The category of history item j (or of the target, j = kTargetIndex) given the chance of a favourite.
  auto category = [&](uint64_t j, double favorite_rate) {
    if (uniform(kFromFavorite, j) < favorite_rate) {
      const int f = static_cast<int>(uniform(kFavoriteIndex, j) * kFavorites);
      return static_cast<int64_t>(CounterUniform01(favorites, f) * o.categories);
    }
    return ZipfRank(category_cdf_, uniform(kCategory, j));
  };
  const double u = uniform(kHistoryLength, 0);
  const int n = std::min(o.max_history, static_cast<int>((o.max_history + 1) * u * u));
  e->hist_items.resize(n);
  e->hist_categories.resize(n);
  for (int j = 0; j < n; ++j) {
    e->hist_categories[j] = category(j, kFromFavoriteRate);
    e->hist_items[j] = ItemIn(e->hist_categories[j], uniform(kItem, j));
  }
  e->category = category(kTargetIndex, o.target_favorite_rate);
  e->item = ItemIn(e->category, uniform(kItem, kTargetIndex));
  e->device = -1;
  if (uniform(kMissing, 0) >= o.missing_rate) {
    const double d = uniform(kDevice, 0);
    e->device = 0;
    while (e->device + 1 < kNumDevices && d >= kDevices[e->device].cdf) ++e->device;
  }
  e->price_cents = -1;
  if (uniform(kMissing, 1) >= o.missing_rate) {
    const double log_price = 3.0 + 0.6 * CounterNormal(DrawStream(o.seed, kCategoryPrice, 0), e->category) +
                             0.5 * CounterNormal(DrawStream(o.seed, kItemPrice, 0), e->item) +
                             0.1 * CounterNormal(HashCombine(base, kPrice), 0);
    e->price_cents = std::max<int64_t>(1, std::llround(std::exp(log_price) * 100));
  }
  e->hour = static_cast<int>(uniform(kHour, 0) * 24);
  e->weight = o.weight_column ? static_cast<float>(std::ldexp(1.0, static_cast<int>(uniform(kWeight, 0) * 3) - 1))
                              : 1.0f;
  const double p = Probability(*e);
  e->label = CounterUniform01(DrawStream(o.seed, kLabel, static_cast<uint64_t>(split)), row) < p ? 1 : 0;
  return p;
}

double HistoryModel::Probability(const SchemaExample& e) const {
  const SchemaDatagenOptions& o = options_;
  double logit = o.bias;
  logit += o.user_weight_stddev * CounterNormal(DrawStream(o.seed, kUserWeight, 0), e.user);
  logit += o.value_weight_stddev * CounterNormal(DrawStream(o.seed, kItemWeight, 0), e.item);
  logit += o.value_weight_stddev * CounterNormal(DrawStream(o.seed, kCategoryWeight, 0), e.category);
  logit += DeviceTerm(o, e.device);
  logit += HourTerm(o, e.hour);
  if (e.price_cents >= 0) logit -= o.price_weight * (std::log1p(e.price_cents / 100.0) - 3.0);
  logit += HistoryTerm(o, CountOf(e.hist_categories, e.category));
  return Sigmoid(logit);
}

std::string HistoryModel::FormatLine(const SchemaExample& e, char delimiter) const {
  std::string line = e.label > 0.5f ? "1" : "0";
  auto next = [&] { line.push_back(delimiter); };
  if (options_.weight_column) {
    next();
    absl::StrAppend(&line, e.weight);
  }
  next();
  absl::StrAppend(&line, "u", e.user);
  next();
  absl::StrAppend(&line, e.item);
  next();
  absl::StrAppend(&line, "c", e.category);
  next();
  for (size_t j = 0; j < e.hist_items.size(); ++j) absl::StrAppend(&line, j == 0 ? "" : "|", e.hist_items[j]);
  next();
  for (size_t j = 0; j < e.hist_categories.size(); ++j) {
    absl::StrAppend(&line, j == 0 ? "c" : "|c", e.hist_categories[j]);
  }
  next();
  if (e.device >= 0) AppendColumn(kDevices[e.device].name, delimiter, &line);
  next();
  if (e.price_cents >= 0) absl::StrAppend(&line, e.price_cents / 100, ".", absl::Dec(e.price_cents % 100, absl::kZeroPad2));
  next();
  absl::StrAppend(&line, e.hour);
  return line;
}

std::string SchemaDatagenFile(const SchemaDatagenOptions& options, int split) {
  return absl::StrCat(split == 0 ? "train" : "test", options.csv ? ".csv" : ".tsv");
}

JobConfig SchemaDatagenJobConfig(const SchemaDatagenOptions& options, ModelConfig::Type model_type,
                                 const std::string& train_file, const std::string& test_file) {
  JobConfig job;
  ModelConfig& model = *job.mutable_model();
  model.set_type(model_type);
  model.set_embedding_dim(8);
  model.add_hidden(64);
  model.add_hidden(32);
  DataConfig& data = *job.mutable_data();
  data.set_format(DataConfig::DELIMITED);
  data.add_train_files(train_file);
  data.add_test_files(test_file);
  FeatureSchema& schema = *data.mutable_schema();
  schema.set_delimiter(options.csv ? "," : "\t");
  schema.set_header(true);
  schema.set_label("label");
  if (options.weight_column) schema.set_weight("weight");
  auto feature = [&](const std::string& name) {
    FeatureConfig* f = schema.add_features();
    f->set_name(name);
    return f;
  };
  feature("user_id");
  for (const char* name : {"item_id", "hist_items"}) {
    FeatureConfig* f = feature(name);
    f->set_encoding(FeatureConfig::INTEGER);
    f->set_vocabulary("items");
    f->set_table("items");
  }
  for (const char* name : {"item_category", "hist_categories"}) {
    FeatureConfig* f = feature(name);
    f->set_vocabulary("categories");
    f->set_table("categories");
  }
  for (FeatureConfig& f : *schema.mutable_features()) {
    if (f.name().rfind("hist_", 0) != 0) continue;
    f.set_separator("|");
    f.set_pooling(POOLING_MEAN);
    f.set_max_length(options.max_history);
  }
  feature("device");
  FeatureConfig* price = feature("price");
  price->set_kind(FeatureConfig::NUMERIC);
  price->set_transform(FeatureConfig::LOG1P);
  FeatureConfig* hour = feature("hour");
  hour->set_kind(FeatureConfig::BUCKETIZED);
  for (int h = 3; h < 24; h += 3) hour->add_boundaries(static_cast<float>(h));
  schema.add_tables()->set_name("items");
  schema.add_tables()->set_name("categories");
  TrainConfig& train = *job.mutable_train();
  train.set_batch_size(256);
  train.set_epochs(2);
  train.set_log_every_steps(100);
  return job;
}

absl::StatusOr<SchemaDatagenTruth> GenerateSchemaData(const SchemaDatagenOptions& options,
                                                      ModelConfig::Type model_type, const std::string& out_dir) {
  if (absl::Status status = CheckOptions(options); !status.ok()) return status;
  const HistoryModel model(options);
  const char delimiter = options.csv ? ',' : '\t';
  const std::string header = absl::StrJoin(SchemaDatagenColumns(options), std::string(1, delimiter));
  std::vector<float> probabilities, labels;
  probabilities.reserve(options.test_rows);
  labels.reserve(options.test_rows);
  int64_t in_history = 0;
  double clicks_in = 0, clicks_out = 0;
  std::string paths[2];
  for (int split = 0; split < 2; ++split) {
    paths[split] = absl::StrCat(out_dir, "/", SchemaDatagenFile(options, split));
    std::ofstream out(paths[split]);
    if (!out.good()) return absl::NotFoundError(absl::StrCat("cannot write ", paths[split]));
    out << header << '\n';
    const int64_t rows = split == 0 ? options.train_rows : options.test_rows;
    SchemaExample e;
    for (int64_t row = 0; row < rows; ++row) {
      const double p = model.Draw(split, row, &e);
      out << model.FormatLine(e, delimiter) << '\n';
      if (split == 1) {
        probabilities.push_back(static_cast<float>(p));
        labels.push_back(e.label);
        if (CountOf(e.hist_categories, e.category) > 0) {
          ++in_history;
          clicks_in += e.label;
        } else {
          clicks_out += e.label;
        }
      }
    }
    if (!out.good()) return absl::DataLossError(absl::StrCat("writing ", paths[split], " failed"));
  }
  SchemaDatagenTruth truth;
  truth.bayes = BayesTruth(probabilities, labels);
  const int64_t out_of_history = options.test_rows - in_history;
  truth.signal.in_history_fraction = static_cast<double>(in_history) / options.test_rows;
  truth.signal.click_rate_in_history = in_history > 0 ? clicks_in / in_history : 0;
  truth.signal.click_rate_not_in_history = out_of_history > 0 ? clicks_out / out_of_history : 0;

  const std::string truth_path = out_dir + "/truth.txt";
  std::ofstream out(truth_path);
  out << absl::StrFormat(
      "# Bayes-optimal scores of %s (scoring with the planted click probability), and the click rates of its\n"
      "# rows whose target category occurs in the history and of the others\n"
      "seed: %d\ntrain_rows: %d\ntest_rows: %d\npositive_rate: %.6f\nbayes_logloss: %.6f\nbayes_auc: %.6f\n"
      "in_history_fraction: %.6f\nclick_rate_in_history: %.6f\nclick_rate_not_in_history: %.6f\n",
      SchemaDatagenFile(options, 1), options.seed, options.train_rows, truth.bayes.test_rows,
      truth.bayes.positive_rate, truth.bayes.bayes_logloss, truth.bayes.bayes_auc, truth.signal.in_history_fraction,
      truth.signal.click_rate_in_history, truth.signal.click_rate_not_in_history);
  if (!out.good()) return absl::DataLossError(absl::StrCat("writing ", truth_path, " failed"));

  std::string config;
  if (!google::protobuf::TextFormat::PrintToString(
          SchemaDatagenJobConfig(options, model_type, paths[0], paths[1]), &config)) {
    return absl::InternalError("cannot print the job config");
  }
  const std::string config_path = out_dir + "/job.pbtxt";
  std::ofstream config_out(config_path);
  config_out << "# " << ModelConfig::Type_Name(model_type) << " on the schema data of kestrel_datagen --format=schema "
             << "(seed " << options.seed << "); train with\n#   kestrel_worker --config=" << config_path
             << " --local\n"
             << config;
  if (!config_out.good()) return absl::DataLossError(absl::StrCat("writing ", config_path, " failed"));
  return truth;
}

}  // namespace kestrel
