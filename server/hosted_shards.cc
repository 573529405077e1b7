#include "server/hosted_shards.h"

#include <utility>

#include "absl/strings/str_format.h"

namespace kestrel {

HostedShards::HostedShards(int server, std::optional<ShardOptions> options, std::vector<std::unique_ptr<Shard>> owned,
                           std::vector<Shard*> shards, std::vector<int> group_of_owner)
    : server_(server),
      options_(std::move(options)),
      owned_(std::move(owned)),
      shards_(std::move(shards)),
      group_of_owner_(std::move(group_of_owner)),
      routing_(shards_.front()->partition()) {}

absl::StatusOr<std::unique_ptr<HostedShards>> HostedShards::Create(const ShardOptions& options,
                                                                   Partition partition) {
  const int n = partition.num_servers();
  if (options.owner < 0 || options.owner >= n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("server %d is not in a partition of %d servers", options.owner, n));
  }
  std::vector<std::unique_ptr<Shard>> owned;
  std::vector<Shard*> shards;
  std::vector<int> group_of_owner(n, -1);
  for (int j = 0; j < partition.replicas(); ++j) {
    const int owner = ((options.owner - j) % n + n) % n;  // this server holds replica j of owner's ranges
    ShardOptions group = options;
    group.owner = owner;
    absl::StatusOr<std::unique_ptr<Shard>> shard = Shard::Create(group, partition);
    if (!shard.ok()) return shard.status();
    group_of_owner[owner] = static_cast<int>(shards.size());
    shards.push_back(shard->get());
    owned.push_back(*std::move(shard));
  }
  return std::unique_ptr<HostedShards>(
      new HostedShards(options.owner, options, std::move(owned), std::move(shards), std::move(group_of_owner)));
}

std::unique_ptr<HostedShards> HostedShards::Single(Shard* shard) {
  std::vector<int> group_of_owner(shard->partition().num_servers(), -1);
  group_of_owner[shard->owner()] = 0;
  return std::unique_ptr<HostedShards>(
      new HostedShards(shard->owner(), std::nullopt, {}, {shard}, std::move(group_of_owner)));
}

std::shared_ptr<HostedShards> HostedShards::Unowned(HostedShards* hosted) {
  return std::shared_ptr<HostedShards>(hosted, [](HostedShards*) {});
}

absl::StatusOr<Shard*> HostedShards::Group(std::optional<int> owner) const {
  if (!owner.has_value()) return shards_.front();
  if (*owner < 0 || *owner >= static_cast<int>(group_of_owner_.size())) {
    return absl::InvalidArgumentError(absl::StrFormat("range group %d is not in a partition of %d servers", *owner,
                                                      group_of_owner_.size()));
  }
  const int group = group_of_owner_[*owner];
  if (group < 0) {
    return absl::NotFoundError(absl::StrFormat("server %d holds no copy of the ranges of server %d (replicas: %d)",
                                               server_, *owner, partition().replicas()));
  }
  return shards_[group];
}

absl::Status HostedShards::CheckPrimary(int owner) const {
  if (!replicated()) return absl::OkStatus();
  const std::shared_ptr<const Routing> routing = routing_.Current();
  const int primary = routing->PrimaryOfOwner(owner);
  if (primary == server_) return absl::OkStatus();
  {
    absl::MutexLock lock(&listener_mu_);
    if (listener_) listener_();
  }
  return absl::UnavailableError(absl::StrFormat(
      "server %d is not the primary of the ranges of server %d at routing generation %d (%s): re-route and retry",
      server_, owner, routing_.generation(),
      primary < 0 ? "every copy is out of service" : absl::StrFormat("server %d is", primary)));
}

std::vector<int> HostedShards::BackupsOf(int owner) const {
  if (!replicated()) return {};
  return routing_.Current()->BackupsOfOwner(owner);
}

void HostedShards::SetJobView(uint64_t job_generation, const std::vector<uint64_t>& worker_generations) {
  for (Shard* shard : shards_) shard->SetJobView(job_generation, worker_generations);
}

void HostedShards::SetGenerationListener(std::function<void()> listener) {
  for (Shard* shard : shards_) shard->SetGenerationListener(listener);
  absl::MutexLock lock(&listener_mu_);
  listener_ = std::move(listener);
}

}  // namespace kestrel
