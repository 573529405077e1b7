#include "worker/model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace kestrel {

// Device arrays, reused across steps (they only grow).
struct Model::Buffers {
  explicit Buffers(Backend* b)
      : index(b), values(b), labels(b), dense_in(b), offsets(b), positions(b), wide_rows(b), emb_rows(b),
        dense(b), xw(b), wide_out(b), x(b), sum(b), fm_out(b), in0(b), prob(b), loss(b), dlogit(b), dx(b),
        grad_wide(b), grad_emb(b), grad_dense(b), back_a(b), back_b(b) {}
  DeviceArray<uint32_t> index;
  DeviceArray<float> values, labels, dense_in;
  DeviceArray<uint32_t> offsets, positions;
  DeviceArray<float> wide_rows, emb_rows, dense;
  DeviceArray<float> xw, wide_out, x, sum, fm_out, in0;
  std::vector<std::unique_ptr<DeviceArray<float>>> hidden;  // one activation per layer
  DeviceArray<float> prob, loss, dlogit, dx, grad_wide, grad_emb, grad_dense;
  DeviceArray<float> back_a, back_b;  // ping-pong gradients of layer inputs
  std::vector<float> host_loss;
};

ModelConfig WithDefaults(ModelConfig config) {
  if (config.embedding_dim() == 0) config.set_embedding_dim(8);
  if (config.hidden_size() == 0) {
    config.add_hidden(64);
    config.add_hidden(32);
  }
  if (!config.has_wide_optimizer()) {
    config.mutable_wide_optimizer()->set_type(OptimizerConfig::FTRL);
    config.mutable_wide_optimizer()->set_learning_rate(0.05f);
    config.mutable_wide_optimizer()->set_ftrl_beta(1.0f);
  }
  if (!config.has_embedding_optimizer()) {
    config.mutable_embedding_optimizer()->set_type(OptimizerConfig::ADAGRAD);
    config.mutable_embedding_optimizer()->set_learning_rate(0.05f);
    config.mutable_embedding_optimizer()->set_initial_accumulator(0.1f);
  }
  if (!config.has_dense_optimizer()) {
    config.mutable_dense_optimizer()->set_type(OptimizerConfig::ADAM);
    config.mutable_dense_optimizer()->set_learning_rate(0.001f);
  }
  if (!config.has_embedding_initializer()) {
    config.mutable_embedding_initializer()->set_type(InitializerConfig::NORMAL);
    config.mutable_embedding_initializer()->set_stddev(0.01f);
  }
  if (config.seed() == 0) config.set_seed(1);
  return config;
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const ModelConfig& config, int fields, int dense_dim,
                                                     Backend* backend) {
  const ModelConfig c = WithDefaults(config);
  if (fields < 1 || dense_dim < 0) {
    return absl::InvalidArgumentError(absl::StrCat("a model needs >= 1 feature slots, got ", fields));
  }
  if (c.embedding_dim() < 1 || c.embedding_dim() > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("model.embedding_dim must be in [1, 1024], got ", c.embedding_dim()));
  }
  for (int h : c.hidden()) {
    if (h < 1 || h > 4096) return absl::InvalidArgumentError(absl::StrCat("model.hidden widths must be in [1, 4096], got ", h));
  }
  return std::unique_ptr<Model>(new Model(c, fields, dense_dim, backend));
}

Model::Model(const ModelConfig& config, int fields, int dense_dim, Backend* backend)
    : config_(config), backend_(backend), fields_(fields), dense_dim_(dense_dim),
      buffers_(std::make_unique<Buffers>(backend)) {
  const ModelConfig::Type type = config.type();
  fm_ = type == ModelConfig::FM || type == ModelConfig::DEEPFM;
  deep_ = type == ModelConfig::DEEPFM || type == ModelConfig::WIDE_AND_DEEP;
  if (fm_ || deep_) dim_ = config.embedding_dim();
  if (!deep_) dense_dim_ = 0;
  if (deep_) {
    int inputs = fields_ * dim_ + dense_dim_;
    std::vector<int> widths(config.hidden().begin(), config.hidden().end());
    widths.push_back(1);
    for (int outputs : widths) {
      Layer layer;
      layer.inputs = inputs;
      layer.outputs = outputs;
      layer.weight_offset = dense_size_;
      dense_size_ += int64_t{inputs} * outputs;
      layer.bias_offset = dense_size_;
      dense_size_ += outputs;
      layers_.push_back(layer);
      buffers_->hidden.push_back(std::make_unique<DeviceArray<float>>(backend));
      inputs = outputs;
    }
  }
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
  tables.push_back(wide);
  if (has_embedding()) {
    TableConfig emb;
    emb.set_name(kEmbeddingTable);
    emb.set_kind(TableConfig::SPARSE);
    emb.set_dim(dim_);
    emb.set_seed(config_.seed() + 1);
    *emb.mutable_initializer() = config_.embedding_initializer();
    *emb.mutable_optimizer() = config_.embedding_optimizer();
    tables.push_back(emb);
  }
  TableConfig dense;
  dense.set_name(kDenseTable);
  dense.set_kind(TableConfig::DENSE);
  dense.set_dim(static_cast<int>(std::min<int64_t>(dense_size_, 1024)));
  dense.set_dense_size(dense_size_);
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

absl::StatusOr<double> Model::Step(const PreparedBatch& batch, const ModelParams& params, ModelGrads* grads,
                                   float* probabilities) {
  const Batch& b = batch.batch;
  if (b.fields != fields_ || (dense_dim_ > 0 && b.dense_dim != dense_dim_)) {
    return absl::InvalidArgumentError(absl::StrCat("batch has ", b.fields, " slots and ", b.dense_dim,
                                                   " dense inputs; the model expects ", fields_, " and ", dense_dim_));
  }
  if (params.wide == nullptr || params.dense == nullptr || (has_embedding() && params.embedding == nullptr)) {
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
  const int64_t positions = n * fields_;
  const int64_t unique = static_cast<int64_t>(batch.keys.num_unique());
  Backend& be = *backend_;

  KESTREL_RETURN_IF_ERROR(buf.index.Reserve(positions));
  KESTREL_RETURN_IF_ERROR(buf.values.Reserve(positions));
  KESTREL_RETURN_IF_ERROR(buf.labels.Reserve(n));
  KESTREL_RETURN_IF_ERROR(buf.wide_rows.Reserve(unique));
  KESTREL_RETURN_IF_ERROR(buf.dense.Reserve(dense_size_));
  KESTREL_RETURN_IF_ERROR(buf.xw.Reserve(positions));
  KESTREL_RETURN_IF_ERROR(buf.wide_out.Reserve(n));
  KESTREL_RETURN_IF_ERROR(buf.prob.Reserve(n));
  KESTREL_RETURN_IF_ERROR(buf.loss.Reserve(n));
  KESTREL_RETURN_IF_ERROR(buf.dlogit.Reserve(n));
  KESTREL_RETURN_IF_ERROR(be.CopyToDevice(buf.index.data(), batch.keys.inverse().data(), positions * sizeof(uint32_t)));
  KESTREL_RETURN_IF_ERROR(be.CopyToDevice(buf.values.data(), b.values.data(), positions * sizeof(float)));
  KESTREL_RETURN_IF_ERROR(be.CopyToDevice(buf.labels.data(), b.labels.data(), n * sizeof(float)));
  KESTREL_RETURN_IF_ERROR(be.CopyToDevice(buf.wide_rows.data(), params.wide, unique * sizeof(float)));
  KESTREL_RETURN_IF_ERROR(be.CopyToDevice(buf.dense.data(), params.dense, dense_size_ * sizeof(float)));
  if (train) {
    KESTREL_RETURN_IF_ERROR(buf.offsets.Reserve(unique + 1));
    KESTREL_RETURN_IF_ERROR(buf.positions.Reserve(positions));
    KESTREL_RETURN_IF_ERROR(
        be.CopyToDevice(buf.offsets.data(), batch.offsets.data(), (unique + 1) * sizeof(uint32_t)));
    KESTREL_RETURN_IF_ERROR(
        be.CopyToDevice(buf.positions.data(), batch.positions.data(), positions * sizeof(uint32_t)));
  }

  // Wide part: one weight per slot, pooled.
  KESTREL_RETURN_IF_ERROR(be.Gather(buf.wide_rows.data(), 1, buf.index.data(), buf.values.data(), positions,
                                    buf.xw.data()));
  KESTREL_RETURN_IF_ERROR(be.FieldSum(buf.xw.data(), n, fields_, 1, buf.wide_out.data()));

  if (has_embedding()) {
    KESTREL_RETURN_IF_ERROR(buf.emb_rows.Reserve(unique * dim_));
    KESTREL_RETURN_IF_ERROR(buf.x.Reserve(positions * dim_));
    KESTREL_RETURN_IF_ERROR(be.CopyToDevice(buf.emb_rows.data(), params.embedding, unique * dim_ * sizeof(float)));
    KESTREL_RETURN_IF_ERROR(be.Gather(buf.emb_rows.data(), dim_, buf.index.data(), buf.values.data(), positions,
                                      buf.x.data()));
  }
  if (fm_) {
    KESTREL_RETURN_IF_ERROR(buf.sum.Reserve(n * dim_));
    KESTREL_RETURN_IF_ERROR(buf.fm_out.Reserve(n));
    KESTREL_RETURN_IF_ERROR(be.FieldSum(buf.x.data(), n, fields_, dim_, buf.sum.data()));
    KESTREL_RETURN_IF_ERROR(be.FmForward(buf.x.data(), buf.sum.data(), n, fields_, dim_, buf.fm_out.data()));
  }
  const float* deep_out = nullptr;
  if (deep_) {
    const int emb_width = fields_ * dim_;
    const int width = emb_width + dense_dim_;
    KESTREL_RETURN_IF_ERROR(buf.in0.Reserve(n * width));
    KESTREL_RETURN_IF_ERROR(be.CopyBlock(buf.x.data(), emb_width, buf.in0.data(), width, n, emb_width, false));
    if (dense_dim_ > 0) {
      KESTREL_RETURN_IF_ERROR(buf.dense_in.Reserve(n * dense_dim_));
      KESTREL_RETURN_IF_ERROR(be.CopyToDevice(buf.dense_in.data(), b.dense.data(), n * dense_dim_ * sizeof(float)));
      KESTREL_RETURN_IF_ERROR(be.CopyBlock(buf.dense_in.data(), dense_dim_, buf.in0.data() + emb_width, width, n,
                                           dense_dim_, false));
    }
    const float* input = buf.in0.data();
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Layer& layer = layers_[l];
      DeviceArray<float>& out = *buf.hidden[l];
      KESTREL_RETURN_IF_ERROR(out.Reserve(n * layer.outputs));
      KESTREL_RETURN_IF_ERROR(be.Gemm(false, false, static_cast<int>(n), layer.outputs, layer.inputs, 1.0f, input,
                                      buf.dense.data() + layer.weight_offset, 0.0f, out.data()));
      KESTREL_RETURN_IF_ERROR(be.BiasActivation(out.data(), buf.dense.data() + layer.bias_offset, n, layer.outputs,
                                                /*relu=*/l + 1 < layers_.size()));
      input = out.data();
    }
    deep_out = input;
  }
  return be.LogitLoss(buf.dense.data(), buf.wide_out.data(), fm_ ? buf.fm_out.data() : nullptr, deep_out,
                      buf.labels.data(), n, /*scale=*/1.0f, buf.prob.data(), buf.loss.data(),
                      train ? buf.dlogit.data() : nullptr);
}

absl::Status Model::Backward(const PreparedBatch& batch, ModelGrads* grads) {
  const Batch& b = batch.batch;
  Buffers& buf = *buffers_;
  Backend& be = *backend_;
  const int64_t n = b.size;
  const int64_t positions = n * fields_;
  const int64_t unique = static_cast<int64_t>(batch.keys.num_unique());
  KESTREL_RETURN_IF_ERROR(buf.grad_wide.Reserve(unique));
  KESTREL_RETURN_IF_ERROR(buf.grad_dense.Reserve(dense_size_));

  // Bias and wide weights: every slot of example n receives dL/dlogit[n] times its value.
  KESTREL_RETURN_IF_ERROR(be.ColumnSum(buf.dlogit.data(), n, 1, buf.grad_dense.data()));
  KESTREL_RETURN_IF_ERROR(be.SegmentSum(buf.dlogit.data(), buf.values.data(), buf.offsets.data(),
                                        buf.positions.data(), 1, fields_, unique, buf.grad_wide.data()));
  KESTREL_RETURN_IF_ERROR(be.CopyToHost(grads->wide, buf.grad_wide.data(), unique * sizeof(float)));

  if (has_embedding()) {
    KESTREL_RETURN_IF_ERROR(buf.dx.Reserve(positions * dim_));
    KESTREL_RETURN_IF_ERROR(buf.grad_emb.Reserve(unique * dim_));
    if (fm_) {
      KESTREL_RETURN_IF_ERROR(
          be.FmBackward(buf.x.data(), buf.sum.data(), buf.dlogit.data(), n, fields_, dim_, buf.dx.data()));
    } else {
      KESTREL_RETURN_IF_ERROR(be.Zero(buf.dx.data(), positions * dim_ * sizeof(float)));
    }
    if (deep_) {
      int max_width = 0;
      for (const Layer& layer : layers_) max_width = std::max(max_width, layer.inputs);
      KESTREL_RETURN_IF_ERROR(buf.back_a.Reserve(n * max_width));
      KESTREL_RETURN_IF_ERROR(buf.back_b.Reserve(n * max_width));
      float* dout = buf.dlogit.data();  // dL/d(output of layer l)
      float* spare[2] = {buf.back_a.data(), buf.back_b.data()};
      for (int l = static_cast<int>(layers_.size()) - 1; l >= 0; --l) {
        const Layer& layer = layers_[l];
        const float* out = buf.hidden[l]->data();
        if (l + 1 < static_cast<int>(layers_.size())) {
          KESTREL_RETURN_IF_ERROR(be.ReluBackward(out, dout, n * layer.outputs));
        }
        const float* input = l == 0 ? buf.in0.data() : buf.hidden[l - 1]->data();
        // dW = input^T dout, db = column sums of dout, dinput = dout W^T.
        KESTREL_RETURN_IF_ERROR(be.Gemm(true, false, layer.inputs, layer.outputs, static_cast<int>(n), 1.0f, input,
                                        dout, 0.0f, buf.grad_dense.data() + layer.weight_offset));
        KESTREL_RETURN_IF_ERROR(be.ColumnSum(dout, n, layer.outputs, buf.grad_dense.data() + layer.bias_offset));
        float* dinput = spare[l % 2];
        KESTREL_RETURN_IF_ERROR(be.Gemm(false, true, static_cast<int>(n), layer.inputs, layer.outputs, 1.0f, dout,
                                        buf.dense.data() + layer.weight_offset, 0.0f, dinput));
        dout = dinput;
      }
      // dout is now dL/d(MLP input); its embedding columns add to the FM gradient.
      const int emb_width = fields_ * dim_;
      KESTREL_RETURN_IF_ERROR(
          be.CopyBlock(dout, emb_width + dense_dim_, buf.dx.data(), emb_width, n, emb_width, /*accumulate=*/true));
    }
    KESTREL_RETURN_IF_ERROR(be.SegmentSum(buf.dx.data(), buf.values.data(), buf.offsets.data(), buf.positions.data(),
                                          dim_, 1, unique, buf.grad_emb.data()));
    KESTREL_RETURN_IF_ERROR(be.CopyToHost(grads->embedding, buf.grad_emb.data(), unique * dim_ * sizeof(float)));
  }
  KESTREL_RETURN_IF_ERROR(be.CopyToHost(grads->dense, buf.grad_dense.data(), dense_size_ * sizeof(float)));
  KESTREL_RETURN_IF_ERROR(be.Synchronize());
  // The dense tensor is shared by every example: it takes the batch mean (the sparse rows keep the sum).
  const float mean = 1.0f / static_cast<float>(n);
  for (int64_t i = 0; i < dense_size_; ++i) grads->dense[i] *= mean;
  return absl::OkStatus();
}

}  // namespace kestrel
