#include "worker/model.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace kestrel {

// Device arrays, reused across steps (they only grow).
struct Model::Buffers {
  explicit Buffers(Backend* b)
      : index(b), bag_offsets(b), values(b), labels(b), weights(b), dense_in(b), offsets(b), positions(b),
        entry_bags(b), wide_rows(b), emb_rows(b), dense(b), xw(b), wide_out(b), x(b), sum(b), fm_out(b), in0(b),
        prob(b), loss(b), dlogit(b), dx(b), grad_wide(b), grad_emb(b), grad_dense(b), vectors(b), pairs(b),
        dpairs(b), dvectors(b), dbottom(b) {}
  // The batch: entries' unique rows and values, bag offsets (jagged batches), labels, example weights.
  DeviceArray<uint32_t> index, bag_offsets;
  DeviceArray<float> values, labels, weights, dense_in;
  // The gradient scatter's segments and each entry's bag (jagged batches).
  DeviceArray<uint32_t> offsets, positions, entry_bags;
  DeviceArray<float> wide_rows, emb_rows, dense;
  DeviceArray<float> xw, wide_out, x, sum, fm_out, in0;
  DeviceArray<float> prob, loss, dlogit, dx, grad_wide, grad_emb, grad_dense;
  // DLRM: the interacting vectors [n, m, dim], their pairwise dots [n, pairs] and the gradients.
  DeviceArray<float> vectors, pairs, dpairs, dvectors, dbottom;
  std::vector<float> host_loss;
};

namespace {

// Default learning rates (proto/job.proto documents them).
constexpr float kDefaultWideLearningRate = 0.1f;          // FTRL alpha, every model
constexpr float kDefaultEmbeddingLearningRate = 0.005f;   // Adagrad: FM, DeepFM, Wide&Deep
constexpr float kDlrmEmbeddingLearningRate = 0.1f;        // Adagrad: DLRM
constexpr float kDefaultDenseLearningRate = 0.001f;       // Adam: every model

}  // namespace

ModelConfig WithDefaults(ModelConfig config) {
  if (config.embedding_dim() == 0) config.set_embedding_dim(8);
  if (config.hidden_size() == 0) {
    config.add_hidden(64);
    config.add_hidden(32);
  }
  if (config.bottom_hidden_size() == 0) config.add_bottom_hidden(32);
  // The optimizer defaults were chosen by bench/sweep_defaults.py (bench/results/sweep_defaults.md: held-out
  // AUC at embedding dim 16, MLP 256-128, batch 4096). The FM term over every pair of fields wants small
  // embedding steps; DLRM, whose MLP weighs each pair's dot product, learns the interactions only with larger
  // ones.
  const bool dlrm = config.type() == ModelConfig::DLRM;
  if (!config.has_wide_optimizer()) {
    config.mutable_wide_optimizer()->set_type(OptimizerConfig::FTRL);
    config.mutable_wide_optimizer()->set_learning_rate(kDefaultWideLearningRate);
    config.mutable_wide_optimizer()->set_ftrl_beta(1.0f);
  }
  if (!config.has_embedding_optimizer()) {
    config.mutable_embedding_optimizer()->set_type(OptimizerConfig::ADAGRAD);
    config.mutable_embedding_optimizer()->set_learning_rate(dlrm ? kDlrmEmbeddingLearningRate
                                                                 : kDefaultEmbeddingLearningRate);
    config.mutable_embedding_optimizer()->set_initial_accumulator(0.1f);
  }
  if (!config.has_dense_optimizer()) {
    config.mutable_dense_optimizer()->set_type(OptimizerConfig::ADAM);
    config.mutable_dense_optimizer()->set_learning_rate(kDefaultDenseLearningRate);
  }
  if (!config.has_embedding_initializer()) {
    // DLRM's deep part sees the embeddings only through their pairwise dot products, whose gradients are the
    // other embeddings: from NORMAL(0, 0.01) it never grows out of the near-zero start at the demo size (it
    // predicts as LR does), and the later burst in the dots' scale kills most of its ReLUs under ASP at the
    // realistic size. NORMAL(0, 0.1) learns the interactions at both sizes and in every mode measured
    // (bench/results/dlrm_defaults.md). The FM term wants the small start.
    config.mutable_embedding_initializer()->set_type(InitializerConfig::NORMAL);
    config.mutable_embedding_initializer()->set_stddev(dlrm ? 0.1f : 0.01f);
  }
  if (config.seed() == 0) config.set_seed(1);
  return config;
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const ModelConfig& config, int fields, int dense_dim,
                                                     Backend* backend) {
  const ModelConfig c = WithDefaults(config);
  if (fields < 1 || dense_dim < 0) {
    return absl::InvalidArgumentError(absl::StrCat("a model needs >= 1 fields, got ", fields));
  }
  if (c.embedding_dim() < 1 || c.embedding_dim() > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("model.embedding_dim must be in [1, 1024], got ", c.embedding_dim()));
  }
  for (const auto* widths : {&c.hidden(), &c.bottom_hidden()}) {
    for (int h : *widths) {
      if (h < 1 || h > 4096) {
        return absl::InvalidArgumentError(absl::StrCat("model.hidden and bottom_hidden widths must be in [1, 4096], got ", h));
      }
    }
  }
  if (backend != nullptr) {
    KESTREL_RETURN_IF_ERROR(backend->SetGemmMath(c.gemm_precision() == ModelConfig::GEMM_TF32
                                                     ? Backend::GemmMath::kTf32
                                                     : Backend::GemmMath::kFp32));
  }
  return std::unique_ptr<Model>(new Model(c, fields, dense_dim, backend));
}

Model::Model(const ModelConfig& config, int fields, int dense_dim, Backend* backend)
    : config_(config), backend_(backend), fields_(fields), dense_dim_(dense_dim),
      buffers_(std::make_unique<Buffers>(backend)) {
  const ModelConfig::Type type = config.type();
  fm_ = type == ModelConfig::FM || type == ModelConfig::DEEPFM;
  dlrm_ = type == ModelConfig::DLRM;
  deep_ = type == ModelConfig::DEEPFM || type == ModelConfig::WIDE_AND_DEEP || dlrm_;
  if (fm_ || deep_) dim_ = config.embedding_dim();
  if (!deep_) dense_dim_ = 0;
  std::vector<int> top(config.hidden().begin(), config.hidden().end());
  top.push_back(1);  // the output unit
  if (dlrm_) {
    // The bottom MLP turns the dense inputs into one more embedding-sized vector; the top MLP sees it and the
    // pairwise dots of all vectors.
    bottom_ = dense_dim_ > 0;
    vectors_ = fields_ + (bottom_ ? 1 : 0);
    const int pairs = vectors_ * (vectors_ - 1) / 2;
    AddMlp(&top_, (bottom_ ? dim_ : 0) + pairs, top, /*relu_last=*/false);
    if (bottom_) {
      std::vector<int> widths(config.bottom_hidden().begin(), config.bottom_hidden().end());
      widths.push_back(dim_);
      AddMlp(&bottom_mlp_, dense_dim_, widths, /*relu_last=*/true);
    }
  } else if (deep_) {
    AddMlp(&top_, fields_ * dim_ + dense_dim_, top, /*relu_last=*/false);
  }
}

void Model::AddMlp(Mlp* mlp, int inputs, const std::vector<int>& widths, bool relu_last) {
  mlp->relu_last = relu_last;
  for (int outputs : widths) {
    Layer layer;
    layer.inputs = inputs;
    layer.outputs = outputs;
    layer.weight_offset = dense_size_;
    dense_size_ += int64_t{inputs} * outputs;
    layer.bias_offset = dense_size_;
    dense_size_ += outputs;
    mlp->layers.push_back(layer);
    mlp->out.push_back(std::make_unique<DeviceArray<float>>(backend_));
    inputs = outputs;
  }
  for (auto& b : mlp->back) b = std::make_unique<DeviceArray<float>>(backend_);
}

absl::Status Model::MlpForward(Mlp& mlp, const MlpInput& in, int64_t n, const float** output) {
  Backend& be = *backend_;
  const float* params = buffers_->dense.data();
  const float* input = in.input;
  for (size_t l = 0; l < mlp.layers.size(); ++l) {
    const Layer& layer = mlp.layers[l];
    DeviceArray<float>& out = *mlp.out[l];
    KESTREL_RETURN_IF_ERROR(out.Reserve(n * layer.outputs));
    const int extra = l == 0 ? in.extra_width : 0;
    const int main = layer.inputs - extra;
    KESTREL_RETURN_IF_ERROR(be.Gemm(false, false, static_cast<int>(n), layer.outputs, main, 1.0f, input,
                                    params + layer.weight_offset, 0.0f, out.data()));
    if (extra > 0) {  // + extra · (the weight rows after the main input's)
      KESTREL_RETURN_IF_ERROR(be.Gemm(false, false, static_cast<int>(n), layer.outputs, extra, 1.0f, in.extra,
                                      params + layer.weight_offset + int64_t{main} * layer.outputs, 1.0f,
                                      out.data()));
    }
    KESTREL_RETURN_IF_ERROR(be.BiasActivation(out.data(), params + layer.bias_offset, n, layer.outputs,
                                              /*relu=*/l + 1 < mlp.layers.size() || mlp.relu_last));
    input = out.data();
  }
  *output = input;
  return absl::OkStatus();
}

absl::Status Model::MlpBackward(Mlp& mlp, const MlpInput& in, float* dout, int64_t n, float** dinput,
                                float* add_dinput_to) {
  if (dinput != nullptr && in.extra_width > 0) {
    return absl::InternalError("MlpBackward: dL/d(input) as a buffer needs a single input matrix");
  }
  Backend& be = *backend_;
  const float* params = buffers_->dense.data();
  float* grads = buffers_->grad_dense.data();
  int max_width = 0;
  for (const Layer& layer : mlp.layers) max_width = std::max(max_width, layer.inputs);
  for (auto& b : mlp.back) KESTREL_RETURN_IF_ERROR(b->Reserve(n * max_width));
  for (int l = static_cast<int>(mlp.layers.size()) - 1; l >= 0; --l) {
    const Layer& layer = mlp.layers[l];
    if (l + 1 < static_cast<int>(mlp.layers.size()) || mlp.relu_last) {
      KESTREL_RETURN_IF_ERROR(be.ReluBackward(mlp.out[l]->data(), dout, n * layer.outputs));
    }
    const float* layer_input = l == 0 ? in.input : mlp.out[l - 1]->data();
    const int extra = l == 0 ? in.extra_width : 0;
    const int main = layer.inputs - extra;
    // dW = input^T dout, db = column sums of dout, dinput = dout W^T.
    KESTREL_RETURN_IF_ERROR(be.Gemm(true, false, main, layer.outputs, static_cast<int>(n), 1.0f, layer_input, dout,
                                    0.0f, grads + layer.weight_offset));
    if (extra > 0) {
      KESTREL_RETURN_IF_ERROR(be.Gemm(true, false, extra, layer.outputs, static_cast<int>(n), 1.0f, in.extra,
                                      dout, 0.0f, grads + layer.weight_offset + int64_t{main} * layer.outputs));
    }
    KESTREL_RETURN_IF_ERROR(be.ColumnSum(dout, n, layer.outputs, grads + layer.bias_offset));
    if (l == 0 && add_dinput_to != nullptr) {
      KESTREL_RETURN_IF_ERROR(be.Gemm(false, true, static_cast<int>(n), main, layer.outputs, 1.0f, dout,
                                      params + layer.weight_offset, 1.0f, add_dinput_to));
      break;
    }
    if (l == 0 && dinput == nullptr) break;
    float* next = mlp.back[l % 2]->data();
    KESTREL_RETURN_IF_ERROR(be.Gemm(false, true, static_cast<int>(n), layer.inputs, layer.outputs, 1.0f, dout,
                                    params + layer.weight_offset, 0.0f, next));
    dout = next;
  }
  if (dinput != nullptr) *dinput = dout;
  return absl::OkStatus();
}

Model::MlpInput Model::DeepInput() const {
  MlpInput in;
  in.input = buffers_->x.data();
  if (dense_dim_ > 0) {
    in.extra = buffers_->dense_in.data();
    in.extra_width = dense_dim_;
  }
  return in;
}

Model::~Model() = default;

std::vector<TableConfig> Model::Tables() const {
  std::vector<TableConfig> tables;
  TableConfig wide;
  wide.set_name(kWideTable);
  wide.set_kind(TableConfig::SPARSE);
  wide.set_dim(1);
  wide.set_seed(config_.seed());
  wide.mutable_initializer()->set_type(InitializerConfig::ZEROS);
  *wide.mutable_optimizer() = config_.wide_optimizer();
  if (config_.has_sparse_capacity()) *wide.mutable_capacity() = config_.sparse_capacity();
  wide.set_wire_type(config_.wire_type());
  tables.push_back(wide);
  if (has_embedding()) {
    TableConfig emb;
    emb.set_name(kEmbeddingTable);
    emb.set_kind(TableConfig::SPARSE);
    emb.set_dim(dim_);
    emb.set_seed(config_.seed() + 1);
    *emb.mutable_initializer() = config_.embedding_initializer();
    *emb.mutable_optimizer() = config_.embedding_optimizer();
    if (config_.has_sparse_capacity()) *emb.mutable_capacity() = config_.sparse_capacity();
    emb.set_wire_type(config_.wire_type());
    if (config_.has_embedding_storage()) *emb.mutable_storage() = config_.embedding_storage();
    emb.set_checkpoint_codec(config_.embedding_checkpoint_codec());
    tables.push_back(emb);
  }
  TableConfig dense;
  dense.set_name(kDenseTable);
  dense.set_kind(TableConfig::DENSE);
  dense.set_dim(static_cast<int>(std::min<int64_t>(dense_size_, 1024)));
  dense.set_dense_size(dense_size_);
  dense.set_wire_type(config_.wire_type());
  dense.set_seed(config_.seed() + 2);
  // Small uniform weights: with ReLU layers of these widths and Adam, training does not depend on a
  // per-layer fan-in scale. The bias starts in the same range.
  dense.mutable_initializer()->set_type(InitializerConfig::UNIFORM);
  dense.mutable_initializer()->set_min(-0.05f);
  dense.mutable_initializer()->set_max(0.05f);
  *dense.mutable_optimizer() = config_.dense_optimizer();
  tables.push_back(dense);
  return tables;
}

absl::Status Model::CheckBatch(const PreparedBatch& batch) const {
  const Batch& b = batch.batch;
  const size_t entries = b.num_entries();
  if (b.size == 0 && entries == 0) return absl::OkStatus();  // an empty batch: nothing to compute
  if (b.fields != fields_ || (dense_dim_ > 0 && b.dense_dim != dense_dim_)) {
    return absl::InvalidArgumentError(absl::StrCat("batch has ", b.fields, " fields and ", b.dense_dim,
                                                   " dense inputs; the model expects ", fields_, " and ", dense_dim_));
  }
  const size_t examples = static_cast<size_t>(b.size);
  const size_t bags = static_cast<size_t>(b.num_bags());
  std::string problem;
  if (b.values.size() != entries) {
    problem = absl::StrCat(entries, " keys but ", b.values.size(), " values");
  } else if (b.single_valued() ? entries != bags
                               : b.bag_offsets.size() != bags + 1 || b.bag_offsets.front() != 0 ||
                                     b.bag_offsets.back() != entries) {
    problem = absl::StrCat(entries, " entries in ", bags, " bags, with ", b.bag_offsets.size(), " bag offsets");
  } else if (b.labels.size() != examples || (!b.weights.empty() && b.weights.size() != examples) ||
             (dense_dim_ > 0 && b.dense.size() != examples * dense_dim_)) {
    problem = absl::StrCat(examples, " examples but ", b.labels.size(), " labels, ", b.weights.size(),
                           " weights and ", b.dense.size(), " dense inputs");
  } else if (batch.keys.inverse().size() != entries || batch.positions.size() != entries ||
             batch.offsets.size() != batch.keys.num_unique() + 1 ||
             batch.entry_bags.size() != (b.single_valued() ? 0 : entries)) {
    problem = "its keys, segments or entry bags are not the batch's (PreparedBatch::Prepare was not run on it)";
  }
  if (problem.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("inconsistent batch: ", problem));
}

absl::StatusOr<double> Model::Step(const PreparedBatch& batch, const ModelParams& params, ModelGrads* grads,
                                   float* probabilities) {
  const Batch& b = batch.batch;
  KESTREL_RETURN_IF_ERROR(CheckBatch(batch));
  if (b.size == 0) {  // no examples: no sparse rows, and the dense gradient is zero
    if (grads != nullptr) std::fill(grads->dense, grads->dense + dense_size_, 0.0f);
    return 0.0;
  }
  const bool has_keys = batch.keys.num_unique() > 0;
  if (params.dense == nullptr ||
      (has_keys && (params.wide == nullptr || (has_embedding() && params.embedding == nullptr)))) {
    return absl::InvalidArgumentError("missing model parameters");
  }
  KESTREL_RETURN_IF_ERROR(Forward(batch, params, grads != nullptr));
  if (grads != nullptr) KESTREL_RETURN_IF_ERROR(Backward(batch, grads));
  Buffers& buf = *buffers_;
  buf.host_loss.resize(b.size);
  KESTREL_RETURN_IF_ERROR(backend_->CopyToHost(buf.host_loss.data(), buf.loss.data(), b.size * sizeof(float)));
  if (probabilities != nullptr) {
    KESTREL_RETURN_IF_ERROR(backend_->CopyToHost(probabilities, buf.prob.data(), b.size * sizeof(float)));
  }
  KESTREL_RETURN_IF_ERROR(backend_->Synchronize());
  double total = 0;
  for (float l : buf.host_loss) total += l;
  return total;
}

absl::Status Model::Forward(const PreparedBatch& batch, const ModelParams& params, bool train) {
  const Batch& b = batch.batch;
  Buffers& buf = *buffers_;
  const int64_t n = b.size;
  const int64_t bags = b.num_bags();
  const int64_t entries = static_cast<int64_t>(b.num_entries());
  const int64_t unique = static_cast<int64_t>(batch.keys.num_unique());
  const bool jagged = !b.single_valued();
  const bool weighted = !b.weights.empty();
  Backend& be = *backend_;

  KESTREL_RETURN_IF_ERROR(buf.index.Reserve(entries));
  KESTREL_RETURN_IF_ERROR(buf.values.Reserve(entries));
  KESTREL_RETURN_IF_ERROR(buf.labels.Reserve(n));
  KESTREL_RETURN_IF_ERROR(buf.wide_rows.Reserve(unique));
  KESTREL_RETURN_IF_ERROR(buf.dense.Reserve(dense_size_));
  KESTREL_RETURN_IF_ERROR(buf.xw.Reserve(bags));
  KESTREL_RETURN_IF_ERROR(buf.wide_out.Reserve(n));
  KESTREL_RETURN_IF_ERROR(buf.prob.Reserve(n));
  KESTREL_RETURN_IF_ERROR(buf.loss.Reserve(n));
  KESTREL_RETURN_IF_ERROR(buf.dlogit.Reserve(n));
  KESTREL_RETURN_IF_ERROR(be.CopyToDevice(buf.index.data(), batch.keys.inverse().data(), entries * sizeof(uint32_t)));
  KESTREL_RETURN_IF_ERROR(be.CopyToDevice(buf.values.data(), b.values.data(), entries * sizeof(float)));
  KESTREL_RETURN_IF_ERROR(be.CopyToDevice(buf.labels.data(), b.labels.data(), n * sizeof(float)));
  KESTREL_RETURN_IF_ERROR(be.CopyToDevice(buf.wide_rows.data(), params.wide, unique * sizeof(float)));
  KESTREL_RETURN_IF_ERROR(be.CopyToDevice(buf.dense.data(), params.dense, dense_size_ * sizeof(float)));
  if (jagged) {
    KESTREL_RETURN_IF_ERROR(buf.bag_offsets.Reserve(bags + 1));
    KESTREL_RETURN_IF_ERROR(
        be.CopyToDevice(buf.bag_offsets.data(), b.bag_offsets.data(), (bags + 1) * sizeof(uint32_t)));
  }
  if (weighted) {
    KESTREL_RETURN_IF_ERROR(buf.weights.Reserve(n));
    KESTREL_RETURN_IF_ERROR(be.CopyToDevice(buf.weights.data(), b.weights.data(), n * sizeof(float)));
  }
  if (train) {
    KESTREL_RETURN_IF_ERROR(buf.offsets.Reserve(unique + 1));
    KESTREL_RETURN_IF_ERROR(buf.positions.Reserve(entries));
    KESTREL_RETURN_IF_ERROR(
        be.CopyToDevice(buf.offsets.data(), batch.offsets.data(), (unique + 1) * sizeof(uint32_t)));
    KESTREL_RETURN_IF_ERROR(
        be.CopyToDevice(buf.positions.data(), batch.positions.data(), entries * sizeof(uint32_t)));
    if (jagged) {
      KESTREL_RETURN_IF_ERROR(buf.entry_bags.Reserve(entries));
      KESTREL_RETURN_IF_ERROR(
          be.CopyToDevice(buf.entry_bags.data(), batch.entry_bags.data(), entries * sizeof(uint32_t)));
    }
  }
  const uint32_t* bag_offsets = jagged ? buf.bag_offsets.data() : nullptr;

  // Wide part: each bag's weights pooled, then summed over the fields.
  KESTREL_RETURN_IF_ERROR(be.Pool(buf.wide_rows.data(), 1, buf.index.data(), buf.values.data(), bag_offsets, bags,
                                  buf.xw.data()));
  KESTREL_RETURN_IF_ERROR(be.FieldSum(buf.xw.data(), n, fields_, 1, buf.wide_out.data()));

  if (has_embedding()) {
    KESTREL_RETURN_IF_ERROR(buf.emb_rows.Reserve(unique * dim_));
    KESTREL_RETURN_IF_ERROR(buf.x.Reserve(bags * dim_));
    KESTREL_RETURN_IF_ERROR(be.CopyToDevice(buf.emb_rows.data(), params.embedding, unique * dim_ * sizeof(float)));
    KESTREL_RETURN_IF_ERROR(be.Pool(buf.emb_rows.data(), dim_, buf.index.data(), buf.values.data(), bag_offsets,
                                    bags, buf.x.data()));
  }
  if (fm_) {
    KESTREL_RETURN_IF_ERROR(buf.sum.Reserve(n * dim_));
    KESTREL_RETURN_IF_ERROR(buf.fm_out.Reserve(n));
    KESTREL_RETURN_IF_ERROR(be.FieldSum(buf.x.data(), n, fields_, dim_, buf.sum.data()));
    KESTREL_RETURN_IF_ERROR(be.FmForward(buf.x.data(), buf.sum.data(), n, fields_, dim_, buf.fm_out.data()));
  }
  const float* deep_out = nullptr;
  if (dlrm_) {
    KESTREL_RETURN_IF_ERROR(DlrmForward(b, &deep_out));
  } else if (deep_) {
    // The MLP reads the embeddings and the dense inputs where they are: its input is [x | dense inputs].
    if (dense_dim_ > 0) {
      KESTREL_RETURN_IF_ERROR(buf.dense_in.Reserve(n * dense_dim_));
      KESTREL_RETURN_IF_ERROR(be.CopyToDevice(buf.dense_in.data(), b.dense.data(), n * dense_dim_ * sizeof(float)));
    }
    KESTREL_RETURN_IF_ERROR(MlpForward(top_, DeepInput(), n, &deep_out));
  }
  return be.LogitLoss(buf.dense.data(), buf.wide_out.data(), fm_ ? buf.fm_out.data() : nullptr, deep_out,
                      buf.labels.data(), weighted ? buf.weights.data() : nullptr, n, /*scale=*/1.0f,
                      buf.prob.data(), buf.loss.data(), train ? buf.dlogit.data() : nullptr);
}

absl::Status Model::Backward(const PreparedBatch& batch, ModelGrads* grads) {
  const Batch& b = batch.batch;
  Buffers& buf = *buffers_;
  Backend& be = *backend_;
  const int64_t n = b.size;
  const int64_t bags = b.num_bags();
  const int64_t unique = static_cast<int64_t>(batch.keys.num_unique());
  const uint32_t* entry_bags = b.single_valued() ? nullptr : buf.entry_bags.data();
  KESTREL_RETURN_IF_ERROR(buf.grad_wide.Reserve(unique));
  KESTREL_RETURN_IF_ERROR(buf.grad_dense.Reserve(dense_size_));

  // Bias and wide weights: every entry of example n receives dL/dlogit[n] (weighted) times its value.
  KESTREL_RETURN_IF_ERROR(be.ColumnSum(buf.dlogit.data(), n, 1, buf.grad_dense.data()));
  KESTREL_RETURN_IF_ERROR(be.SegmentSum(buf.dlogit.data(), buf.values.data(), buf.offsets.data(),
                                        buf.positions.data(), entry_bags, 1, fields_, unique,
                                        buf.grad_wide.data()));
  KESTREL_RETURN_IF_ERROR(be.CopyToHost(grads->wide, buf.grad_wide.data(), unique * sizeof(float)));

  if (has_embedding()) {
    KESTREL_RETURN_IF_ERROR(buf.dx.Reserve(bags * dim_));
    KESTREL_RETURN_IF_ERROR(buf.grad_emb.Reserve(unique * dim_));
    if (fm_) {
      KESTREL_RETURN_IF_ERROR(
          be.FmBackward(buf.x.data(), buf.sum.data(), buf.dlogit.data(), n, fields_, dim_, buf.dx.data()));
    } else {
      KESTREL_RETURN_IF_ERROR(be.Zero(buf.dx.data(), bags * dim_ * sizeof(float)));
    }
    if (dlrm_) {
      KESTREL_RETURN_IF_ERROR(DlrmBackward(n));
    } else if (deep_) {
      // dL/d(MLP input): its embedding columns add to the FM gradient (zeros without FM).
      KESTREL_RETURN_IF_ERROR(MlpBackward(top_, DeepInput(), buf.dlogit.data(), n, nullptr, buf.dx.data()));
    }
    // dx is per bag: each entry of a bag receives its gradient times the entry's value.
    KESTREL_RETURN_IF_ERROR(be.SegmentSum(buf.dx.data(), buf.values.data(), buf.offsets.data(), buf.positions.data(),
                                          entry_bags, dim_, 1, unique, buf.grad_emb.data()));
    KESTREL_RETURN_IF_ERROR(be.CopyToHost(grads->embedding, buf.grad_emb.data(), unique * dim_ * sizeof(float)));
  }
  KESTREL_RETURN_IF_ERROR(be.CopyToHost(grads->dense, buf.grad_dense.data(), dense_size_ * sizeof(float)));
  KESTREL_RETURN_IF_ERROR(be.Synchronize());
  // The dense tensor is shared by every example: it takes the batch mean over examples (the sparse rows keep
  // the sum; example weights are already in dlogit).
  const float mean = 1.0f / static_cast<float>(n);
  for (int64_t i = 0; i < dense_size_; ++i) grads->dense[i] *= mean;
  return absl::OkStatus();
}

absl::Status Model::DlrmForward(const Batch& b, const float** deep_out) {
  Buffers& buf = *buffers_;
  Backend& be = *backend_;
  const int64_t n = b.size;
  const int emb_width = fields_ * dim_;
  const int m = vectors_;
  const int pairs = m * (m - 1) / 2;
  const int lead = bottom_ ? dim_ : 0;  // the bottom vector's columns ahead of the dots in the top input
  const float* vectors = buf.x.data();   // without dense inputs the field embeddings interact alone
  const float* bottom = nullptr;
  if (bottom_) {
    KESTREL_RETURN_IF_ERROR(buf.dense_in.Reserve(n * dense_dim_));
    KESTREL_RETURN_IF_ERROR(be.CopyToDevice(buf.dense_in.data(), b.dense.data(), n * dense_dim_ * sizeof(float)));
    KESTREL_RETURN_IF_ERROR(MlpForward(bottom_mlp_, {buf.dense_in.data()}, n, &bottom));
    KESTREL_RETURN_IF_ERROR(buf.vectors.Reserve(n * m * dim_));
    KESTREL_RETURN_IF_ERROR(be.CopyBlock(bottom, dim_, buf.vectors.data(), m * dim_, n, dim_, false));
    KESTREL_RETURN_IF_ERROR(
        be.CopyBlock(buf.x.data(), emb_width, buf.vectors.data() + dim_, m * dim_, n, emb_width, false));
    vectors = buf.vectors.data();
  }
  KESTREL_RETURN_IF_ERROR(buf.pairs.Reserve(n * pairs));
  KESTREL_RETURN_IF_ERROR(be.DotInteraction(vectors, n, m, dim_, buf.pairs.data()));
  const int width = lead + pairs;
  KESTREL_RETURN_IF_ERROR(buf.in0.Reserve(n * width));
  if (bottom_) KESTREL_RETURN_IF_ERROR(be.CopyBlock(bottom, dim_, buf.in0.data(), width, n, dim_, false));
  KESTREL_RETURN_IF_ERROR(be.CopyBlock(buf.pairs.data(), pairs, buf.in0.data() + lead, width, n, pairs, false));
  return MlpForward(top_, {buf.in0.data()}, n, deep_out);
}

absl::Status Model::DlrmBackward(int64_t n) {
  Buffers& buf = *buffers_;
  Backend& be = *backend_;
  const int emb_width = fields_ * dim_;
  const int m = vectors_;
  const int pairs = m * (m - 1) / 2;
  const int lead = bottom_ ? dim_ : 0;
  const int width = lead + pairs;
  float* dinput = nullptr;
  KESTREL_RETURN_IF_ERROR(MlpBackward(top_, {buf.in0.data()}, buf.dlogit.data(), n, &dinput));
  KESTREL_RETURN_IF_ERROR(buf.dpairs.Reserve(n * pairs));
  KESTREL_RETURN_IF_ERROR(be.CopyBlock(dinput + lead, width, buf.dpairs.data(), pairs, n, pairs, false));
  KESTREL_RETURN_IF_ERROR(buf.dvectors.Reserve(n * m * dim_));
  const float* vectors = bottom_ ? buf.vectors.data() : buf.x.data();
  KESTREL_RETURN_IF_ERROR(be.DotInteractionBackward(vectors, buf.dpairs.data(), n, m, dim_, buf.dvectors.data()));
  // The field embeddings' share goes to the embedding gradient (dx holds the FM part: zeros in DLRM).
  KESTREL_RETURN_IF_ERROR(be.CopyBlock(buf.dvectors.data() + lead, m * dim_, buf.dx.data(), emb_width, n, emb_width,
                                       /*accumulate=*/true));
  if (!bottom_) return absl::OkStatus();
  // The bottom vector feeds the top MLP directly and through its dots.
  KESTREL_RETURN_IF_ERROR(buf.dbottom.Reserve(n * dim_));
  KESTREL_RETURN_IF_ERROR(be.CopyBlock(dinput, width, buf.dbottom.data(), dim_, n, dim_, false));
  KESTREL_RETURN_IF_ERROR(
      be.CopyBlock(buf.dvectors.data(), m * dim_, buf.dbottom.data(), dim_, n, dim_, /*accumulate=*/true));
  return MlpBackward(bottom_mlp_, {buf.dense_in.data()}, buf.dbottom.data(), n, nullptr);
}

}  // namespace kestrel
