// Fuzz target: the schema line parser (worker/data/schema_parser.h) against a few schemas: the Criteo preset, a
// quoted CSV with weights, missing tokens, multi-valued and numeric features, a TSV with a multi-character
// separator and overflow FAIL, and the libsvm preset.
//
// Input: a schema byte (its value mod 4 picks one), then lines of arbitrary bytes separated by '\n'. Each line is
// appended to one Batch. Invariants:
//   - a refused line leaves the batch exactly as it was (entries, bags, dense inputs, labels, weights);
//   - an accepted line adds one example of exactly `fields` bags and `dense_dim` dense inputs, a 0/1 label, a
//     finite weight >= 0, finite values, and at most max_length entries in a multi-valued feature's bag;
//   - SplitDelimitedLine never fails on a line the parser accepted.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/fuzz_input.h"
#include "google/protobuf/text_format.h"
#include "worker/data/batch.h"
#include "worker/data/schema.h"
#include "worker/data/schema_parser.h"

namespace kestrel {
namespace {

constexpr const char* kSchemas[] = {
    "format: CRITEO",
    R"pb(format: DELIMITED
         schema {
           delimiter: ","
           columns: [ "label", "w", "user", "history", "price", "age" ]
           weight: "w"
           missing_tokens: [ "NA", "-" ]
           features { name: "user" encoding: INTEGER }
           features { name: "history" separator: "|" pooling: POOLING_MEAN max_length: 4 }
           features { name: "price" kind: NUMERIC transform: STANDARDIZE mean: 3 stddev: 2 missing_value: 1 }
           features { name: "price_bucket" column: "price" kind: BUCKETIZED boundaries: [ -1, 0, 10 ] }
           features { name: "age" kind: BUCKETIZED table: "small" }
           tables { name: "small" }
         })pb",
    R"pb(format: DELIMITED
         schema {
           quote: ""
           columns: [ "y", "a", "b", "n" ]
           label: "y"
           features { name: "a" separator: "::" max_length: 2 overflow: KEEP_FIRST pooling: POOLING_SQRT_N encoding: HEX }
           features { name: "b" separator: "," max_length: 3 overflow: FAIL hash_buckets: 100 }
           features { name: "n" kind: NUMERIC transform: LOG1P }
         })pb",
    "format: LIBSVM libsvm_slots: 4",
};
constexpr int kNumSchemas = sizeof(kSchemas) / sizeof(kSchemas[0]);

const std::vector<std::shared_ptr<const Schema>>& Schemas() {
  static const auto* schemas = [] {
    auto* out = new std::vector<std::shared_ptr<const Schema>>;
    ModelConfig model;
    model.set_embedding_dim(8);
    for (const char* text : kSchemas) {
      DataConfig data;
      FUZZ_CHECK(google::protobuf::TextFormat::ParseFromString(text, &data));
      absl::StatusOr<std::shared_ptr<const Schema>> schema = Schema::Resolve(data, model);
      FUZZ_CHECK(schema.ok(), "a fuzz schema does not resolve");
      out->push_back(*schema);
    }
    return out;
  }();
  return *schemas;
}

bool SameBatch(const Batch& a, const Batch& b) {
  return a.size == b.size && a.keys == b.keys && a.values == b.values && a.bag_offsets == b.bag_offsets &&
         a.dense == b.dense && a.labels == b.labels && a.weights == b.weights && a.closed_bags == b.closed_bags;
}

// The batch's last example is well formed.
void CheckLastExample(const Schema& schema, const Batch& batch) {
  const int64_t n = batch.size - 1;
  FUZZ_CHECK(batch.closed_bags == batch.size * schema.fields(), "an example without exactly `fields` bags");
  FUZZ_CHECK(batch.dense.size() == static_cast<size_t>(batch.size * schema.dense_dim()));
  FUZZ_CHECK(batch.labels.size() == static_cast<size_t>(batch.size));
  FUZZ_CHECK(batch.labels[n] == 0.0f || batch.labels[n] == 1.0f);
  FUZZ_CHECK(batch.weights.empty() || batch.weights.size() == static_cast<size_t>(batch.size));
  if (!batch.weights.empty()) FUZZ_CHECK(std::isfinite(batch.weights[n]) && batch.weights[n] >= 0);
  FUZZ_CHECK(batch.keys.size() == batch.values.size());
  if (batch.single_valued()) {
    FUZZ_CHECK(batch.num_entries() == static_cast<size_t>(batch.num_bags()));
  } else {
    FUZZ_CHECK(batch.bag_offsets.size() == static_cast<size_t>(batch.num_bags()) + 1);
    FUZZ_CHECK(batch.bag_offsets.back() == batch.num_entries());
  }
  for (int field = 0; field < schema.fields(); ++field) {
    const int64_t bag = n * schema.fields() + field;
    FUZZ_CHECK(batch.bag_begin(bag) <= batch.bag_end(bag));
    for (uint32_t e = batch.bag_begin(bag); e < batch.bag_end(bag); ++e) FUZZ_CHECK(std::isfinite(batch.values[e]));
  }
  for (const Schema::Feature& f : schema.features()) {
    if (f.field < 0) continue;
    const int64_t bag = n * schema.fields() + f.field;
    FUZZ_CHECK(batch.bag_end(bag) - batch.bag_begin(bag) <= static_cast<uint32_t>(f.max_length));
  }
  for (int d = 0; d < schema.dense_dim(); ++d) FUZZ_CHECK(std::isfinite(batch.dense[n * schema.dense_dim() + d]));
}

}  // namespace
}  // namespace kestrel

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kestrel;  // NOLINT(build/namespaces): a fuzz entry point
  FuzzInput in(data, size);
  const std::shared_ptr<const Schema>& schema = Schemas()[in.U8() % kNumSchemas];
  const std::string text = in.Rest();
  LineParser parser(schema);
  Batch batch;
  batch.Reset(schema->fields(), schema->dense_dim());
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const Batch before = batch;
    if (!parser.Append(line, &batch).ok()) {
      FUZZ_CHECK(SameBatch(batch, before), "a refused line changed the batch");
      continue;
    }
    FUZZ_CHECK(batch.size == before.size + 1);
    CheckLastExample(*schema, batch);
    if (schema->format() != Schema::Format::kLibsvm) {
      absl::string_view bare = line;
      if (!bare.empty() && bare.back() == '\r') bare.remove_suffix(1);
      FUZZ_CHECK(SplitDelimitedLine(bare, schema->delimiter(), schema->quote()).ok());
    }
  }
  return 0;
}
