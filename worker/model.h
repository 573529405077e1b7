// Model: the sparse recommendation models (LR, FM, DeepFM, Wide&Deep, DLRM) as one composable network over
// pooled fields, run on a compute Backend. It knows nothing of the network or the servers: the Trainer pulls
// its tables' rows, hands them to Step(), and pushes the gradients Step() returns.
//
// Each example has `fields` fields; field f is a bag of entries (key k, value v) (worker/data/batch.h: MEAN and
// SQRT_N pooling are folded into the values, a single-valued field is a bag of one entry, an empty bag adds
// nothing). Each field is pooled into one vector per table, and the model sees only those:
//   w_f   = sum over the bag of v * w[k]                             (table "wide", dim 1)
//   e_f   = sum over the bag of v * e[k]                             (table "emb", dim embedding_dim)
//   logit = bias + wide + fm + deep
//   wide  = sum_f w_f
//   fm    = sum_{f < g} <e_f, e_g>
//   deep  = MLP([e_f for every f] ++ dense inputs)                   ReLU hidden layers, a linear output unit
//   DLRM's deep = MLP([b] ++ [<u_i, u_j> for i < j]) over u = (b, e_f ...), b = BottomMLP(dense)
//   loss  = weight * logloss of each example (Batch::weights; 1 where absent)
// Gradients: each sparse row receives the SUM over the batch's entries of their loss gradients (a row is
// touched by few examples of a batch; averaging would shrink a rare feature's step by the batch size, and the
// servers' adaptive optimizers, FTRL and Adagrad, normalize per coordinate); the dense tensor, which every
// example touches, receives the batch MEAN over examples: the weighted gradients' sum divided by the number of
// examples (not by the weights' sum, so an example's weight scales its share of every gradient alike).
//   LR = bias + wide; FM = LR + fm; DeepFM = FM + deep; Wide&Deep = LR + deep; DLRM = LR + DLRM's deep.
// The dense tensor (table "dense") holds [bias, top MLP layers, bottom MLP layers (DLRM)], each layer
// [W row-major inputs x outputs, b].
//
// Thread-compatible: one Model per training thread; it reuses its device and staging buffers across steps.
// The Backend must outlive it.
#ifndef KESTREL_WORKER_MODEL_H_
#define KESTREL_WORKER_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "proto/table.pb.h"
#include "worker/prepared_batch.h"
#include "worker/compute/backend.h"

namespace kestrel {

inline constexpr char kWideTable[] = "wide";
inline constexpr char kEmbeddingTable[] = "emb";
inline constexpr char kDenseTable[] = "dense";

// The model's parameters for one batch, in host memory: the rows of the batch's unique keys (in
// PreparedBatch::keys.unique_keys() order) and the whole dense tensor. Null for a table the model lacks.
struct ModelParams {
  const float* wide = nullptr;       // num_unique x 1
  const float* embedding = nullptr;  // num_unique x embedding_dim
  const float* dense = nullptr;      // dense_size
};

// Gradients (summed over the batch for the sparse rows, averaged over its examples for the dense tensor; see
// above), same shapes (host memory owned by the caller).
struct ModelGrads {
  float* wide = nullptr;
  float* embedding = nullptr;
  float* dense = nullptr;
};

class Model {
 public:
  // `fields` fields (bags) and `dense_dim` dense inputs per example (dense inputs feed the MLP only).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Model>> Create(const ModelConfig& config, int fields, int dense_dim,
                                                       Backend* backend);
  ~Model();

  bool has_wide() const { return true; }
  bool has_embedding() const { return fm_ || deep_; }
  bool has_fm() const { return fm_; }
  bool has_deep() const { return deep_; }
  bool has_dot_interaction() const { return dlrm_; }
  int embedding_dim() const { return dim_; }
  int64_t dense_size() const { return dense_size_; }
  int fields() const { return fields_; }
  int dense_dim() const { return dense_dim_; }

  // The server tables this model uses, with their shapes, initializers and optimizers (defaults applied).
  std::vector<TableConfig> Tables() const;

  // Runs the batch forward; with `grads`, also backward. Writes each example's click probability to
  // `probabilities` (batch.size floats, may be null) and returns the batch's summed weighted logloss. The batch
  // may be single-valued or jagged (bag_offsets, with PreparedBatch::entry_bags), and weighted. An empty batch
  // (size 0, of any shape) returns 0 and zero gradients. The sparse parameter and gradient arrays may be null
  // when the batch has no keys. InvalidArgument when the batch's shape is not the model's or its arrays
  // disagree with one another (e.g. bag_offsets without entry_bags: Prepare() was not run on it).
  [[nodiscard]] absl::StatusOr<double> Step(const PreparedBatch& batch, const ModelParams& params, ModelGrads* grads,
                              float* probabilities);

 private:
  struct Layer {
    int inputs = 0;
    int outputs = 0;
    int64_t weight_offset = 0;  // into the dense tensor
    int64_t bias_offset = 0;
  };
  // Fully connected layers in the dense tensor, ReLU after each but the last (and after the last with
  // relu_last), with their activations and backward scratch.
  struct Mlp {
    std::vector<Layer> layers;
    bool relu_last = false;
    std::vector<std::unique_ptr<DeviceArray<float>>> out;  // per layer: [n, outputs]
    std::unique_ptr<DeviceArray<float>> back[2];           // ping-pong input gradients
  };
  struct Buffers;

  Model(const ModelConfig& config, int fields, int dense_dim, Backend* backend);

  // Lays out an MLP of `widths` over `inputs` inputs at the end of the dense tensor.
  void AddMlp(Mlp* mlp, int inputs, const std::vector<int>& widths, bool relu_last);
  // The first layer's input is one matrix [n, inputs], or two side by side: `input` [n, inputs - extra_width]
  // and `extra` [n, extra_width] (the first layer's weight rows in that order), so callers need not copy
  // them into one. extra_width 0: `extra` is unused.
  struct MlpInput {
    const float* input = nullptr;
    const float* extra = nullptr;
    int extra_width = 0;
  };
  // Forward; *output points at the last layer's activations.
  [[nodiscard]] absl::Status MlpForward(Mlp& mlp, const MlpInput& in, int64_t n, const float** output);
  // Backward given dout = dL/d(output) (overwritten); writes the weight and bias gradients into grad_dense.
  // dL/d(input) (not of `extra`): with `dinput`, points it at a buffer of it ([n, inputs], valid until the
  // next call; extra_width must be 0); with `add_dinput_to`, adds it to that [n, inputs - extra_width].
  [[nodiscard]] absl::Status MlpBackward(Mlp& mlp, const MlpInput& in, float* dout, int64_t n, float** dinput,
                           float* add_dinput_to = nullptr);
  // DeepFM's and Wide&Deep's MLP input: [Buffers::x | Buffers::dense_in].
  MlpInput DeepInput() const;
  // The batch's shape and the sizes of its arrays (Step's InvalidArgument).
  [[nodiscard]] absl::Status CheckBatch(const PreparedBatch& batch) const;
  [[nodiscard]] absl::Status Forward(const PreparedBatch& batch, const ModelParams& params, bool train);
  [[nodiscard]] absl::Status Backward(const PreparedBatch& batch, ModelGrads* grads);
  // DLRM's deep part (after the embeddings are pooled into Buffers::x).
  [[nodiscard]] absl::Status DlrmForward(const Batch& batch, const float** deep_out);
  [[nodiscard]] absl::Status DlrmBackward(int64_t n);

  ModelConfig config_;
  Backend* backend_;
  int fields_;
  int dense_dim_;
  int dim_ = 0;  // embedding dim (0 without embeddings)
  bool fm_ = false;
  bool deep_ = false;
  bool dlrm_ = false;
  bool bottom_ = false;  // DLRM with dense inputs
  int vectors_ = 0;      // DLRM: vectors per example in the dot interaction
  Mlp top_;              // the deep part's MLP
  Mlp bottom_mlp_;       // DLRM: dense inputs -> one embedding-sized vector
  int64_t dense_size_ = 1;
  std::unique_ptr<Buffers> buffers_;
};

// The configuration with every unset field given its documented default (proto/job.proto).
ModelConfig WithDefaults(ModelConfig config);

}  // namespace kestrel

#endif  // KESTREL_WORKER_MODEL_H_
