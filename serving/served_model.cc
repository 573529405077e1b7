#include "serving/served_model.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "export/export_format.h"
#include "inprocess/local_ps_client.h"
#include "worker/trainer.h"

namespace kestrel {

absl::StatusOr<std::shared_ptr<const ServedModel>> LoadServedModel(const std::string& dir, std::string name,
                                                                   int64_t published_unix_micros) {
  KESTREL_RETURN_IF_ERROR(CheckBuiltInModel(dir, "kestrel_serve"));
  auto model = std::make_shared<ServedModel>();
  model->name = std::move(name);
  model->published_unix_micros = published_unix_micros;
  KESTREL_ASSIGN_OR_RETURN(model->loaded, LoadExport(dir));
  model->model_crc32c = model->loaded.model_crc32c;
  model->job = JobWithDefaults(model->loaded.model.job());
  absl::StatusOr<std::shared_ptr<const Schema>> schema = Schema::Resolve(model->job.data(), model->job.model());
  if (!schema.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the data format of the job ", dir, " was trained with: ", schema.status().message()));
  }
  model->schema = *std::move(schema);
  return std::shared_ptr<const ServedModel>(std::move(model));
}

ModelScorer::ModelScorer(std::shared_ptr<const ServedModel> model, Backend* backend)
    : model_(std::move(model)),
      backend_(backend),
      partition_(*Partition::Uniform(1)),
      parser_(model_->schema),
      batch_(backend) {
  batch_.read = CallClock{0};  // the export's rows (evaluations' reads: never from a row cache)
}

absl::StatusOr<std::unique_ptr<ModelScorer>> ModelScorer::Create(std::shared_ptr<const ServedModel> model,
                                                                 Backend* backend) {
  std::unique_ptr<ModelScorer> scorer(new ModelScorer(std::move(model), backend));
  const ServedModel& m = *scorer->model_;
  PsClientOptions client_options;
  client_options.job_id = m.loaded.model.job_id();
  scorer->client_ = NewLocalPsClient(client_options, {m.loaded.shard.get()});
  const Schema& schema = *m.schema;
  KESTREL_ASSIGN_OR_RETURN(scorer->net_, Model::Create(m.job.model(), schema.fields(), schema.dense_dim(), backend));
  scorer->tables_ = EmbeddingTables::ForSchema(scorer->client_.get(), schema, scorer->net_->embedding_dim());
  scorer->exchange_ = std::make_unique<StepExchange>(scorer->client_.get(), scorer->tables_.get(), scorer->net_.get());
  scorer->batch_.batch.batch.Reset(schema.fields(), schema.dense_dim());
  return scorer;
}

absl::Status ModelScorer::Add(absl::Span<const absl::string_view> lines) {
  const Schema& schema = *model_->schema;
  request_.Reset(schema.fields(), schema.dense_dim());
  for (size_t i = 0; i < lines.size(); ++i) {
    if (absl::Status parsed = parser_.Append(lines[i], &request_); !parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("line ", i, ": ", parsed.message()));
    }
  }
  batch_.batch.batch.Append(request_);
  return absl::OkStatus();
}

absl::Status ModelScorer::Score(std::vector<float>* scores) {
  Batch& batch = batch_.batch.batch;
  const int64_t n = batch.size;
  if (n == 0) return absl::OkStatus();
  const Schema& schema = *model_->schema;
  if (n == 1) {  // scored as two rows (see the class comment)
    request_ = batch;
    batch.Append(request_);
  }
  batch_.batch.Prepare(partition_, schema.field_tables(), schema.num_tables());
  absl::Status scored = exchange_->Pull(&batch_);
  if (scored.ok()) {
    probs_.resize(batch.size);
    scored = net_->Step(batch_.batch, {batch_.wide.data(), batch_.emb.data(), batch_.dense.data()}, nullptr,
                        probs_.data())
                 .status();
  }
  batch.Reset(schema.fields(), schema.dense_dim());
  KESTREL_RETURN_IF_ERROR(scored);
  scores->insert(scores->end(), probs_.begin(), probs_.begin() + n);
  return absl::OkStatus();
}

}  // namespace kestrel
