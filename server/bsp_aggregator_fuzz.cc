// Fuzz target: the BSP aggregator (bsp_aggregator.h) fed arbitrary sequences of parts and Applied() calls.
//
// Input: the worker count (1-4) and dim (1-3), then operations: Add of a part (worker, clock, index and count
// near the interesting values or arbitrary, keys from a small or the full key space, small finite gradients),
// or Applied of the clock handed out last. A shadow model keeps every part the aggregator accepted and checks:
//   - a batch is handed out only when every worker sent every part of its clock, for the clock just completed;
//     its keys are sorted and unique and its gradients are exactly (bit for bit) the rank-ordered sum of the
//     accepted parts scaled by 1/N;
//   - an accepted part of a clock already applied is a repeat of what was applied; an accepted part of the
//     clock being collected never changes what was accepted before for its (worker, index);
//   - at most one clock is buffered, and applied_through() never goes back;
//   - Fence + CompleteWithout (removed workers): a fenced worker's later parts of that clock are refused, and
//     the completed clock is exactly the rank-ordered sum of the other workers' accepted parts scaled by
//     1/(their count), handed out only when each of them sent all of its parts.
#include <cstring>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "common/fuzz_input.h"
#include "server/bsp_aggregator.h"

namespace kestrel {
namespace {

// Bit-for-bit equality of two float vectors.
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

struct PartCopy {
  int count = 0;
  std::vector<uint64_t> keys;
  std::vector<float> grads;
  bool operator==(const PartCopy& o) const { return keys == o.keys && SameBits(grads, o.grads); }
};
using ClockParts = std::map<std::pair<int, int>, PartCopy>;  // (worker, index) -> part

// What the aggregator must hand out for `parts`: sums in rank, then part, then position order, scaled by 1/N.
BspAggregator::Batch Expected(int64_t clock, const ClockParts& parts, int num_workers, int dim,
                              const std::vector<bool>& fenced = {}) {
  std::map<uint64_t, std::vector<float>> sums;
  for (const auto& [where, part] : parts) {
    if (!fenced.empty() && fenced[where.first]) continue;
    for (size_t i = 0; i < part.keys.size(); ++i) {
      std::vector<float>& sum = sums[part.keys[i]];
      sum.resize(dim, 0.0f);
      for (int j = 0; j < dim; ++j) sum[j] += part.grads[i * dim + j];
    }
  }
  BspAggregator::Batch batch;
  batch.clock = clock;
  const float scale = 1.0f / static_cast<float>(num_workers);
  for (auto& [key, sum] : sums) {
    batch.keys.push_back(key);
    for (float g : sum) batch.grads.push_back(g * scale);
  }
  return batch;
}

}  // namespace
}  // namespace kestrel

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kestrel;  // NOLINT(build/namespaces): a fuzz entry point
  FuzzInput in(data, size);
  const int num_workers = 1 + in.U8() % 4;
  const int dim = 1 + in.U8() % 3;
  BspAggregator aggregator(num_workers, dim);
  std::map<int64_t, ClockParts> pending, applied;  // the shadow model
  std::optional<int64_t> applying;
  int64_t applied_through = -1;
  std::vector<bool> fenced(num_workers, false);  // Fence(): their parts of fenced_from and later are refused
  int64_t fenced_from = -1;
  for (int ops = 0; !in.empty() && ops < 256; ++ops) {
    const uint8_t op = in.U8();
    if (op % 16 == 6) {  // Fence some workers off the clock being collected (or another), then complete it
      std::vector<int> workers;
      std::vector<bool> set(num_workers, false);
      const uint8_t mask = in.U8();
      for (int w = 0; w < num_workers; ++w) {
        if ((mask >> w) & 1) {
          workers.push_back(w);
          set[w] = true;
        }
      }
      const int64_t clock = (op & 0x80) != 0 ? applied_through + static_cast<int>(in.U8() % 3) - 1
                                             : (pending.empty() ? applied_through + 1 : pending.begin()->first);
      absl::StatusOr<BspAggregator::Fenced> f = aggregator.Fence(workers, clock);
      if (!f.ok()) continue;
      FUZZ_CHECK(static_cast<int>(workers.size()) < num_workers && clock >= 0, "an impossible fence was taken");
      fenced = set;
      fenced_from = clock;
      if (*f == BspAggregator::Fenced::kApplied) FUZZ_CHECK(clock <= applied_through);
      if (*f == BspAggregator::Fenced::kNotApplied) FUZZ_CHECK(clock > applied_through);
      if ((op & 0x40) == 0) continue;
      const int64_t through_before = aggregator.applied_through();
      absl::StatusOr<std::optional<BspAggregator::Batch>> done = aggregator.CompleteWithout(clock);
      if (!done.ok() || !done->has_value()) {
        FUZZ_CHECK(aggregator.applied_through() == through_before, "a refused completion moved the clock");
        continue;
      }
      // Every worker not fenced sent every part it announced; the batch leaves the fenced ones out.
      ClockParts& parts = pending[clock];
      int contributors = 0;
      for (int w = 0; w < num_workers; ++w) {
        if (fenced[w]) continue;
        ++contributors;
        int received = 0, announced = -1;
        for (const auto& [at, p] : parts) {
          if (at.first != w) continue;
          ++received;
          announced = p.count;
        }
        FUZZ_CHECK(received > 0 && received == announced, "a clock was completed before a worker's every part");
      }
      const BspAggregator::Batch expected = Expected(clock, parts, contributors, dim, fenced);
      FUZZ_CHECK((*done)->keys == expected.keys && SameBits((*done)->grads, expected.grads),
                 "the completed clock is not the other workers' rank-ordered average");
      ClockParts kept;
      for (const auto& [at, p] : parts) {
        if (!fenced[at.first]) kept[at] = p;
      }
      applied[clock] = std::move(kept);
      pending.erase(clock);
      applied_through = clock;
      aggregator.Applied(clock);
      continue;
    }
    if (op % 8 == 7) {  // Applied(): the batch handed out last is in the table (or an arbitrary clock)
      const int64_t clock = (op & 0x80) != 0 ? in.I64() : applying.value_or(-1);
      aggregator.Applied(clock);
      if (applying == clock) applying.reset();
      continue;
    }
    BspAggregator::Part part;
    part.worker = static_cast<int>(in.U8() % (num_workers + 2)) - 1;
    const uint8_t c = in.U8();
    part.clock = c == 0xff ? in.I64() : std::max<int64_t>(applied_through, 0) + static_cast<int>(c % 8) - 3;
    part.index = static_cast<int>(in.U8() % 5) - 1;
    part.count = static_cast<int>(in.U8() % 5);
    const size_t n = in.U8() % 6;
    std::vector<uint64_t> keys;
    std::vector<float> grads;
    for (size_t i = 0; i < n; ++i) keys.push_back((op & 0x40) != 0 ? in.U64() : in.U8() % 16);
    for (size_t i = 0; i < n * dim; ++i) grads.push_back(static_cast<int8_t>(in.U8()) / 8.0f);
    if ((op & 0x20) != 0 && !grads.empty()) grads.pop_back();  // a keys/grads mismatch
    part.keys = keys;
    part.grads = grads;

    const int64_t through_before = aggregator.applied_through();
    absl::StatusOr<std::optional<BspAggregator::Batch>> added = aggregator.Add(part);
    FUZZ_CHECK(aggregator.pending_clocks() <= 1, "more than the clock being collected is buffered");
    if (added.ok() && fenced_from >= 0 && part.worker >= 0 && part.worker < num_workers) {
      FUZZ_CHECK(!(fenced[part.worker] && part.clock >= fenced_from), "a fenced worker's part was accepted");
    }
    FUZZ_CHECK(aggregator.applied_through() >= through_before, "applied_through went back");
    if (!added.ok()) {
      FUZZ_CHECK(aggregator.applied_through() == through_before);
      continue;
    }
    FUZZ_CHECK(part.worker >= 0 && part.worker < num_workers && part.index >= 0 && part.index < part.count);
    FUZZ_CHECK(grads.size() == keys.size() * dim);
    const PartCopy copy{part.count, keys, grads};
    const std::pair<int, int> where(part.worker, part.index);
    if (part.clock <= through_before) {  // only a repeat of an applied part is acknowledged
      FUZZ_CHECK(!added->has_value());
      auto clock = applied.find(part.clock);
      FUZZ_CHECK(clock != applied.end() && clock->second.count(where) == 1 && clock->second.at(where) == copy,
                 "a part of an applied clock was accepted but is not what was applied");
      continue;
    }
    ClockParts& parts = pending[part.clock];
    if (auto it = parts.find(where); it != parts.end()) {
      FUZZ_CHECK(it->second == copy, "a part was accepted twice with different contents");
    }
    parts[where] = copy;
    if (!added->has_value()) continue;
    // A batch: the clock is complete (every worker sent every part it announced).
    const BspAggregator::Batch& batch = **added;
    FUZZ_CHECK(batch.clock == part.clock && aggregator.applied_through() == part.clock);
    FUZZ_CHECK(pending.size() == 1, "a clock completed while another was buffered");
    for (int w = 0; w < num_workers; ++w) {
      int received = 0, announced = -1;
      for (const auto& [at, p] : parts) {
        if (at.first != w) continue;
        ++received;
        FUZZ_CHECK(announced == -1 || announced == p.count, "a worker's part count changed");
        announced = p.count;
      }
      FUZZ_CHECK(received > 0 && received == announced, "a batch was handed out before every part arrived");
    }
    for (size_t i = 1; i < batch.keys.size(); ++i) FUZZ_CHECK(batch.keys[i - 1] < batch.keys[i]);
    const BspAggregator::Batch expected = Expected(part.clock, parts, num_workers, dim);
    FUZZ_CHECK(batch.keys == expected.keys);
    FUZZ_CHECK(SameBits(batch.grads, expected.grads), "the combined gradients are not the rank-ordered average");
    applied[part.clock] = std::move(parts);
    pending.erase(part.clock);
    applied_through = part.clock;
    applying = part.clock;
    if ((op & 0x10) != 0) {  // usually the shard applies the batch at once
      aggregator.Applied(part.clock);
      applying.reset();
    }
  }
  return 0;
}
