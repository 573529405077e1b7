// gemm_bench: which GEMM library the CPU backend should use, measured at the shapes of one MLP training step
// in one run. The MLP is DeepFM's at the size users run (39 slots × embedding dim 16 + 13 dense inputs = 637
// inputs, hidden 256 and 128, one output) with a batch of 4096; per layer the step needs the forward product
// Y = X W, the weight gradient dW = X^T dY and the input gradient dX = dY W^T (row-major, single precision).
//
// Libraries: OpenBLAS (OpenMP build, cblas_sgemm), Eigen 3.4 (Map over the row-major buffers, OpenMP), oneDNN
// (dnnl_sgemm), and the CPU backend's hand-written reference loops; each at 1 and 2 threads. Per library and
// thread count: ms per full step (all 9 GEMMs, median of --reps), GFLOP/s, and whether the same inputs give the
// same output bits twice (bitwise repeatability, required for BSP).
//
//   bench/run_gemm_bench.sh   (writes bench/results/gemm_bench.md)
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <openblas-openmp/cblas.h>

#include "Eigen/Core"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "dnnl.h"
#include "worker/compute/cpu_backend.h"

ABSL_FLAG(int, batch, 4096, "Examples per step.");
ABSL_FLAG(std::string, widths, "637,256,128,1", "MLP widths, input first.");
ABSL_FLAG(int, reps, 7, "Timed steps per library and thread count (the median is reported).");
ABSL_FLAG(std::string, output, "bench/results/gemm_bench.md", "Markdown report ('' for none).");
ABSL_FLAG(std::string, git_commit, "", "Commit to record.");
ABSL_FLAG(std::string, invocation, "", "The command line that started the benchmark, to record.");

namespace kestrel {
namespace {

using bench::CommandMarkdown;
using bench::DescribeMachine;
using bench::LoadAverage;
using bench::Machine;
using bench::MachineMarkdown;
using bench::UserPath;
using bench::WriteFile;

// Row-major C[m, n] = op(A) op(B) with op(A) m x k and op(B) k x n, beta = 0.
using Gemm = std::function<void(bool ta, bool tb, int m, int n, int k, const float* a, const float* b, float* c)>;

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void EigenGemm(bool ta, bool tb, int m, int n, int k, const float* a, const float* b, float* c) {
  Eigen::Map<const RowMajor> A(a, ta ? k : m, ta ? m : k);
  Eigen::Map<const RowMajor> B(b, tb ? n : k, tb ? k : n);
  Eigen::Map<RowMajor> C(c, m, n);
  if (ta && tb) {
    C.noalias() = A.transpose() * B.transpose();
  } else if (ta) {
    C.noalias() = A.transpose() * B;
  } else if (tb) {
    C.noalias() = A * B.transpose();
  } else {
    C.noalias() = A * B;
  }
}

struct Layer {
  int in, out;
  std::vector<float> x, w, y, dy, dw, dx;
};

struct Result {
  std::string library;
  int threads;
  double ms;
  double gflops;
  bool repeatable;
};

int Run(int argc, char** argv) {
  std::vector<int> widths;
  for (absl::string_view w : absl::StrSplit(absl::GetFlag(FLAGS_widths), ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(w, &v) || v < 1) return 2;
    widths.push_back(v);
  }
  const int n = absl::GetFlag(FLAGS_batch);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  auto random = [&](size_t count) {
    std::vector<float> v(count);
    for (float& f : v) f = u(rng);
    return v;
  };
  std::vector<Layer> layers;
  double flops = 0;
  for (size_t l = 0; l + 1 < widths.size(); ++l) {
    Layer L;
    L.in = widths[l];
    L.out = widths[l + 1];
    L.x = random(size_t{1} * n * L.in);
    L.w = random(size_t{1} * L.in * L.out);
    L.dy = random(size_t{1} * n * L.out);
    L.y.resize(size_t{1} * n * L.out);
    L.dw.resize(size_t{1} * L.in * L.out);
    L.dx.resize(size_t{1} * n * L.in);
    flops += 3.0 * 2.0 * n * L.in * L.out;
    layers.push_back(std::move(L));
  }
  auto step = [&](const Gemm& gemm) {
    for (Layer& L : layers) {
      gemm(false, false, n, L.out, L.in, L.x.data(), L.w.data(), L.y.data());
      gemm(true, false, L.in, L.out, n, L.x.data(), L.dy.data(), L.dw.data());
      gemm(false, true, n, L.in, L.out, L.dy.data(), L.w.data(), L.dx.data());
    }
  };
  auto outputs = [&] {
    std::vector<float> all;
    for (const Layer& L : layers) {
      all.insert(all.end(), L.y.begin(), L.y.end());
      all.insert(all.end(), L.dw.begin(), L.dw.end());
      all.insert(all.end(), L.dx.begin(), L.dx.end());
    }
    return all;
  };

  std::unique_ptr<Backend> reference = NewReferenceCpuBackend();
  struct Library {
    std::string name;
    std::function<Gemm(int threads)> make;
  };
  const std::vector<Library> libraries = {
      {"OpenBLAS 0.3.21 (OpenMP build)",
       [](int threads) -> Gemm {
         return [threads](bool ta, bool tb, int m, int nn, int k, const float* a, const float* b, float* c) {
           omp_set_num_threads(threads);
           cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, nn, k,
                       1.0f, a, ta ? m : k, b, tb ? k : nn, 0.0f, c, nn);
         };
       }},
      {"Eigen 3.4 (OpenMP)",
       [](int threads) -> Gemm {
         return [threads](bool ta, bool tb, int m, int nn, int k, const float* a, const float* b, float* c) {
           Eigen::setNbThreads(threads);
           EigenGemm(ta, tb, m, nn, k, a, b, c);
         };
       }},
      {"oneDNN 2.6 (dnnl_sgemm)",
       [](int threads) -> Gemm {
         return [threads](bool ta, bool tb, int m, int nn, int k, const float* a, const float* b, float* c) {
           omp_set_num_threads(threads);
           dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, nn, k, 1.0f, a, ta ? m : k, b, tb ? k : nn, 0.0f, c, nn);
         };
       }},
      {"hand-written reference loops",
       [&reference](int) -> Gemm {
         return [&reference](bool ta, bool tb, int m, int nn, int k, const float* a, const float* b, float* c) {
           (void)reference->Gemm(ta, tb, m, nn, k, 1.0f, a, b, 0.0f, c);
         };
       }},
  };

  std::vector<Result> results;
  for (const Library& lib : libraries) {
    for (int threads : {1, 2}) {
      if (lib.name.rfind("hand-written", 0) == 0 && threads == 2) continue;  // single-threaded by design
      const Gemm gemm = lib.make(threads);
      step(gemm);  // warm-up (and the first output)
      const std::vector<float> first = outputs();
      std::vector<double> ms;
      const int reps = lib.name.rfind("hand-written", 0) == 0 ? 1 : absl::GetFlag(FLAGS_reps);
      for (int r = 0; r < reps; ++r) {
        const absl::Time t0 = absl::Now();
        step(gemm);
        ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
      }
      const std::vector<float> last = outputs();
      std::sort(ms.begin(), ms.end());
      const double median = ms[ms.size() / 2];
      Result res{lib.name, threads, median, flops / (median * 1e6),
                 std::memcmp(first.data(), last.data(), first.size() * sizeof(float)) == 0};
      std::printf("%-34s %d thread(s): %8.2f ms/step  %6.1f GFLOP/s  repeatable %s\n", res.library.c_str(),
                  res.threads, res.ms, res.gflops, res.repeatable ? "yes" : "NO");
      std::fflush(stdout);
      results.push_back(res);
    }
  }

  const std::string path = absl::GetFlag(FLAGS_output);
  if (path.empty()) return 0;
  // The OpenBLAS figure at 2 threads is the baseline of the ratios.
  double base = 0;
  for (const Result& r : results) {
    if (r.library.rfind("OpenBLAS", 0) == 0 && r.threads == 2) base = r.ms;
  }
  const Machine machine = DescribeMachine(argc, argv, absl::GetFlag(FLAGS_git_commit), absl::GetFlag(FLAGS_invocation));
  std::string md = absl::StrCat(
      "# GEMM libraries at the MLP's shapes\n\n", MachineMarkdown(machine, LoadAverage()), "\n",
      CommandMarkdown(machine), "\n",
      absl::StrFormat("One training step of an MLP %s at batch %d: per layer Y = X W, dW = X^T dY, dX = dY W^T "
                      "(%.2f GFLOP in all), row-major float32. Median of %d steps after a warm-up, all libraries "
                      "in this one run (the reference loops: one step).\n\n",
                      absl::GetFlag(FLAGS_widths), n, flops / 1e9, absl::GetFlag(FLAGS_reps)),
      "| library | threads | ms per step | GFLOP/s | time / OpenBLAS at 2 threads | same bits twice |\n",
      "|---|---:|---:|---:|---:|---|\n");
  for (const Result& r : results) {
    absl::StrAppendFormat(&md, "| %s | %d | %.2f | %.1f | %.2f | %s |\n", r.library, r.threads, r.ms, r.gflops,
                          base > 0 ? r.ms / base : 0, r.repeatable ? "yes" : "no");
  }
  return WriteFile(UserPath(path), md).ok() ? 0 : 1;
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return kestrel::Run(argc, argv);
}
