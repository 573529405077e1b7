// ServedModel: one model state a prediction service answers from — an export (full, or a delta with its base
// chain, export/load_export.h) loaded into an in-process shard — and ModelScorer, which scores example lines
// with it exactly as kestrel_predict scores files: the same parser, the same row pulls (a key the export lacks
// answers its table's initial value), the same model code and kernels.
//
// A ServedModel is immutable once loaded and shared (std::shared_ptr) by every scorer using it: a new export
// makes a new ServedModel, swapped in whole (serving/model_source.h), so a request is scored by one model state
// throughout. A ModelScorer is one scoring thread's: not thread-safe; any number of them may score one
// ServedModel concurrently (the shard's reads are thread-safe).
#ifndef KESTREL_SERVING_SERVED_MODEL_H_
#define KESTREL_SERVING_SERVED_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/partition.h"
#include "export/load_export.h"
#include "proto/checkpoint.pb.h"
#include "proto/job.pb.h"
#include "worker/batch_pipeline.h"
#include "worker/compute/backend.h"
#include "worker/data/schema.h"
#include "worker/data/schema_parser.h"
#include "worker/embedding_tables.h"
#include "worker/model.h"
#include "worker/ps_client.h"
#include "worker/step_exchange.h"

namespace kestrel {

struct ServedModel {
  std::string name;        // the export's name as served (its manifest entry's dir, or the directory given)
  int64_t published_unix_micros = 0;  // when its manifest entry was written (0: not from a manifest)
  JobConfig job;           // the job it was trained with, defaults applied
  std::shared_ptr<const Schema> schema;
  LoadedExport loaded;     // MODEL and the rows
  uint32_t model_crc32c = 0;  // of its MODEL file
};

// Loads the export in `dir` (LoadExport: files and base chain verified first) and resolves its job's data
// format. Errors as LoadExport's; InvalidArgument for an export holding a PyTorch model (kPythonModuleFile:
// kestrel_serve serves the built-in models) or whose job's format cannot be resolved.
[[nodiscard]] absl::StatusOr<std::shared_ptr<const ServedModel>> LoadServedModel(
    const std::string& dir, std::string name, int64_t published_unix_micros = 0);

class ModelScorer {
 public:
  // A scorer of `model` computing on `backend` (owned by the caller, outliving the scorer).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ModelScorer>> Create(std::shared_ptr<const ServedModel> model,
                                                                           Backend* backend);

  const std::shared_ptr<const ServedModel>& model() const { return model_; }

  // Parses `lines` (one example each, in the job's data format) into the pending batch. InvalidArgument naming
  // the first bad line (its index in `lines`) and its problem; the pending batch is then as it was.
  [[nodiscard]] absl::Status Add(absl::Span<const absl::string_view> lines);
  // Examples pending.
  int64_t pending() const { return batch_.batch.batch.size; }
  // Scores the pending examples in one pass (appending one probability per example, in order, to `scores`)
  // and clears them. An example's score depends on its own line and the model only, bit for bit, however many
  // examples share the pass: oneDNN's sgemm computes a single row by another kernel, whose sums round
  // differently, so a lone example is scored as two rows (itself twice) and the first kept.
  [[nodiscard]] absl::Status Score(std::vector<float>* scores);

 private:
  ModelScorer(std::shared_ptr<const ServedModel> model, Backend* backend);

  const std::shared_ptr<const ServedModel> model_;
  Backend* const backend_;
  Partition partition_;
  std::unique_ptr<PsClient> client_;
  std::unique_ptr<Model> net_;
  std::unique_ptr<EmbeddingTables> tables_;
  std::unique_ptr<StepExchange> exchange_;
  LineParser parser_;
  Batch request_;   // one Add's examples, joined to the step's batch once all parsed
  StepData batch_;  // the pending examples and their rows
  std::vector<float> probs_;
};

}  // namespace kestrel

#endif  // KESTREL_SERVING_SERVED_MODEL_H_
