#include "server/checkpoint_restore.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/checkpoint_layout.h"
#include "common/partition.h"
#include "common/status.h"
#include "server/served_layout.h"
#include "server/server_metrics.h"

namespace kestrel {

absl::Status CheckpointRestore::Checkpoint(const HostedShards& hosted, const CheckpointShardRequest& request,
                                           CheckpointShardResponse* response) {
  Shard& own = hosted.own();
  if (store_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "server %d was started without --checkpoint_dir: it cannot write checkpoints", own.owner()));
  }
  if (layout_->left()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("server %d left the job in a rescale: it has nothing to checkpoint", own.owner()));
  }
  const absl::Time start = absl::Now();
  if (request.copy_on_write()) {
    KESTREL_RETURN_IF_ERROR(store_->BeginCheckpoint(own, request.name()));
    cut_start_ = start;
    written_name_.clear();
    ShardCheckpoint* cut = response->mutable_shard();
    cut->set_shard(own.owner());
    cut->set_dir(CheckpointLayout::ShardDirName(own.owner()));
    cut->set_cut_seconds(absl::ToDoubleSeconds(absl::Now() - start));
    return absl::OkStatus();
  }
  KESTREL_ASSIGN_OR_RETURN(ShardCheckpoint written, store_->Checkpoint(own, request.name()));
  Record(written, absl::Now() - start);
  *response->mutable_shard() = std::move(written);
  return absl::OkStatus();
}

void CheckpointRestore::Record(const ShardCheckpoint& written, absl::Duration took) {
  ServerMetrics& metrics = ServerMetrics::Get();
  metrics.checkpoint_duration().Observe(absl::ToDoubleSeconds(took));
  metrics.checkpoint_cut_duration().Observe(written.cut_seconds());
  metrics.checkpoint_retained_peak_bytes().Set(static_cast<double>(written.retained_peak_bytes()));
  metrics.checkpoint_written_rows().Increment(static_cast<double>(written.rows_written()));
  metrics.checkpoint_written_bytes().Increment(static_cast<double>(written.bytes_written()));
}

void CheckpointRestore::WriteCut() {
  if (store_ == nullptr) return;
  const std::string name = store_->pending_checkpoint();
  if (name.empty()) return;  // dropped by a restore queued before this write
  written_name_ = name;
  written_ = store_->FinishCheckpoint();
  if (written_.ok()) {
    Record(*written_, absl::Now() - cut_start_);
  } else {
    KLOG(Warning) << "writing checkpoint " << name << " failed: " << written_.status();
  }
}

absl::Status CheckpointRestore::Await(const AwaitCheckpointRequest& request, CheckpointShardResponse* response) {
  if (store_ == nullptr || request.name().empty() || request.name() != written_name_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "checkpoint %s was not cut here last (the server restarted, restored or cut another since)", request.name()));
  }
  if (!written_.ok()) return written_.status();
  *response->mutable_shard() = *written_;
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<HostedShards>> CheckpointRestore::GroupsForRestore(
    const HostedShards& hosted, const RestoreShardRequest& request) const {
  if (request.layout_generation() == 0) return std::shared_ptr<HostedShards>(nullptr);
  if (!hosted.options().has_value()) {
    return absl::FailedPreconditionError("this server's groups were not made by HostedShards::Create: no new layout");
  }
  absl::StatusOr<Partition> partition = Partition::Parse(request.partition());
  if (!partition.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the restore's partition: ", partition.status().message()));
  }
  if (request.layout_generation() == layout_->generation() && request.rank() == hosted.server() &&
      request.partition() == hosted.partition().ToString()) {
    return std::shared_ptr<HostedShards>(nullptr);  // in that layout already (a retried restore): as usual
  }
  if (request.layout_generation() <= layout_->generation()) {
    return absl::FailedPreconditionError(absl::StrFormat("layout %d is not after this server's layout %d",
                                                         request.layout_generation(), layout_->generation()));
  }
  KESTREL_RETURN_IF_ERROR(ServedLayout::CheckWorkerIds(request.worker_ids_size()));
  if (request.rank() < 0 || request.rank() >= partition->num_servers() || request.bsp_workers() < 0 ||
      request.bsp_workers() > kMaxWorkers) {
    return absl::InvalidArgumentError(absl::StrFormat("rank %d of a layout of %d servers (bsp workers %d)",
                                                      request.rank(), partition->num_servers(), request.bsp_workers()));
  }
  ShardOptions options = *hosted.options();
  options.owner = request.rank();
  options.bsp_workers = request.bsp_workers();
  KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<HostedShards> built, HostedShards::Create(options, *partition));
  return std::shared_ptr<HostedShards>(std::move(built));
}

absl::Status CheckpointRestore::Restore(const HostedShards& served, const RestoreShardRequest& request,
                                        RestoreShardResponse* response) {
  written_name_.clear();  // AwaitCheckpoint answers no part written before a restore
  // The scheduler moves the job's generation before it asks for the restore; this server hears of it within a
  // heartbeat (it asks at once).
  KESTREL_RETURN_IF_ERROR(
      served.own().Count(served.own().CheckRestoreGeneration(request.min_worker_generation(), absl::Seconds(5))));
  // A rollback into a new layout restores into that layout's groups, served once they hold the checkpoint.
  KESTREL_ASSIGN_OR_RETURN(std::shared_ptr<HostedShards> next, served.own().Count(GroupsForRestore(served, request)));
  const HostedShards& hosted = next != nullptr ? *next : served;  // Adopt gives new groups the job view
  // Bounded tables with a disk budget keep rows in the working store: the new own group restores through it,
  // as the served one would (the switch listener attaches it again, with the failure listener).
  if (next != nullptr && store_ != nullptr) next->own().SetColdTier(store_);
  Shard& own = hosted.own();
  const absl::Time start = absl::Now();
  auto empty = [](Shard::RowSink, Shard::SketchSink) { return absl::OkStatus(); };
  int64_t clock = 0;  // the restored state holds every update of the clocks before it
  if (store_ != nullptr) {
    std::optional<CheckpointManifest> manifest;
    if (!request.name().empty()) {
      KESTREL_ASSIGN_OR_RETURN(CheckpointManifest read, store_->layout().ReadManifest(request.name()));
      manifest = std::move(read);
      clock = manifest->clock();
    }
    KESTREL_RETURN_IF_ERROR(store_->Restore(manifest, own, request.min_worker_generation()));
    // The backups' copies load the same checkpoint (their rows live in memory only).
    for (size_t g = 1; g < hosted.shards().size(); ++g) {
      Shard& group = *hosted.shards()[g];
      KESTREL_RETURN_IF_ERROR(
          manifest.has_value()
              ? ShardStore::LoadCheckpoint(store_->layout(), *manifest, group, request.min_worker_generation())
              : group.Restore({}, request.min_worker_generation(), empty));
    }
  } else if (request.name().empty()) {
    for (Shard* group : hosted.shards()) {
      KESTREL_RETURN_IF_ERROR(group->Restore({}, request.min_worker_generation(), empty));
    }
  } else {
    return absl::FailedPreconditionError(absl::StrFormat(
        "server %d was started without --checkpoint_dir: it cannot restore %s", own.owner(), request.name()));
  }
  for (Shard* group : hosted.shards()) group->StartClocksAt(clock);
  if (next != nullptr) {
    layout_->Adopt(next, request.layout_generation(), {request.worker_ids().begin(), request.worker_ids().end()});
    KLOG(Info) << "serving the ranges of rank " << request.rank() << " of the layout of rescale "
               << request.layout_generation() << " (restored "
               << (request.name().empty() ? "empty tables" : request.name()) << ")";
  }
  ServerMetrics::Get().restore_duration().Observe(absl::ToDoubleSeconds(absl::Now() - start));
  uint64_t rows = 0;
  for (const TableStats& table : own.Stats().tables) rows += table.rows;
  response->set_rows(rows);
  return absl::OkStatus();
}

}  // namespace kestrel
