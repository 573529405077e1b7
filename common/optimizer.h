// Optimizers: the update rule a table applies to a row when a gradient arrives — on the servers, and replayed by
// a worker's row cache for its own pushes (worker/row_cache.h), so the rule has one home below both.
//
// Each row stores its values followed by slot_floats() floats of optimizer state:
//   SGD      none                       w -= lr * g
//   ADAGRAD  acc[dim]                   acc += g^2;  w -= lr * g / (sqrt(acc) + eps)
//   ROWWISE_ADAGRAD  acc (1)            acc += mean(g^2) over the row;  w -= lr * g / (sqrt(acc) + eps)
//   ADAM     m[dim], v[dim], step (1)   per-row step t for bias correction (Kingma & Ba, Algorithm 1)
//   FTRL     z[dim], n[dim]             FTRL-Proximal with L1/L2 (McMahan et al., KDD 2013, Algorithm 1)
//   ASSIGN   none                       w = g (the pushed value, bit for bit)
// Hyper-parameters come from OptimizerConfig; zero fields take the defaults documented in table.proto. The
// learning rate must lie in [1e-12, 1e4]. ASSIGN has none: it ignores every field but the type.
//
// Immutable after Create(): thread-safe. Callers serialize updates of the same row.
#ifndef KESTREL_COMMON_OPTIMIZER_H_
#define KESTREL_COMMON_OPTIMIZER_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/table.pb.h"

namespace kestrel {

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Validates the hyper-parameters (finite, in range) and builds the optimizer for rows of `dim` floats.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Optimizer>> Create(const OptimizerConfig& config, int dim);

  int dim() const { return dim_; }
  // One run of a row's optimizer state: what its floats are, for a compact checkpoint (server/checkpoint_row_codec.h).
  struct SlotRun {
    enum Kind {
      kSigned,       // any finite floats: Adam's first moment, FTRL's z
      kNonNegative,  // floats >= 0 that span decades: the Adagrad accumulators, Adam's second moment, FTRL's n
      kBits,         // not a float: Adam's step count (a uint32's bits), kept exactly
    };
    int floats;
    Kind kind;
  };

  // Floats of optimizer state per row.
  virtual int slot_floats() const = 0;
  // The runs of the state, in the order a row stores them; their floats add up to slot_floats() (none for SGD and
  // ASSIGN).
  virtual std::vector<SlotRun> slot_runs() const = 0;
  // Writes the state of a fresh row (whose values are `w`).
  virtual void InitSlots(const float* w, float* slots) const = 0;
  // Applies one gradient `g` to the row's values `w` and state `slots`.
  virtual void Apply(const float* g, float* w, float* slots) const = 0;

 protected:
  explicit Optimizer(int dim) : dim_(dim) {}
  const int dim_;
};

}  // namespace kestrel

#endif  // KESTREL_COMMON_OPTIMIZER_H_
