#include "common/partition.h"

#include <algorithm>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/limits.h"

namespace kestrel {
namespace {

constexpr uint64_t kMaxKey = std::numeric_limits<uint64_t>::max();

bool ParseKey(absl::string_view s, uint64_t* out) {
  s = absl::StripAsciiWhitespace(s);
  if (absl::ConsumePrefix(&s, "0x") || absl::ConsumePrefix(&s, "0X")) {
    return absl::SimpleHexAtoi(s, out);
  }
  return absl::SimpleAtoi(s, out);
}

}  // namespace

std::string KeyRange::ToString() const { return absl::StrFormat("[0x%016x, 0x%016x]", first, last); }

Partition::Partition(int num_servers, std::vector<KeyRange> ranges, std::vector<int> owners, bool uniform)
    : num_servers_(num_servers), ranges_(std::move(ranges)), owners_(std::move(owners)), uniform_(uniform) {}

absl::StatusOr<Partition> Partition::Uniform(int num_servers, int ranges_per_server) {
  if (num_servers < 1 || num_servers > kMaxServers) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_servers must be in [1, ", kMaxServers, "], got ", num_servers));
  }
  if (ranges_per_server < 1 || ranges_per_server > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("ranges_per_server must be in [1, 1024], got ", ranges_per_server));
  }
  const uint64_t n = static_cast<uint64_t>(num_servers) * ranges_per_server;
  // Range r holds exactly the keys k with floor(k * n / 2^64) == r, which is what OwnerOf computes:
  // its first key is ceil(r * 2^64 / n).
  auto begin_of = [n](uint64_t r) -> unsigned __int128 {
    return ((static_cast<unsigned __int128>(r) << 64) + n - 1) / n;
  };
  std::vector<KeyRange> ranges(n);
  std::vector<int> owners(n);
  for (uint64_t r = 0; r < n; ++r) {
    ranges[r].first = static_cast<uint64_t>(begin_of(r));
    ranges[r].last = r + 1 == n ? kMaxKey : static_cast<uint64_t>(begin_of(r + 1) - 1);
    owners[r] = static_cast<int>(r % num_servers);
  }
  return Partition(num_servers, std::move(ranges), std::move(owners), /*uniform=*/true);
}

absl::StatusOr<Partition> Partition::Parse(absl::string_view spec) {
  int replicas = 1;
  if (const size_t semi = spec.find(';'); semi != absl::string_view::npos) {
    const absl::string_view suffix = spec.substr(semi + 1);
    if (!absl::StartsWith(suffix, "replicas=") || !absl::SimpleAtoi(suffix.substr(9), &replicas)) {
      return absl::InvalidArgumentError(
          absl::StrCat("partition suffix '", suffix, "' is not of the form replicas=R"));
    }
    spec = spec.substr(0, semi);
  }
  absl::StatusOr<Partition> layout = ParseRanges(spec);
  if (!layout.ok()) return layout.status();
  return layout->WithReplicas(replicas);
}

absl::StatusOr<Partition> Partition::WithReplicas(int replicas) const {
  if (replicas < 1 || replicas > num_servers_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "replicas must be in [1, %d] (each copy of a range on its own server), got %d", num_servers_, replicas));
  }
  Partition copy = *this;
  copy.replicas_ = replicas;
  return copy;
}

std::vector<KeyRange> Partition::ReplicaRangesOf(int server, int j) const {
  std::vector<KeyRange> out;
  if (j < 0 || j >= replicas_) return out;
  for (size_t i = 0; i < ranges_.size(); ++i) {
    if (ReplicaOfOwner(owners_[i], j) == server) out.push_back(ranges_[i]);
  }
  return out;
}

absl::StatusOr<Partition> Partition::ParseRanges(absl::string_view spec) {
  std::vector<KeyRange> ranges;
  std::vector<int> owners;
  int max_owner = -1;
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    std::vector<absl::string_view> range_owner = absl::StrSplit(item, ':');
    std::vector<absl::string_view> bounds =
        range_owner.size() == 2 ? absl::StrSplit(range_owner[0], '-') : std::vector<absl::string_view>{};
    KeyRange range;
    int owner = -1;
    if (range_owner.size() != 2 || bounds.size() != 2 || !ParseKey(bounds[0], &range.first) ||
        !ParseKey(bounds[1], &range.last) || !absl::SimpleAtoi(range_owner[1], &owner) || owner < 0 ||
        owner >= kMaxServers || range.first > range.last) {
      return absl::InvalidArgumentError(
          absl::StrCat("partition item '", item, "' is not of the form first-last:server (first <= last)"));
    }
    const uint64_t expected_first = ranges.empty() ? 0 : ranges.back().last + 1;
    if (range.first != expected_first || (!ranges.empty() && ranges.back().last == kMaxKey)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "partition range %s does not start right after the previous range (expected first key 0x%x): "
          "ranges must be sorted and leave no gaps or overlaps",
          range.ToString(), expected_first));
    }
    ranges.push_back(range);
    owners.push_back(owner);
    max_owner = std::max(max_owner, owner);
  }
  if (ranges.empty() || ranges.back().last != kMaxKey) {
    return absl::InvalidArgumentError("partition ranges must cover the key space up to 0xffffffffffffffff");
  }
  std::vector<bool> seen(max_owner + 1, false);
  for (int o : owners) seen[o] = true;
  for (int s = 0; s <= max_owner; ++s) {
    if (!seen[s]) return absl::InvalidArgumentError(absl::StrCat("partition gives server ", s, " no range"));
  }
  // Recognize the uniform layout so OwnerOf takes its O(1) path.
  const int num_servers = max_owner + 1;
  if (ranges.size() % num_servers == 0) {
    auto uniform = Uniform(num_servers, static_cast<int>(ranges.size() / num_servers));
    if (uniform.ok() && uniform->ranges_ == ranges && uniform->owners_ == owners) return uniform;
  }
  return Partition(num_servers, std::move(ranges), std::move(owners), /*uniform=*/false);
}

std::string Partition::ToString() const {
  std::vector<std::string> items;
  items.reserve(ranges_.size());
  for (size_t i = 0; i < ranges_.size(); ++i) {
    items.push_back(absl::StrFormat("0x%x-0x%x:%d", ranges_[i].first, ranges_[i].last, owners_[i]));
  }
  std::string out = absl::StrJoin(items, ",");
  if (replicas_ > 1) absl::StrAppend(&out, ";replicas=", replicas_);
  return out;
}

int Partition::OwnerOfSlow(uint64_t key) const {
  // The last range whose first key is <= key.
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), key,
                             [](uint64_t k, const KeyRange& r) { return k < r.first; });
  return owners_[static_cast<size_t>(it - ranges_.begin()) - 1];
}

std::vector<KeyRange> Partition::RangesOf(int server) const {
  std::vector<KeyRange> out;
  for (size_t i = 0; i < ranges_.size(); ++i) {
    if (owners_[i] == server) out.push_back(ranges_[i]);
  }
  return out;
}

uint64_t Partition::Fingerprint() const {
  uint64_t h = Mix64(static_cast<uint64_t>(num_servers_));
  if (replicas_ > 1) h = HashCombine(h, static_cast<uint64_t>(replicas_));  // unreplicated: as before
  for (size_t i = 0; i < ranges_.size(); ++i) {
    h = HashCombine(h, ranges_[i].first);
    h = HashCombine(h, ranges_[i].last);
    h = HashCombine(h, static_cast<uint64_t>(owners_[i]));
  }
  return h;
}

Routing::Routing(Partition partition, std::vector<bool> out_of_service)
    : partition_(std::move(partition)), out_of_service_(std::move(out_of_service)) {
  const int n = partition_.num_servers();
  primary_of_owner_.assign(n, -1);
  for (int owner = 0; owner < n; ++owner) {
    for (int j = 0; j < partition_.replicas(); ++j) {
      const int s = partition_.ReplicaOfOwner(owner, j);
      if (!out_of_service_[s]) {
        primary_of_owner_[owner] = s;
        break;
      }
    }
  }
}

absl::StatusOr<Routing> Routing::Create(Partition partition, std::vector<bool> out_of_service) {
  if (out_of_service.empty()) out_of_service.assign(partition.num_servers(), false);
  if (static_cast<int>(out_of_service.size()) != partition.num_servers()) {
    return absl::InvalidArgumentError(absl::StrFormat("routing: %d servers' states for a partition of %d servers",
                                                      out_of_service.size(), partition.num_servers()));
  }
  return Routing(std::move(partition), std::move(out_of_service));
}

std::vector<int> Routing::BackupsOfOwner(int owner) const {
  std::vector<int> out;
  bool primary_seen = false;
  for (int j = 0; j < partition_.replicas(); ++j) {
    const int s = partition_.ReplicaOfOwner(owner, j);
    if (out_of_service_[s]) continue;
    if (primary_seen) out.push_back(s);
    primary_seen = true;
  }
  return out;
}

bool Routing::AnyRangeLost() const {
  return std::find(primary_of_owner_.begin(), primary_of_owner_.end(), -1) != primary_of_owner_.end();
}

std::vector<RangeMove> MovesBetween(const Partition& from, const Partition& to) {
  // Both tile [0, 2^64-1] in key order: walk them together, one overlap at a time.
  std::vector<RangeMove> moves;
  const std::vector<KeyRange>& a = from.ranges();
  const std::vector<KeyRange>& b = to.ranges();
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const uint64_t first = std::max(a[i].first, b[j].first);
    const uint64_t last = std::min(a[i].last, b[j].last);
    const int old_owner = from.owners()[i], new_owner = to.owners()[j];
    if (old_owner != new_owner) {
      if (!moves.empty() && moves.back().from == old_owner && moves.back().to == new_owner &&
          moves.back().range.last + 1 == first) {
        moves.back().range.last = last;  // one move per contiguous stretch
      } else {
        moves.push_back({KeyRange{first, last}, old_owner, new_owner});
      }
    }
    // Advance whichever ends first (both when they end together).
    const bool end_a = a[i].last == last, end_b = b[j].last == last;
    if (end_a) ++i;
    if (end_b) ++j;
  }
  return moves;
}

int Routing::UnderReplicatedRanges() const {
  int count = 0;
  for (int owner : partition_.owners()) {
    for (int j = 0; j < partition_.replicas(); ++j) {
      if (out_of_service_[partition_.ReplicaOfOwner(owner, j)]) {
        ++count;
        break;
      }
    }
  }
  return count;
}

RoutingTable::RoutingTable(Partition partition)
    : partition_(std::move(partition)),
      addresses_(partition_.num_servers()),
      current_(std::make_shared<const Routing>(*Routing::Create(partition_))) {}

absl::Status RoutingTable::Update(uint64_t generation, absl::Span<const int> out_of_service) {
  std::vector<bool> out(partition_.num_servers(), false);
  for (int s : out_of_service) {
    if (s < 0 || s >= partition_.num_servers()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "routing generation %d puts server %d out of service; the partition has %d servers", generation, s,
          partition_.num_servers()));
    }
    out[s] = true;
  }
  absl::StatusOr<Routing> routing = Routing::Create(partition_, std::move(out));
  if (!routing.ok()) return routing.status();
  absl::MutexLock lock(&mu_);
  if (generation <= generation_) return absl::OkStatus();  // an older announcement, or the one held
  generation_ = generation;
  current_ = std::make_shared<const Routing>(*std::move(routing));
  return absl::OkStatus();
}

std::shared_ptr<const Routing> RoutingTable::Current() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

uint64_t RoutingTable::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

}  // namespace kestrel
