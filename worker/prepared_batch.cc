#include "worker/prepared_batch.h"

namespace kestrel {

void PreparedBatch::Prepare(const Partition& partition, absl::Span<const int> field_tables, int num_tables) {
  keys.Build(batch.keys, partition);
  entry_bags.clear();
  if (!batch.single_valued()) {
    entry_bags.resize(batch.num_entries());
    for (int64_t b = 0; b < batch.num_bags(); ++b) {
      for (uint32_t e = batch.bag_offsets[b]; e < batch.bag_offsets[b + 1]; ++e) entry_bags[e] = static_cast<uint32_t>(b);
    }
  }
  const size_t unique = keys.num_unique();
  const absl::Span<const uint32_t> inverse = keys.inverse();
  offsets.assign(unique + 1, 0);
  for (uint32_t u : inverse) ++offsets[u + 1];
  for (size_t u = 0; u < unique; ++u) offsets[u + 1] += offsets[u];
  positions.resize(inverse.size());
  // Positions in increasing order within each segment: place them in input order.
  cursor.assign(offsets.begin(), offsets.end() - 1);
  for (size_t p = 0; p < inverse.size(); ++p) positions[cursor[inverse[p]]++] = static_cast<uint32_t>(p);
  tables.resize(num_tables > 1 ? num_tables : 0);
  if (tables.empty()) return;
  // Each unique key's table is its first entry's field's (a key's namespace is its vocabulary's, and a
  // vocabulary's features share one table: Schema checks it). unique_keys() is grouped by server and
  // increasing within each group, so each table's subsequence is too: its KeyBatch keeps that order.
  const absl::Span<const uint64_t> unique_keys = keys.unique_keys();
  for (TableKeys& t : tables) t.rows.clear();
  for (size_t u = 0; u < unique; ++u) {
    const uint32_t entry = positions[offsets[u]];
    const int64_t bag = entry_bags.empty() ? entry : entry_bags[entry];
    tables[field_tables[bag % batch.fields]].rows.push_back(static_cast<uint32_t>(u));
  }
  for (TableKeys& t : tables) {
    scratch.resize(t.rows.size());
    for (size_t i = 0; i < t.rows.size(); ++i) scratch[i] = unique_keys[t.rows[i]];
    t.keys.Build(scratch, partition);
  }
}

}  // namespace kestrel
