#include "server/rescale_participant.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/status.h"
#include "proto/ps.pb.h"
#include "server/peer_links.h"
#include "server/piece_stream.h"
#include "server/served_layout.h"

namespace kestrel {

RescaleParticipant::RescaleParticipant(std::string job_id, ServedLayout* layout, ShardStore* store,
                                       PeerLinks* peers)
    : job_id_(std::move(job_id)), layout_(layout), store_(store), peers_(peers) {}

absl::Status RescaleParticipant::Handle(const HostedShards& hosted, const RescaleShardRequest& request,
                                        RescaleShardResponse* response) {
  switch (request.phase()) {
    case RescaleShardRequest::SEND:
      return Send(hosted, request, response);
    case RescaleShardRequest::INSTALL:
      return Install(hosted, request, response);
    case RescaleShardRequest::SWITCH:
      return Switch(hosted, request);
    case RescaleShardRequest::ABORT:
      Abort(request.layout_generation(), request.attempt());
      for (Shard* group : hosted.shards()) group->ReleaseReads();  // a HOLD of this rescale ends with it
      return absl::OkStatus();
    case RescaleShardRequest::FENCE:
      return Fence(hosted, request, response);
    case RescaleShardRequest::COMPLETE:
      return Complete(hosted, request, response);
    case RescaleShardRequest::FRONTIER:
      return Frontier(hosted, request, response);
    case RescaleShardRequest::HOLD:
      return Hold(hosted, request);
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown rescale phase ", request.phase()));
  }
}

absl::Status RescaleParticipant::Receive(const HostedShards& hosted, const GroupChunk& chunk) {
  KESTREL_RETURN_IF_ERROR(CheckPiece(chunk));
  std::shared_ptr<HostedShards> groups;
  {
    absl::MutexLock lock(&mu_);
    KESTREL_ASSIGN_OR_RETURN(groups, AcceptPieceLocked(hosted, chunk));
  }
  // Outside the lock: senders load at once (each table locks its own stripes). The piece counts as received
  // only once its rows are in (`done` is set below), so INSTALL never sees a group half loaded.
  KESTREL_RETURN_IF_ERROR(LoadPiece(groups, chunk));
  absl::MutexLock lock(&mu_);
  if (!incoming_layout_.has_value() || incoming_layout_->groups != groups) {
    return absl::AbortedError(absl::StrFormat("rescale %d was dropped meanwhile", chunk.layout_generation()));
  }
  IncomingLayout::Sender& sender = incoming_layout_->senders[chunk.sender()];
  ++sender.loaded;
  if (chunk.last()) sender.done = true;
  return absl::OkStatus();
}

absl::Status RescaleParticipant::CheckPiece(const GroupChunk& chunk) const {
  if (chunk.sender() < 0 || chunk.sender() >= kMaxServers || chunk.owner() < 0 || chunk.owner() >= kMaxServers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rescale rows from server %d for range group %d: out of range", chunk.sender(), chunk.owner()));
  }
  if (chunk.layout_generation() <= layout_->generation()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "rows of rescale %d arrived after this server switched to rescale %d", chunk.layout_generation(),
        layout_->generation()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<HostedShards>> RescaleParticipant::AcceptPieceLocked(const HostedShards& hosted,
                                                                                   const GroupChunk& chunk) {
  const std::pair<uint64_t, uint64_t> key = {chunk.layout_generation(), chunk.attempt()};
  if (key <= aborted_) {
    return absl::AbortedError(absl::StrFormat("rows of rescale %d (attempt %d), which was aborted",
                                              chunk.layout_generation(), chunk.attempt()));
  }
  if (incoming_layout_.has_value()) {
    const std::pair<uint64_t, uint64_t> current = {incoming_layout_->generation, incoming_layout_->attempt};
    if (current > key) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "rows of rescale %d (attempt %d) arrived during rescale %d (attempt %d)", chunk.layout_generation(),
          chunk.attempt(), incoming_layout_->generation, incoming_layout_->attempt));
    }
    if (current < key) DropLayoutLocked();  // an earlier attempt's: superseded
  }
  IncomingLayout::Sender* sender = nullptr;
  if (incoming_layout_.has_value()) {
    auto it = incoming_layout_->senders.find(chunk.sender());
    if (it != incoming_layout_->senders.end()) sender = &it->second;
  }
  if (chunk.sequence() == 0) {
    if (sender != nullptr) {
      return absl::FailedPreconditionError(
          absl::StrFormat("rescale %d: server %d started sending twice", chunk.layout_generation(), chunk.sender()));
    }
    KESTREL_ASSIGN_OR_RETURN(sender, StartSenderLocked(hosted, chunk));
  } else if (sender == nullptr || sender->done || sender->next_sequence != chunk.sequence()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "rescale %d: piece %d from server %d arrived out of order (expected piece %d%s)", chunk.layout_generation(),
        chunk.sequence(), chunk.sender(), sender != nullptr ? sender->next_sequence : 0,
        sender != nullptr && sender->done ? ", after its last one" : ""));
  }
  const uint64_t bytes = chunk.keys().size() + chunk.rows().size();
  if (incoming_layout_->bytes + bytes > max_bytes_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "rescale %d: the rows received exceed the %d bytes this server takes in a rescale",
        chunk.layout_generation(), max_bytes_));
  }
  incoming_layout_->bytes += bytes;
  sender->next_sequence = chunk.sequence() + 1;
  return incoming_layout_->groups;
}

absl::StatusOr<RescaleParticipant::IncomingLayout::Sender*> RescaleParticipant::StartSenderLocked(
    const HostedShards& hosted, const GroupChunk& chunk) {
  if (!incoming_layout_.has_value()) {
    KESTREL_RETURN_IF_ERROR(StartLayoutLocked(hosted, chunk));
  } else if (chunk.partition() != incoming_layout_->partition || chunk.bsp_workers() != incoming_layout_->bsp_workers ||
             chunk.recipient() != incoming_layout_->rank) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rescale %d: server %d names another layout than the others", chunk.layout_generation(), chunk.sender()));
  }
  // Every server holds the same tables: a sender naming others is refused.
  std::vector<std::string> names, held;
  for (const TableConfig& t : chunk.tables()) names.push_back(t.name());
  for (const TableConfig& t : incoming_layout_->groups->own().DescribeTables()) held.push_back(t.name());
  std::sort(names.begin(), names.end());
  if (names != held) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rescale %d: server %d sends other tables than the others", chunk.layout_generation(), chunk.sender()));
  }
  return &incoming_layout_->senders[chunk.sender()];
}

absl::Status RescaleParticipant::StartLayoutLocked(const HostedShards& hosted, const GroupChunk& chunk) {
  if (!hosted.options().has_value()) {
    return absl::FailedPreconditionError("this server's groups were not made by HostedShards::Create: no rescale");
  }
  absl::StatusOr<Partition> partition = Partition::Parse(chunk.partition());
  if (!partition.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the rescale's partition: ", partition.status().message()));
  }
  if (chunk.recipient() < 0 || chunk.recipient() >= partition->num_servers()) {
    return absl::InvalidArgumentError(absl::StrFormat("rescale rows for server %d of a layout of %d servers",
                                                      chunk.recipient(), partition->num_servers()));
  }
  ShardOptions options = *hosted.options();
  options.owner = chunk.recipient();  // this server's rank in the new layout
  options.bsp_workers = chunk.bsp_workers();
  KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<HostedShards> built, HostedShards::Create(options, *partition));
  const std::vector<TableConfig> tables(chunk.tables().begin(), chunk.tables().end());
  for (Shard* group : built->shards()) {
    KESTREL_RETURN_IF_ERROR(group->Restore(tables, /*min_worker_generation=*/0,
                                           [](Shard::RowSink, Shard::SketchSink) { return absl::OkStatus(); }));
  }
  incoming_layout_.emplace();
  incoming_layout_->generation = chunk.layout_generation();
  incoming_layout_->attempt = chunk.attempt();
  incoming_layout_->partition = chunk.partition();
  incoming_layout_->bsp_workers = chunk.bsp_workers();
  incoming_layout_->rank = chunk.recipient();
  incoming_layout_->groups = std::move(built);
  return absl::OkStatus();
}

absl::Status RescaleParticipant::LoadPiece(const std::shared_ptr<HostedShards>& groups, const GroupChunk& chunk) {
  if (chunk.keys().empty() && chunk.rows().empty()) return absl::OkStatus();
  absl::StatusOr<Shard*> group = groups->Group(chunk.owner());
  absl::Status loaded = group.ok() ? (*group)->LoadRows(chunk.table(), chunk.keys(), chunk.rows()).status()
                                   : absl::InvalidArgumentError(absl::StrCat("rows for a range group this server "
                                                                             "does not hold: ",
                                                                             group.status().message()));
  if (!loaded.ok()) {
    absl::MutexLock lock(&mu_);
    if (incoming_layout_.has_value() && incoming_layout_->groups == groups) DropLayoutLocked();  // half loaded
  }
  return loaded;
}

absl::Status RescaleParticipant::CheckNoDiskTier(const HostedShards& hosted) {
  for (const TableConfig& table : hosted.own().DescribeTables()) {
    if (table.capacity().max_disk_bytes() > 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "table '%s' keeps rows on disk (capacity.max_disk_bytes): the layout changes in memory only; resize "
          "the job with a checkpoint and --resume instead",
          table.name()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Partition> RescaleParticipant::CheckRescale(const HostedShards& hosted,
                                                           const RescaleShardRequest& request) const {
  if (!hosted.options().has_value()) {
    return absl::FailedPreconditionError("this server's groups were not made by HostedShards::Create: no rescale");
  }
  if (layout_->left()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("server %d left the job in an earlier rescale", hosted.server()));
  }
  if (request.layout_generation() <= layout_->generation()) {
    return absl::FailedPreconditionError(absl::StrFormat("rescale %d is not after this server's layout %d",
                                                         request.layout_generation(), layout_->generation()));
  }
  absl::StatusOr<Partition> partition = Partition::Parse(request.partition());
  if (!partition.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the rescale's partition: ", partition.status().message()));
  }
  KESTREL_RETURN_IF_ERROR(CheckNoDiskTier(hosted));
  return partition;
}

absl::Status RescaleParticipant::Send(const HostedShards& hosted, const RescaleShardRequest& request,
                                      RescaleShardResponse* response) {
  KESTREL_ASSIGN_OR_RETURN(const Partition next, CheckRescale(hosted, request));
  const int n = next.num_servers();
  if (request.server_addresses_size() != n) {
    return absl::InvalidArgumentError(absl::StrFormat("the rescale names %d addresses for %d servers",
                                                      request.server_addresses_size(), n));
  }
  const int self = hosted.server();   // the rank rows are sent from (of the old layout)
  const int next_rank = request.new_rank();  // and the one this server has in the new layout (-1: it leaves)
  if (next_rank < -1 || next_rank >= n) {
    return absl::InvalidArgumentError(absl::StrFormat("rescale %d names rank %d for this server in a layout of %d",
                                                      request.layout_generation(), next_rank, n));
  }
  std::vector<std::unique_ptr<PieceStream>> streams(n);
  GroupChunk header;
  header.mutable_header()->set_job_id(job_id_);
  header.mutable_header()->set_worker_rank(-1);
  header.set_layout_generation(request.layout_generation());
  header.set_attempt(request.attempt());
  header.set_sender(self);
  header.set_partition(next.ToString());
  header.set_bsp_workers(request.bsp_workers());
  const std::vector<TableConfig> tables = hosted.own().DescribeTables();
  for (int t = 0; t < n; ++t) {
    PieceStream::Deliver deliver;
    if (t == next_rank) {  // rows staying here: staged as any sender's
      deliver = [this, &hosted](const GroupChunk& piece) { return Receive(hosted, piece); };
    } else {
      if (request.server_addresses(t).empty()) {
        return absl::InvalidArgumentError(absl::StrFormat("the rescale names no address for server %d", t));
      }
      if (peers_ == nullptr) return absl::FailedPreconditionError("this server has no links to other servers");
      deliver = peers_->PiecesTo(request.server_addresses(t),
                                 absl::StrFormat("server %d at %s", t, request.server_addresses(t)));
    }
    GroupChunk to = header;
    to.set_recipient(t);
    streams[t] = std::make_unique<PieceStream>(std::move(to), tables, std::move(deliver));
  }
  // Every group this server is the primary of: its rows go to every copy of their range in the new layout.
  for (Shard* group : hosted.shards()) {
    if (!hosted.CheckPrimary(group->owner()).ok()) continue;
    KESTREL_RETURN_IF_ERROR(group->Exclusive([&](const std::vector<Table*>& group_tables) -> absl::Status {
      for (const Table* table : group_tables) {
        const std::string& name = table->config().name();
        KESTREL_RETURN_IF_ERROR(table->ForEachStoredRow([&](uint64_t key, absl::Span<const float> row) {
          const int owner = next.OwnerOf(key);
          for (int j = 0; j < next.replicas(); ++j) {
            KESTREL_RETURN_IF_ERROR(streams[next.ReplicaOfOwner(owner, j)]->Add(owner, name, key, row));
          }
          return absl::OkStatus();
        }));
      }
      return absl::OkStatus();
    }));
  }
  uint64_t rows = 0, bytes = 0;
  for (int t = 0; t < n; ++t) {
    KESTREL_RETURN_IF_ERROR(streams[t]->Finish());
    if (t == next_rank) continue;  // staying here
    rows += streams[t]->rows();
    bytes += streams[t]->bytes();
  }
  response->set_rows_sent(rows);
  response->set_bytes_sent(bytes);
  KLOG(Info) << "rescale " << request.layout_generation() << ": sent " << rows << " rows (" << bytes
             << " bytes) to other servers for a layout of " << n << " servers";
  return absl::OkStatus();
}

absl::Status RescaleParticipant::Install(const HostedShards& hosted, const RescaleShardRequest& request,
                                         RescaleShardResponse* response) {
  KESTREL_ASSIGN_OR_RETURN(const Partition next, CheckRescale(hosted, request));
  const int self = request.new_rank();
  absl::MutexLock lock(&mu_);
  if (self < 0) {  // leaving: nothing to build
    DropLayoutLocked();
    return absl::OkStatus();
  }
  if (!incoming_layout_.has_value() || incoming_layout_->generation != request.layout_generation() ||
      incoming_layout_->attempt != request.attempt()) {
    return absl::FailedPreconditionError(absl::StrFormat("no rows of rescale %d (attempt %d) were received",
                                                         request.layout_generation(), request.attempt()));
  }
  if (incoming_layout_->partition != request.partition()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rescale %d: the rows received were sent for another layout", request.layout_generation()));
  }
  if (incoming_layout_->rank != self) {
    return absl::InvalidArgumentError(absl::StrFormat("rescale %d: the rows received were sent to rank %d, not %d",
                                                      request.layout_generation(), incoming_layout_->rank, self));
  }
  std::vector<int> senders(request.from_servers().begin(), request.from_servers().end());
  if (senders.empty()) {
    for (int s = 0; s < request.senders(); ++s) senders.push_back(s);
  }
  for (int s : senders) {
    auto it = incoming_layout_->senders.find(s);
    if (it == incoming_layout_->senders.end() || !it->second.done || it->second.loaded != it->second.next_sequence) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "rescale %d: server %d has not sent all its rows", request.layout_generation(), s));
    }
  }
  if (incoming_layout_->senders.size() != senders.size()) {
    return absl::InvalidArgumentError(absl::StrFormat("rescale %d: rows from %d servers, expected %d",
                                                      request.layout_generation(), incoming_layout_->senders.size(),
                                                      senders.size()));
  }
  uint64_t rows = 0;
  for (Shard* group : incoming_layout_->groups->shards()) {
    for (const TableStats& table : group->Stats().tables) rows += table.rows;
  }
  next_generation_ = request.layout_generation();
  next_ = std::move(incoming_layout_->groups);
  incoming_layout_.reset();
  response->set_rows(rows);
  KLOG(Info) << "rescale " << request.layout_generation() << ": the groups of server " << self << " of "
             << next.num_servers() << " are complete (" << rows << " rows)";
  return absl::OkStatus();
}

namespace {

// A SWITCH's boundary and worker count, which start the groups' clocks (Shard::RestartClocksAt): checked before
// anything changes.
absl::Status CheckSwitchClocks(const RescaleShardRequest& request) {
  if (request.clock() < 0 || request.workers() < 0 || request.workers() > kMaxWorkers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rescale %d switches at clock %d for %d workers: the clock is >= 0 and the count in [0, %d]",
        request.layout_generation(), request.clock(), request.workers(), kMaxWorkers));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RescaleParticipant::SwitchInPlace(const HostedShards& hosted, const RescaleShardRequest& request) {
  if (layout_->left()) return absl::FailedPreconditionError("this server left the job in an earlier rescale");
  if (request.partition() != hosted.partition().ToString() || request.new_rank() != hosted.server()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rescale %d keeps the groups but names another layout (partition or rank %d; this server is rank %d)",
        request.layout_generation(), request.new_rank(), hosted.server()));
  }
  KESTREL_RETURN_IF_ERROR(ServedLayout::CheckWorkerIds(request.worker_ids_size()));
  KESTREL_RETURN_IF_ERROR(CheckSwitchClocks(request));
  if (request.layout_generation() == layout_->generation() &&
      hosted.own().bsp_workers() == request.bsp_workers()) {
    return absl::OkStatus();  // a repeat of this switch (the scheduler retried it)
  }
  if (request.layout_generation() < layout_->generation()) {
    return absl::FailedPreconditionError(absl::StrFormat("rescale %d is not after this server's layout %d",
                                                         request.layout_generation(), layout_->generation()));
  }
  for (Shard* group : hosted.shards()) {
    KESTREL_RETURN_IF_ERROR(group->SetBspWorkers(request.bsp_workers()));
    group->RestartClocksAt(request.clock(), request.workers());
  }
  layout_->AdvanceKeepingGroups(request.layout_generation(),
                                {request.worker_ids().begin(), request.worker_ids().end()});
  KLOG(Info) << "rescale " << request.layout_generation() << ": server " << hosted.server()
             << " keeps its ranges; BSP over " << request.bsp_workers() << " workers from now on";
  return absl::OkStatus();
}

absl::Status RescaleParticipant::Switch(const HostedShards& hosted, const RescaleShardRequest& request) {
  if (request.keep_groups()) return SwitchInPlace(hosted, request);
  KESTREL_ASSIGN_OR_RETURN(const Partition next, CheckRescale(hosted, request));
  KESTREL_RETURN_IF_ERROR(ServedLayout::CheckWorkerIds(request.worker_ids_size()));
  KESTREL_RETURN_IF_ERROR(CheckSwitchClocks(request));
  const int self = request.new_rank();
  if (self < 0) {
    layout_->Leave(request.layout_generation());
    KLOG(Info) << "rescale " << request.layout_generation() << ": server " << hosted.server()
               << " is not in the new layout and serves nothing from now on";
    return absl::OkStatus();
  }
  if (next_ == nullptr || next_generation_ != request.layout_generation()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("rescale %d was not installed on server %d", request.layout_generation(), self));
  }
  std::shared_ptr<HostedShards> groups = std::move(next_);
  next_generation_ = 0;
  if (groups->replicated()) KESTREL_RETURN_IF_ERROR(groups->routing().Update(request.routing_generation(), {}));
  // The working store held the old groups' rows: start it afresh (every row now held is dirty, so the next
  // checkpoint writes them all).
  if (store_ != nullptr) KESTREL_RETURN_IF_ERROR(store_->Rebase());
  for (Shard* group : groups->shards()) group->RestartClocksAt(request.clock(), request.workers());
  layout_->Adopt(groups, request.layout_generation(), {request.worker_ids().begin(), request.worker_ids().end()});
  // Replicated jobs forward to the other servers by their new ranks from now on.
  if (peers_ != nullptr) peers_->SetAddresses({request.server_addresses().begin(), request.server_addresses().end()});
  KLOG(Info) << "rescale " << request.layout_generation() << ": server " << hosted.server() << " serves the ranges of "
             << "rank " << self << " of " << next.num_servers() << " servers";
  return absl::OkStatus();
}

absl::Status RescaleParticipant::CheckSettle(const RescaleShardRequest& request) const {
  if (layout_->left()) return absl::FailedPreconditionError("this server left the job in an earlier rescale");
  if (request.layout_generation() <= layout_->generation()) {
    return absl::FailedPreconditionError(absl::StrFormat("rescale %d is not after this server's layout %d",
                                                         request.layout_generation(), layout_->generation()));
  }
  if (request.clock() < 0) return absl::InvalidArgumentError(absl::StrFormat("clock %d", request.clock()));
  return absl::OkStatus();
}

absl::Status RescaleParticipant::Fence(const HostedShards& hosted, const RescaleShardRequest& request,
                                       RescaleShardResponse* response) {
  KESTREL_RETURN_IF_ERROR(CheckSettle(request));
  if (request.removed_workers().empty()) return absl::InvalidArgumentError("FENCE names no removed worker");
  const std::vector<int> removed(request.removed_workers().begin(), request.removed_workers().end());
  uint64_t applied = 0;
  for (Shard* group : hosted.shards()) {
    KESTREL_ASSIGN_OR_RETURN(const int n, group->FenceWorkers(removed, request.clock()));
    applied += n;
  }
  response->set_applied_with_removed(applied);
  KLOG(Info) << "rescale " << request.layout_generation() << ": workers " << absl::StrJoin(removed, ",")
             << " fenced off clock " << request.clock() << " (" << applied << " tables had applied it with them)";
  return absl::OkStatus();
}

absl::Status RescaleParticipant::Complete(const HostedShards& hosted, const RescaleShardRequest& request,
                                          RescaleShardResponse* response) {
  KESTREL_RETURN_IF_ERROR(CheckSettle(request));
  uint64_t completed = 0;
  for (Shard* group : hosted.shards()) {
    KESTREL_ASSIGN_OR_RETURN(const int n, group->CompleteClockWithout(request.clock()));
    completed += n;
  }
  response->set_completed(completed);
  KLOG(Info) << "rescale " << request.layout_generation() << ": clock " << request.clock()
             << " applied without the removed workers (" << completed << " tables)";
  return absl::OkStatus();
}

absl::Status RescaleParticipant::Frontier(const HostedShards& hosted, const RescaleShardRequest& request,
                                          RescaleShardResponse* response) {
  KESTREL_RETURN_IF_ERROR(CheckSettle(request));
  if (request.removed_workers().empty()) return absl::InvalidArgumentError("FRONTIER names no removed worker");
  const std::vector<int> removed(request.removed_workers().begin(), request.removed_workers().end());
  for (int w : removed) {
    if (w < 0 || w >= kMaxWorkers) {
      return absl::InvalidArgumentError(absl::StrFormat("removed worker rank %d is not in [0, %d)", w, kMaxWorkers));
    }
  }
  int64_t low = std::numeric_limits<int64_t>::max(), high = -1;
  for (Shard* group : hosted.shards()) {
    const auto [group_low, group_high] = group->PushFrontier(removed);
    low = std::min(low, group_low);
    high = std::max(high, group_high);
  }
  if (high < 0) low = high = 0;  // no table yet: nothing pushed anywhere
  response->set_frontier(low);
  response->set_frontier_high(high);
  return absl::OkStatus();
}

absl::Status RescaleParticipant::Hold(const HostedShards& hosted, const RescaleShardRequest& request) {
  KESTREL_RETURN_IF_ERROR(CheckSettle(request));
  if (request.hold_reads_from() < 0 || request.hold_reads_from() > request.clock()) {
    return absl::InvalidArgumentError(absl::StrFormat("HOLD: reads held from clock %d is not in [0, %d]",
                                                      request.hold_reads_from(), request.clock()));
  }
  for (Shard* group : hosted.shards()) group->HoldReads(request.hold_reads_from(), request.clock());
  KLOG(Info) << "rescale " << request.layout_generation() << ": reads of iterations >= " << request.clock()
             << " are held";
  return absl::OkStatus();
}

void RescaleParticipant::Abort(uint64_t generation, uint64_t attempt) {
  if (next_generation_ != 0 && next_generation_ <= generation) {
    next_.reset();
    next_generation_ = 0;
  }
  absl::MutexLock lock(&mu_);
  aborted_ = std::max(aborted_, std::make_pair(generation, attempt));
  if (incoming_layout_.has_value() &&
      std::make_pair(incoming_layout_->generation, incoming_layout_->attempt) <= aborted_) {
    DropLayoutLocked();
  }
  KLOG(Info) << "rescale " << generation << " (attempt " << attempt << ") aborted: the layout stays as it was";
}

}  // namespace kestrel
