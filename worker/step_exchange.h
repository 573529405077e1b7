// StepExchange: the parameter-server traffic of one training iteration. Pull reads the rows of a batch's keys
// (the wide table, the embedding tables) and the dense tensor; Push sends the iteration's gradients; Fused sends
// one iteration's gradients and reads the next batch's rows in one PsClient::Step (one round trip per server).
// The embedding tables travel concurrently with the wide and dense ones.
#ifndef KESTREL_WORKER_STEP_EXCHANGE_H_
#define KESTREL_WORKER_STEP_EXCHANGE_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "common/thread_pool.h"
#include "worker/batch_pipeline.h"
#include "worker/embedding_tables.h"
#include "worker/model.h"
#include "worker/ps_client.h"
#include "worker/pull_split.h"

namespace kestrel {

// Thread-safe: calls on different StepData and GradBuffers may run concurrently (a prefetching or overlapped
// push's thread beside the training loop). The client, tables and model must outlive it.
class StepExchange {
 public:
  StepExchange(PsClient* client, const EmbeddingTables* tables, const Model* model)
      : client_(client), tables_(tables), model_(model) {}

  // Sizes `step`'s row buffers for its batch's unique keys and the dense tensor.
  [[nodiscard]] absl::Status ReserveRows(StepData* step) const;
  // Sizes `g` for the gradients of `batch`.
  [[nodiscard]] absl::Status ReserveGrads(const PreparedBatch& batch, GradBuffers* g) const;

  // Pulls the rows of `step`'s unique keys and the dense tensor, at step->read; the sparse tables concurrently.
  [[nodiscard]] absl::Status Pull(StepData* step) const;
  // Pushes iteration `clock`'s gradients `g` (of `step`'s batch); the sparse tables concurrently. An empty batch
  // pushes an empty dense part.
  [[nodiscard]] absl::Status Push(const StepData& step, const GradBuffers& g, int64_t clock) const;
  // Pushes iteration `clock`'s gradients `g` (of `step`'s batch, as Push) and pulls the rows of `next`'s batch at
  // next->read, in one Step. `next`'s batch must look up one embedding table, its row buffers sized (ReserveRows).
  [[nodiscard]] absl::Status Fused(const StepData& step, const GradBuffers& g, int64_t clock, StepData* next) const;

  // A split pull (worker/pull_split.h, TrainerOptions::split_pulls): the rows of `part`'s keys of the wide table and
  // the embedding table into `step`'s row buffers (sized: ReserveRows) at part.positions, at step->read; the
  // embedding table concurrently. `step`'s batch must look up one embedding table. `scratch` holds the part's rows
  // on their way.
  [[nodiscard]] absl::Status PullPart(const PullSplit::Part& part, StepData* step, std::vector<float>* scratch) const;
  // The dense tensor into `step`'s buffer, at step->read.
  [[nodiscard]] absl::Status PullDense(StepData* step) const;
  // A split push: iteration `clock`'s gradient rows (of `g`, for `step`'s batch) of `part`'s keys, the embedding
  // table concurrently, and with `dense` the dense gradients too. `step`'s batch must look up one embedding table.
  // `scratch` holds the part's rows on their way.
  [[nodiscard]] absl::Status PushPart(const PullSplit::Part& part, const StepData& step, const GradBuffers& g,
                                      int64_t clock, bool dense, std::vector<float>* scratch) const;

 private:
  // The dense gradient floats an iteration of `step` pushes: none for an empty batch (an empty part: BSP still
  // counts this worker's part of the clock, while a zero gradient would move an Adam tensor's moments).
  size_t DenseFloatsPushed(const StepData& step) const;
  // The dense gradients of `g` (for `step`'s batch: DenseFloatsPushed), at `at`.
  [[nodiscard]] absl::Status PushDense(const StepData& step, const GradBuffers& g, const CallClock& at) const;

  // Runs `side` (if set) on pool_ while `main` runs on the caller's thread; main's error first, then side's.
  [[nodiscard]] absl::Status Beside(const std::function<absl::Status()>& side,
                                    absl::FunctionRef<absl::Status()> main) const;

  PsClient* const client_;
  const EmbeddingTables* const tables_;
  const Model* const model_;
  // The embedding tables' side of each call (Beside): two threads, one per concurrent caller (the training loop,
  // and a prefetching, split or overlapped pull or push), kept instead of a thread started per call.
  mutable ThreadPool pool_{2};
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_STEP_EXCHANGE_H_
