#include "server/group_transfer.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status.h"
#include "server/peer_links.h"
#include "server/piece_stream.h"
#include "server/replication.h"
#include "server/table.h"

namespace kestrel {

GroupTransfer::GroupTransfer(std::string job_id, PeerLinks* peers) : job_id_(std::move(job_id)), peers_(peers) {}

absl::Status GroupTransfer::Send(const HostedShards& hosted, const CopyGroupRequest& request,
                                 CopyGroupResponse* response) {
  KESTREL_RETURN_IF_ERROR(CheckReplicated(hosted));
  KESTREL_ASSIGN_OR_RETURN(Shard * group, hosted.own().Count(hosted.Group(request.owner())));
  if (request.target() == hosted.server() || request.target_address().empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("cannot copy the ranges of server %d to server %d at '%s'",
                                                      request.owner(), request.target(), request.target_address()));
  }
  if (peers_ == nullptr) return absl::FailedPreconditionError("this server has no links to other servers");
  GroupChunk header;
  header.mutable_header()->set_job_id(job_id_);
  header.mutable_header()->set_worker_rank(-1);
  header.set_owner(request.owner());
  // Workers are held at a clock boundary: every update before it is applied, and none arrives meanwhile.
  header.set_complete_clocks(group->CompleteClocks());
  PieceStream stream(header, group->DescribeTables(),
                     peers_->PiecesTo(request.target_address(),
                                      absl::StrFormat("server %d at %s", request.target(), request.target_address())));
  // One cut: no request runs on the group while it is read (the scheduler holds every worker anyway).
  KESTREL_RETURN_IF_ERROR(group->Exclusive([&](const std::vector<Table*>& tables) -> absl::Status {
    for (const Table* table : tables) {
      const std::string& name = table->config().name();
      KESTREL_RETURN_IF_ERROR(table->ForEachStoredRow([&](uint64_t key, absl::Span<const float> row) {
        return stream.Add(request.owner(), name, key, row);
      }));
    }
    return stream.Finish();
  }));
  response->set_rows(stream.rows());
  response->set_bytes(stream.bytes());
  return absl::OkStatus();
}

absl::Status GroupTransfer::StagePieceLocked(const GroupChunk& chunk, IncomingCopy* copy) {
  if (chunk.sequence() == 0) {
    if (chunk.complete_clocks() < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a copy of range group %d says its clocks are complete through %d: a clock is >= 0", chunk.owner(),
          chunk.complete_clocks()));
    }
    for (const Piece& piece : copy->pieces) staged_bytes_ -= piece.keys.size() + piece.rows.size();
    *copy = IncomingCopy();
    copy->owner = chunk.owner();
    copy->tables.assign(chunk.tables().begin(), chunk.tables().end());
    copy->complete_clocks = chunk.complete_clocks();
  } else if (copy->done || copy->next_sequence != chunk.sequence()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "piece %d of rows for range group %d arrived out of order (expected piece %d%s)", chunk.sequence(),
        chunk.owner(), copy->next_sequence, copy->done ? ", after the last one" : ""));
  }
  if (!chunk.keys().empty() || !chunk.rows().empty()) {
    auto config = std::find_if(copy->tables.begin(), copy->tables.end(),
                               [&](const TableConfig& t) { return t.name() == chunk.table(); });
    if (config == copy->tables.end()) {
      return absl::InvalidArgumentError(absl::StrCat("piece of table '", chunk.table(), "', not in the copy"));
    }
    KESTREL_ASSIGN_OR_RETURN(int floats, Table::StoredFloats(*config));
    const size_t keys = chunk.keys().size() / sizeof(uint64_t);
    if (chunk.keys().size() % sizeof(uint64_t) != 0 || chunk.rows().size() != keys * floats * sizeof(float)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "piece of table '%s': %d bytes of keys and %d of rows are not whole rows of %d floats", chunk.table(),
          chunk.keys().size(), chunk.rows().size(), floats));
    }
    const uint64_t bytes = chunk.keys().size() + chunk.rows().size();
    if (staged_bytes_ + bytes > max_staged_bytes_) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "rows received for range group %d exceed the %d bytes this server stages", chunk.owner(),
          max_staged_bytes_));
    }
    staged_bytes_ += bytes;
    copy->pieces.push_back({chunk.owner(), chunk.table(), chunk.keys(), chunk.rows()});
  }
  copy->next_sequence = chunk.sequence() + 1;
  copy->done = chunk.last();
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> GroupTransfer::Install(Shard& group, const std::vector<TableConfig>& tables,
                                                const std::vector<const Piece*>& pieces) {
  uint64_t installed = 0;
  KESTREL_RETURN_IF_ERROR(group.Restore(
      tables, /*min_worker_generation=*/0, [&](Shard::RowSink rows, Shard::SketchSink) -> absl::Status {
        std::vector<float> row;  // the bytes may sit unaligned in the piece
        for (const Piece* piece : pieces) {
          const size_t n = piece->keys.size() / sizeof(uint64_t);
          const size_t floats = piece->rows.size() / sizeof(float) / std::max<size_t>(n, 1);
          row.resize(floats);
          for (size_t i = 0; i < n; ++i) {
            uint64_t key;
            std::memcpy(&key, piece->keys.data() + i * sizeof(key), sizeof(key));
            std::memcpy(row.data(), piece->rows.data() + i * floats * sizeof(float), floats * sizeof(float));
            KESTREL_ASSIGN_OR_RETURN(bool took, rows(piece->table, key, row));
            if (!took) {
              return absl::InvalidArgumentError(absl::StrFormat(
                  "key 0x%016x of table '%s' is not in the ranges of server %d", key, piece->table,
                  group.owner()));
            }
            ++installed;
          }
        }
        return absl::OkStatus();
      }));
  return installed;
}

absl::Status GroupTransfer::Receive(const HostedShards& hosted, const GroupChunk& chunk, uint64_t* installed) {
  KESTREL_ASSIGN_OR_RETURN(Shard * group, hosted.Group(chunk.owner()));
  absl::MutexLock lock(&mu_);
  if (chunk.sequence() != 0 && (!incoming_.has_value() || incoming_->owner != chunk.owner())) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "piece %d of a copy of the ranges of server %d arrived out of order (expected piece %d of server %d's)",
        chunk.sequence(), chunk.owner(), incoming_.has_value() ? incoming_->next_sequence : 0,
        incoming_.has_value() ? incoming_->owner : -1));
  }
  if (!incoming_.has_value()) incoming_.emplace();
  absl::Status staged = StagePieceLocked(chunk, &*incoming_);
  if (!staged.ok() || !incoming_->done) {
    if (absl::IsResourceExhausted(staged)) DropCopyLocked();
    return staged;
  }
  std::vector<const Piece*> pieces;
  for (const Piece& piece : incoming_->pieces) pieces.push_back(&piece);
  absl::StatusOr<uint64_t> rows = Install(*group, incoming_->tables, pieces);
  KLOG(Info) << "installed a copy of the ranges of server " << incoming_->owner << ": "
             << (rows.ok() ? absl::StrCat(*rows, " rows") : rows.status().ToString());
  const int64_t complete_clocks = incoming_->complete_clocks;
  DropCopyLocked();
  if (!rows.ok()) return rows.status();
  // The copy holds every update of the clocks before the primary's: reads of later clocks wait as there.
  group->StartClocksAt(complete_clocks);
  *installed = *rows;
  return absl::OkStatus();
}

void GroupTransfer::DropCopyLocked() {
  if (!incoming_.has_value()) return;
  for (const Piece& piece : incoming_->pieces) staged_bytes_ -= piece.keys.size() + piece.rows.size();
  incoming_.reset();
}

}  // namespace kestrel
