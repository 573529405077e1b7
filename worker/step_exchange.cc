#include "worker/step_exchange.h"

#include <functional>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/status.h"

namespace kestrel {
namespace {

// A sparse table's part of a fused Step: the gradient rows `grads` of `push_keys` pushed, the rows of `pull_keys`
// read into `rows`; `dim` floats a row.
StepPart SparsePart(const std::string& table, int dim, const KeyBatch& push_keys, const float* grads,
                    const KeyBatch& pull_keys, float* rows) {
  StepPart part{table};
  part.dim = dim;
  part.push = true;
  part.push_keys = &push_keys;
  part.grads = grads;
  part.pull = true;
  part.pull_keys = &pull_keys;
  part.rows = rows;
  return part;
}

}  // namespace

absl::Status StepExchange::ReserveRows(StepData* step) const {
  const KeyBatch& keys = step->batch.keys;
  KESTREL_RETURN_IF_ERROR(step->wide.Reserve(keys.num_unique()));
  KESTREL_RETURN_IF_ERROR(step->emb.Reserve(keys.num_unique() * model_->embedding_dim()));
  return step->dense.Reserve(model_->dense_size());
}

absl::Status StepExchange::ReserveGrads(const PreparedBatch& batch, GradBuffers* g) const {
  const size_t unique = batch.keys.num_unique();
  KESTREL_RETURN_IF_ERROR(g->wide.Reserve(unique));
  KESTREL_RETURN_IF_ERROR(g->emb.Reserve(unique * model_->embedding_dim()));
  return g->dense.Reserve(model_->dense_size());
}

absl::Status StepExchange::Beside(const std::function<absl::Status()>& side,
                                  absl::FunctionRef<absl::Status()> main) const {
  if (!side) return main();
  absl::Status side_status;
  absl::Notification done;
  pool_.Schedule([&] {
    side_status = side();
    done.Notify();
  });
  absl::Status status = main();
  done.WaitForNotification();
  return status.ok() ? side_status : status;
}

absl::Status StepExchange::Pull(StepData* step) const {
  const KeyBatch& keys = step->batch.keys;
  const CallClock& read = step->read;
  KESTREL_RETURN_IF_ERROR(ReserveRows(step));
  std::function<absl::Status()> emb;
  if (model_->has_embedding()) {
    emb = [&] { return tables_->Pull(step->batch, step->emb.data(), read, &step->staging); };
  }
  return Beside(emb, [&] {
    KESTREL_RETURN_IF_ERROR(client_->Pull(kWideTable, keys, 1, step->wide.data(), read));
    return PullDense(step);
  });
}

absl::Status StepExchange::Push(const StepData& step, const GradBuffers& g, int64_t clock) const {
  const KeyBatch& keys = step.batch.keys;
  const CallClock at{clock};
  std::function<absl::Status()> emb;
  if (model_->has_embedding()) {
    emb = [&] { return tables_->Push(step.batch, g.emb.data(), at, &g.staging); };
  }
  return Beside(emb, [&] {
    absl::Status status = client_->Push(kWideTable, keys, 1, g.wide.data(), at);
    absl::Status dense = PushDense(step, g, at);
    return status.ok() ? dense : status;
  });
}

absl::Status StepExchange::Fused(const StepData& step, const GradBuffers& g, int64_t clock, StepData* next) const {
  const KeyBatch& keys = next->batch.keys;
  std::vector<StepPart> parts;
  parts.push_back(SparsePart(kWideTable, 1, step.batch.keys, g.wide.data(), keys, next->wide.data()));
  if (model_->has_embedding()) {
    parts.push_back(
        SparsePart(tables_->name(0), model_->embedding_dim(), step.batch.keys, g.emb.data(), keys, next->emb.data()));
  }
  StepPart dense{kDenseTable};
  dense.dense = true;
  dense.push = true;
  dense.grads = g.dense.data();
  dense.push_floats = DenseFloatsPushed(step);
  dense.pull = true;
  dense.rows = next->dense.data();
  dense.pull_floats = model_->dense_size();
  parts.push_back(dense);
  return client_->Step(parts, CallClock{clock}, next->read);
}

absl::Status StepExchange::PullPart(const PullSplit::Part& part, StepData* step, std::vector<float>* scratch) const {
  if (!step->batch.tables.empty()) return absl::InternalError("a split pull of several embedding tables");
  const size_t n = part.keys.num_unique();
  if (n == 0) return absl::OkStatus();
  const int dim = model_->embedding_dim();
  scratch->resize(n * (1 + (model_->has_embedding() ? dim : 0)));
  float* const wide = scratch->data();
  float* const emb = wide + n;
  std::function<absl::Status()> pulling;
  if (model_->has_embedding()) {
    pulling = [&] { return client_->Pull(tables_->name(0), part.keys, dim, emb, step->read); };
  }
  KESTREL_RETURN_IF_ERROR(Beside(pulling, [&] { return client_->Pull(kWideTable, part.keys, 1, wide, step->read); }));
  PullSplit::Place(part, wide, 1, step->wide.data());
  if (model_->has_embedding()) PullSplit::Place(part, emb, dim, step->emb.data());
  return absl::OkStatus();
}

absl::Status StepExchange::PushPart(const PullSplit::Part& part, const StepData& step, const GradBuffers& g,
                                    int64_t clock, bool dense, std::vector<float>* scratch) const {
  if (!step.batch.tables.empty()) return absl::InternalError("a split push of several embedding tables");
  const CallClock at{clock};
  const size_t n = part.keys.num_unique();
  const int dim = model_->embedding_dim();
  scratch->resize(n * (1 + (model_->has_embedding() ? dim : 0)));
  float* const wide = scratch->data();
  float* const emb = wide + n;
  PullSplit::Gather(part, g.wide.data(), 1, wide);
  std::function<absl::Status()> pushing;
  if (model_->has_embedding() && n > 0) {
    PullSplit::Gather(part, g.emb.data(), dim, emb);
    pushing = [&] { return client_->Push(tables_->name(0), part.keys, dim, emb, at); };
  }
  return Beside(pushing, [&] {
    if (n > 0) KESTREL_RETURN_IF_ERROR(client_->Push(kWideTable, part.keys, 1, wide, at));
    return dense ? PushDense(step, g, at) : absl::OkStatus();
  });
}

absl::Status StepExchange::PushDense(const StepData& step, const GradBuffers& g, const CallClock& at) const {
  return client_->PushDense(kDenseTable, absl::MakeConstSpan(g.dense.data(), DenseFloatsPushed(step)), at);
}

absl::Status StepExchange::PullDense(StepData* step) const {
  return client_->PullDense(kDenseTable, absl::MakeSpan(step->dense.data(), model_->dense_size()), step->read);
}

size_t StepExchange::DenseFloatsPushed(const StepData& step) const {
  return step.batch.batch.size > 0 ? model_->dense_size() : 0;
}

}  // namespace kestrel
