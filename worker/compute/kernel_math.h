// The element math of every compute kernel, written once as __host__ __device__ functions: the CPU backend
// (cpu_backend.cc) loops over them, the CUDA backend (cuda_backend.cu) runs them one element per thread. CPU
// tests therefore cover the math itself, and GPU tests only compare the two backends.
//
// Layouts (all row-major float32; worker/data/batch.h describes the batch they come from):
//   index/values: [entries] index[e] is the unique row of entry e's key, values[e] what the row is multiplied
//                 by (1 for categorical features; MEAN and SQRT_N pooling already folded in).
//   bag_offsets:  [bags + 1] bag b = n * fields + f (example n, field f) holds entries
//                 [bag_offsets[b], bag_offsets[b + 1]); null when every bag holds one entry (entry b).
//   entry_bags:   [entries] the bag of each entry; null when every bag holds one entry (entry e is bag e).
//   x:            [bags, dim] = [n, fields, dim] pooled, value-scaled embeddings.
//   segments:     the entries of unique row u are positions[offsets[u] .. offsets[u + 1]), ascending, so
//                 every reduction below adds in one fixed order (BSP stays bitwise repeatable).
#ifndef KESTREL_WORKER_COMPUTE_KERNEL_MATH_H_
#define KESTREL_WORKER_COMPUTE_KERNEL_MATH_H_

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define KESTREL_HD __host__ __device__
#else
#define KESTREL_HD
#endif

namespace kestrel {
namespace kernel {

// Bag b's entries: [*begin, *end).
KESTREL_HD inline void BagEntries(const uint32_t* bag_offsets, int64_t b, int64_t* begin, int64_t* end) {
  *begin = bag_offsets == nullptr ? b : bag_offsets[b];
  *end = bag_offsets == nullptr ? b + 1 : bag_offsets[b + 1];
}

// Pooling: x[b, d] = sum over bag b's entries e, ascending, of values[e] * rows[index[e], d]. The sum starts
// from the first entry's product, so a one-entry bag is exactly that product (a zero value times a negative
// row keeps its -0); an empty bag is 0.
KESTREL_HD inline float PoolElement(const float* rows, const uint32_t* index, const float* values,
                                    const uint32_t* bag_offsets, int dim, int64_t b, int d) {
  int64_t begin = 0, end = 0;
  BagEntries(bag_offsets, b, &begin, &end);
  if (begin == end) return 0.0f;
  float s = values[begin] * rows[static_cast<int64_t>(index[begin]) * dim + d];
  for (int64_t e = begin + 1; e < end; ++e) s += values[e] * rows[static_cast<int64_t>(index[e]) * dim + d];
  return s;
}

// PoolElement for all dim elements of bag b at once, out[d] for d < dim: the same products added in the same
// order for every d (so the same bits), walking each entry's row once.
KESTREL_HD inline void PoolRow(const float* rows, const uint32_t* index, const float* values,
                               const uint32_t* bag_offsets, int dim, int64_t b, float* out) {
  int64_t begin = 0, end = 0;
  BagEntries(bag_offsets, b, &begin, &end);
  if (begin == end) {
    for (int d = 0; d < dim; ++d) out[d] = 0.0f;
    return;
  }
  const float first = values[begin];
  const float* first_row = rows + static_cast<int64_t>(index[begin]) * dim;
  for (int d = 0; d < dim; ++d) out[d] = first * first_row[d];
  for (int64_t e = begin + 1; e < end; ++e) {
    const float v = values[e];
    const float* row = rows + static_cast<int64_t>(index[e]) * dim;
    for (int d = 0; d < dim; ++d) out[d] += v * row[d];
  }
}

// Field pooling: sum[n, d] = sum over f of x[n, f, d].
KESTREL_HD inline float FieldSumElement(const float* x, int fields, int dim, int64_t n, int d) {
  const float* base = x + n * fields * dim + d;
  float s = 0.0f;
  for (int f = 0; f < fields; ++f) s += base[f * dim];
  return s;
}

// Factorization-machine pairwise term of example n: 0.5 * sum_d [(sum_f x)^2 - sum_f x^2], where `sum` is
// FieldSumElement's output.
KESTREL_HD inline float FmInteraction(const float* x, const float* sum, int fields, int dim, int64_t n) {
  const float* base = x + n * fields * dim;
  float total = 0.0f;
  for (int d = 0; d < dim; ++d) {
    float squares = 0.0f;
    for (int f = 0; f < fields; ++f) squares += base[f * dim + d] * base[f * dim + d];
    const float s = sum[n * dim + d];
    total += s * s - squares;
  }
  return 0.5f * total;
}

// FieldSumElement for all dim elements of example n at once, out[d] for d < dim: the same additions in the
// same order (f ascending) for every d, walking x row by row (contiguous in d, so the CPU vectorizes it).
KESTREL_HD inline void FieldSumRow(const float* x, int fields, int dim, int64_t n, float* out) {
  const float* base = x + n * fields * dim;
  for (int d = 0; d < dim; ++d) out[d] = 0.0f;
  for (int f = 0; f < fields; ++f) {
    const float* row = base + f * dim;
    for (int d = 0; d < dim; ++d) out[d] += row[d];
  }
}

// FmInteraction of example n with the same bits, walking x row by row: squares[d] (dim floats of scratch)
// sums x^2 over f in order for every d, then the d terms are added in order.
KESTREL_HD inline float FmInteractionRows(const float* x, const float* sum, int fields, int dim, int64_t n,
                                          float* squares) {
  const float* base = x + n * fields * dim;
  for (int d = 0; d < dim; ++d) squares[d] = 0.0f;
  for (int f = 0; f < fields; ++f) {
    const float* row = base + f * dim;
    for (int d = 0; d < dim; ++d) squares[d] += row[d] * row[d];
  }
  float total = 0.0f;
  for (int d = 0; d < dim; ++d) {
    const float s = sum[n * dim + d];
    total += s * s - squares[d];
  }
  return 0.5f * total;
}

// Its gradient with respect to x[n, f, d], given dL/d(term) = g[n]: g[n] * (sum[n, d] - x[n, f, d]).
KESTREL_HD inline float FmGradElement(const float* x, const float* sum, const float* g, int fields, int dim,
                                      int64_t n, int f, int d) {
  return g[n] * (sum[n * dim + d] - x[(n * fields + f) * dim + d]);
}

// DLRM dot interaction over m vectors per example, v: [n, m, dim]. Pair k enumerates i < j row by row:
// (0,1), (0,2), ..., (0,m-1), (1,2), ... ; there are m (m - 1) / 2 pairs.
KESTREL_HD inline int PairIndex(int i, int j, int m) { return i * (2 * m - i - 1) / 2 + (j - i - 1); }
KESTREL_HD inline void PairOf(int k, int m, int* i, int* j) {
  int row = 0;
  while (k >= m - 1 - row) {
    k -= m - 1 - row;
    ++row;
  }
  *i = row;
  *j = row + 1 + k;
}

// z[n, k] = <v[n, i], v[n, j]> for pair k = (i, j).
KESTREL_HD inline float DotInteractionElement(const float* v, int m, int dim, int64_t n, int k) {
  int i = 0, j = 0;
  PairOf(k, m, &i, &j);
  const float* a = v + (n * m + i) * dim;
  const float* b = v + (n * m + j) * dim;
  float s = 0.0f;
  for (int d = 0; d < dim; ++d) s += a[d] * b[d];
  return s;
}

// Its backward: dv[n, i, d] = sum over j != i (ascending) of dz[n, pair(i, j)] * v[n, j, d].
KESTREL_HD inline float DotInteractionGradElement(const float* v, const float* dz, int m, int dim, int64_t n, int i,
                                                  int d) {
  const int pairs = m * (m - 1) / 2;
  float s = 0.0f;
  for (int j = 0; j < m; ++j) {
    if (j == i) continue;
    const int k = i < j ? PairIndex(i, j, m) : PairIndex(j, i, m);
    s += dz[n * pairs + k] * v[(n * m + j) * dim + d];
  }
  return s;
}

// Numerically stable logistic function.
KESTREL_HD inline float Sigmoid(float z) {
  if (z >= 0.0f) return 1.0f / (1.0f + expf(-z));
  const float e = expf(z);
  return e / (1.0f + e);
}

// Logloss of label y (0 or 1) given the logit z, without forming log(sigmoid): max(z,0) - z*y + log1p(e^-|z|).
KESTREL_HD inline float LogLossFromLogit(float z, float y) {
  return fmaxf(z, 0.0f) - z * y + log1pf(expf(-fabsf(z)));
}

// The logit of example n: bias + wide[n] + fm[n] + deep[n]; a null part is absent from the model.
KESTREL_HD inline float CombineLogit(float bias, const float* wide, const float* fm, const float* deep,
                                     int64_t n) {
  float z = bias;
  if (wide != nullptr) z += wide[n];
  if (fm != nullptr) z += fm[n];
  if (deep != nullptr) z += deep[n];
  return z;
}

// dLoss/dz of `scale` * logloss: scale * (sigmoid(z) - y).
KESTREL_HD inline float LogitGrad(float z, float y, float scale) { return scale * (Sigmoid(z) - y); }

// Example n's outputs: prob[n] = sigmoid(logit); with labels, loss[n] = weight * logloss and dlogit[n] =
// weight * LogitGrad(logit, label, scale), each skipped where its array is null. weight = weights[n], or 1
// where weights is null (a product with 1 is exact: the unweighted bits).
KESTREL_HD inline void LogitLossElement(float bias, const float* wide, const float* fm, const float* deep,
                                        const float* labels, const float* weights, float scale, int64_t n,
                                        float* prob, float* loss, float* dlogit) {
  const float z = CombineLogit(bias, wide, fm, deep, n);
  prob[n] = Sigmoid(z);
  if (labels == nullptr) return;
  const float weight = weights == nullptr ? 1.0f : weights[n];
  if (loss != nullptr) loss[n] = weight * LogLossFromLogit(z, labels[n]);
  if (dlogit != nullptr) dlogit[n] = weight * LogitGrad(z, labels[n], scale);
}

// Bias and activation of one hidden unit: max(x + b, 0) with ReLU, x + b without.
KESTREL_HD inline float BiasActivation(float x, float b, bool relu) {
  const float y = x + b;
  return relu && y < 0.0f ? 0.0f : y;
}

// ReLU backward through the activation's output y: dy where y > 0, else 0.
KESTREL_HD inline float ReluGrad(float y, float dy) { return y > 0.0f ? dy : 0.0f; }

// Column sum: sum over r of x[r, c] in row order.
KESTREL_HD inline float ColumnSumElement(const float* x, int64_t rows, int cols, int c) {
  float s = 0.0f;
  for (int64_t r = 0; r < rows; ++r) s += x[r * cols + c];
  return s;
}

// One element of a naive row-major GEMM, C = alpha * op(A) op(B) + beta * C, with op(A) m x k and op(B) k x n,
// summed over k in order. The CPU backend's reference GEMM; the CUDA backend uses cuBLAS (within 1e-5).
KESTREL_HD inline float GemmElement(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                                    const float* b, float beta, float c_old, int i, int j) {
  float s = 0.0f;
  for (int t = 0; t < k; ++t) {
    const float av = trans_a ? a[static_cast<int64_t>(t) * m + i] : a[static_cast<int64_t>(i) * k + t];
    const float bv = trans_b ? b[static_cast<int64_t>(j) * k + t] : b[static_cast<int64_t>(t) * n + j];
    s += av * bv;
  }
  return beta == 0.0f ? alpha * s : alpha * s + beta * c_old;
}

// The bag of entry p: entry_bags[p], or p itself where every bag holds one entry (entry_bags null).
KESTREL_HD inline int64_t EntryBag(const uint32_t* entry_bags, uint32_t p) {
  return entry_bags == nullptr ? int64_t{p} : int64_t{entry_bags[p]};
}

// Backward of the pooling into unique rows (deterministic segment reduce):
//   grad_rows[u, d] = sum over the entries p of segment u, ascending, of values[p] * dx[bag(p) / group, d],
// bag(p) = EntryBag(entry_bags, p). group = 1 scatters per-bag gradients (embeddings); group = fields scatters
// one gradient per example to all its entries (the wide weights, whose per-entry gradient is the example's
// dL/dlogit times the entry's value).
KESTREL_HD inline float SegmentSumElement(const float* dx, const float* values, const uint32_t* offsets,
                                          const uint32_t* positions, const uint32_t* entry_bags, int dim,
                                          int group, int64_t u, int d) {
  float s = 0.0f;
  for (uint32_t j = offsets[u]; j < offsets[u + 1]; ++j) {
    const uint32_t p = positions[j];
    s += values[p] * dx[EntryBag(entry_bags, p) / group * dim + d];
  }
  return s;
}

// SegmentSumElement for all dim elements of segment u at once, out[d] for d < dim: the same products added in
// the same order for every d (so the same bits), walking each entry's row once instead of dim times.
KESTREL_HD inline void SegmentSumRow(const float* dx, const float* values, const uint32_t* offsets,
                                     const uint32_t* positions, const uint32_t* entry_bags, int dim, int group,
                                     int64_t u, float* out) {
  for (int d = 0; d < dim; ++d) out[d] = 0.0f;
  for (uint32_t j = offsets[u]; j < offsets[u + 1]; ++j) {
    const uint32_t p = positions[j];
    const float v = values[p];
    const float* row = dx + EntryBag(entry_bags, p) / group * dim;
    for (int d = 0; d < dim; ++d) out[d] += v * row[d];
  }
}

}  // namespace kernel
}  // namespace kestrel

#endif  // KESTREL_WORKER_COMPUTE_KERNEL_MATH_H_
