// cuda_step_bench: the CUDA backend's training-step time against the CPU backend (same model, same batch,
// ratio measured in one run), and the pool / segment-sum kernels' effective bandwidth (one entry per bag, as in
// Criteo). Runs on a GPU machine from the GPU bundle (scripts/gpu_bundle.sh //bench:cuda_step_bench, then
// scripts/gpu_check.sh); without a GPU it says so and exits 0. Prints a markdown report on stdout (gpu_check.sh
// saves it).
//
// Each configuration of --configs (embedding dim / MLP widths / batch) is one row: the demo size and the sizes
// users run (dim 16-64, MLP 256-128 and 1024-512-256, batch 4096-16384). The CPU backend uses every core here.
//
//   cuda_step_bench [--model=DEEPFM] [--configs="8/64,32/4096;16/256,128/4096;..."] [--steps=50] [--runs=3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/cuda_device.h"
#include "worker/compute/cpu_backend.h"
#include "worker/data/preset_examples.h"
#include "worker/compute/cuda_backend.h"
#include "worker/model.h"
#include "worker/synthetic_batch.h"

ABSL_FLAG(std::string, model, "DEEPFM", "Model type (proto/job.proto ModelConfig.Type).");
ABSL_FLAG(std::string, configs,
          "8/64,32/4096;16/256,128/4096;16/256,128/16384;64/1024,512,256/4096;64/1024,512,256/16384",
          "Semicolon-separated embedding_dim/hidden widths/batch configurations, one report row each.");
ABSL_FLAG(std::string, gemm_precision, "GEMM_FP32",
          "model.gemm_precision (proto/job.proto ModelConfig.GemmPrecision): GEMM_FP32 or GEMM_TF32.");
ABSL_FLAG(int, steps, 50, "Timed steps per run (after 3 warm-up steps).");
ABSL_FLAG(int, runs, 3, "Runs; medians are reported.");

namespace kestrel {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per training step (host parameters in, host gradients out) of `model` on `batch`.
double StepSeconds(Model& model, const PreparedBatch& batch, const std::vector<float>& wide,
                   const std::vector<float>& emb, const std::vector<float>& dense, int steps) {
  std::vector<float> gw(wide.size()), ge(emb.size()), gd(dense.size());
  ModelGrads grads{gw.data(), ge.data(), gd.data()};
  for (int i = 0; i < 3; ++i) (void)model.Step(batch, {wide.data(), emb.data(), dense.data()}, &grads, nullptr);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) (void)model.Step(batch, {wide.data(), emb.data(), dense.data()}, &grads, nullptr);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps;
}

// Seconds per call of `op` on a backend (synchronized).
template <typename Op>
double OpSeconds(Backend& backend, int calls, Op op) {
  op();
  (void)backend.Synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) op();
  (void)backend.Synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / calls;
}

// Measures one configuration and prints its report row. False when device buffers cannot be allocated.
bool MeasureRow(const ModelConfig& config, int batch_size, Backend& cpu, Backend& be) {
  const PreparedBatch batch = SyntheticCriteoBatch(batch_size, 1e5);
  auto cpu_model = *Model::Create(config, kCriteoFields, kCriteoIntegerFields, &cpu);
  auto cuda_model = *Model::Create(config, kCriteoFields, kCriteoIntegerFields, &be);
  const size_t unique = batch.keys.num_unique();
  const int dim = cpu_model->embedding_dim();
  std::vector<float> wide(unique, 0.01f), emb(unique * dim, 0.01f), dense(cpu_model->dense_size(), 0.01f);

  std::vector<double> cpu_s, cuda_s, ratio, pool_gbs, segment_gbs;
  const int64_t positions = int64_t{batch_size} * kCriteoFields;
  DeviceArray<float> rows(&be), x(&be), values(&be), out(&be);
  DeviceArray<uint32_t> index(&be), offsets(&be), seg_positions(&be);
  if (!rows.Reserve(unique * dim).ok() || !x.Reserve(positions * dim).ok() || !values.Reserve(positions).ok() ||
      !out.Reserve(unique * dim).ok() || !index.Reserve(positions).ok() || !offsets.Reserve(unique + 1).ok() ||
      !seg_positions.Reserve(positions).ok()) {
    std::fprintf(stderr, "cannot allocate device buffers\n");
    return false;
  }
  (void)be.CopyToDevice(rows.data(), emb.data(), unique * dim * sizeof(float));
  (void)be.CopyToDevice(values.data(), batch.batch.values.data(), positions * sizeof(float));
  (void)be.CopyToDevice(index.data(), batch.keys.inverse().data(), positions * sizeof(uint32_t));
  (void)be.CopyToDevice(offsets.data(), batch.offsets.data(), (unique + 1) * sizeof(uint32_t));
  (void)be.CopyToDevice(seg_positions.data(), batch.positions.data(), positions * sizeof(uint32_t));
  // Bytes each kernel moves: the pool reads a row element + writes an output element per output (plus index and
  // value per position); the segment sum reads each position's gradient row once and writes the unique rows.
  const double pool_bytes = positions * (dim * 8.0 + 8.0);
  const double segment_bytes = positions * (dim * 4.0 + 8.0) + unique * dim * 4.0;
  // The CPU runs a tenth of the steps (at least 1): its step is up to seconds long at the largest sizes.
  for (int r = 0; r < absl::GetFlag(FLAGS_runs); ++r) {
    const double c = StepSeconds(*cpu_model, batch, wide, emb, dense, std::max(1, absl::GetFlag(FLAGS_steps) / 10));
    const double g = StepSeconds(*cuda_model, batch, wide, emb, dense, absl::GetFlag(FLAGS_steps));
    cpu_s.push_back(c);
    cuda_s.push_back(g);
    ratio.push_back(c / g);
    const double tg = OpSeconds(be, 200, [&] {
      (void)be.Pool(rows.data(), dim, index.data(), values.data(), /*bag_offsets=*/nullptr, positions, x.data());
    });
    const double ts = OpSeconds(be, 200, [&] {
      (void)be.SegmentSum(x.data(), values.data(), offsets.data(), seg_positions.data(), /*entry_bags=*/nullptr, dim,
                          1, unique, out.data());
    });
    pool_gbs.push_back(pool_bytes / tg / 1e9);
    segment_gbs.push_back(segment_bytes / ts / 1e9);
  }
  std::string widths;
  for (int h : config.hidden()) absl::StrAppend(&widths, widths.empty() ? "" : "-", h);
  std::printf("| %d | %s | %d | %zu | %.2f ms | %.3f ms | %.1fx | %.0f | %.0f | %.0f |\n", dim, widths.c_str(),
              batch_size, unique, Median(cpu_s) * 1e3, Median(cuda_s) * 1e3, Median(ratio),
              batch_size / Median(cuda_s), Median(pool_gbs), Median(segment_gbs));
  std::fflush(stdout);
  return true;
}

int Main() {
  if (CudaDeviceCount() == 0) {
    std::printf("cuda_step_bench: no GPU here (%s); nothing measured\n", DescribeCudaDevices().c_str());
    return 0;
  }
  absl::StatusOr<std::unique_ptr<Backend>> cuda = NewCudaBackend(0);
  if (!cuda.ok()) {
    std::printf("cuda_step_bench: no CUDA backend (%s)\n", cuda.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<Backend> cpu = NewCpuBackend();
  ModelConfig::Type type;
  if (!ModelConfig::Type_Parse(absl::GetFlag(FLAGS_model), &type)) {
    std::fprintf(stderr, "unknown --model\n");
    return 2;
  }
  ModelConfig::GemmPrecision precision;
  if (!ModelConfig::GemmPrecision_Parse(absl::GetFlag(FLAGS_gemm_precision), &precision)) {
    std::fprintf(stderr, "unknown --gemm_precision\n");
    return 2;
  }
  std::printf("# Kestrel cuda_step_bench\n\n%s\n\n", DescribeCudaDevices().c_str());
  std::printf("Model %s, %d fields, %s, CPU backend on %s; medians of %d runs, ratios within each run.\n\n",
              absl::GetFlag(FLAGS_model).c_str(), kCriteoFields, absl::GetFlag(FLAGS_gemm_precision).c_str(),
              cpu->name().c_str(), absl::GetFlag(FLAGS_runs));
  std::printf("| dim | MLP | batch | unique keys | CPU step | CUDA step | CUDA / CPU speed-up | CUDA examples/s | "
              "Pool GB/s | SegmentSum GB/s |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (absl::string_view spec : absl::StrSplit(absl::GetFlag(FLAGS_configs), ';', absl::SkipEmpty())) {
    const std::vector<std::string> parts = absl::StrSplit(spec, '/');
    ModelConfig config;
    config.set_type(type);
    config.set_gemm_precision(precision);
    int dim = 0, batch_size = 0;
    bool ok = parts.size() == 3 && absl::SimpleAtoi(parts[0], &dim) && absl::SimpleAtoi(parts[2], &batch_size) &&
              dim > 0 && batch_size > 0;
    for (absl::string_view w : absl::StrSplit(parts.size() == 3 ? parts[1] : "", ',')) {
      int width = 0;
      ok = ok && absl::SimpleAtoi(w, &width) && width > 0;
      config.add_hidden(width);
    }
    if (!ok) {
      std::fprintf(stderr, "bad --configs entry '%s': expected dim/w1,w2,.../batch\n", std::string(spec).c_str());
      return 2;
    }
    config.set_embedding_dim(dim);
    if (!MeasureRow(config, batch_size, *cpu, **cuda)) return 1;
  }
  return 0;
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return kestrel::Main();
}
