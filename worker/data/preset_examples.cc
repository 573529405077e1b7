#include "worker/data/preset_examples.h"

#include "absl/strings/str_cat.h"
#include "worker/data/feature_map.h"

namespace kestrel {

void AppendCriteo(const CriteoExample& example, Batch* batch) {
  for (int j = 0; j < kCriteoIntegerFields; ++j) {
    batch->AddEntry(IntegerKey(j, example.integer_missing[j], example.integers[j]), 1.0f);
    batch->CloseBag();
  }
  for (int f = 0; f < kCriteoCategoricalFields; ++f) {
    batch->AddEntry(CategoricalKey(f, example.categories[f]), 1.0f);
    batch->CloseBag();
  }
  if (batch->dense_dim == kCriteoIntegerFields) {
    for (int j = 0; j < kCriteoIntegerFields; ++j) {
      batch->dense.push_back(DenseInput(example.integer_missing[j], example.integers[j]));
    }
  }
  batch->CloseExample(example.label);
}

absl::Status AppendLibsvm(const LibsvmExample& example, Batch* batch) {
  const size_t n = example.indices.size();
  if (n > static_cast<size_t>(batch->fields)) {
    return absl::InvalidArgumentError(absl::StrCat("an example has ", n, " features, more than the ", batch->fields,
                                                   " slots configured (data.libsvm_slots)"));
  }
  // Field i is the line's i-th feature; the fields after its last are empty bags.
  for (size_t i = 0; i < static_cast<size_t>(batch->fields); ++i) {
    if (i < n) batch->AddEntry(LibsvmKey(example.indices[i]), example.values[i]);
    batch->CloseBag();
  }
  batch->dense.insert(batch->dense.end(), batch->dense_dim, 0.0f);
  batch->CloseExample(example.label);
  return absl::OkStatus();
}

}  // namespace kestrel
