#include "server/piece_stream.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "common/status.h"

namespace kestrel {

PieceStream::PieceStream(GroupChunk header, std::vector<TableConfig> tables, Deliver deliver)
    : header_(std::move(header)), tables_(std::move(tables)), deliver_(std::move(deliver)),
      sender_([this] { SendLoop(); }) {}

PieceStream::~PieceStream() {
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  sender_.join();
}

absl::Status PieceStream::Add(int owner, absl::string_view table, uint64_t key, absl::Span<const float> row) {
  GroupChunk& piece = pending_[owner];
  if (piece.table() != table) {
    if (!piece.keys().empty()) KESTREL_RETURN_IF_ERROR(Send(&piece, /*last=*/false));
    piece.set_table(std::string(table));
  }
  piece.set_owner(owner);
  piece.mutable_keys()->append(reinterpret_cast<const char*>(&key), sizeof(key));
  piece.mutable_rows()->append(reinterpret_cast<const char*>(row.data()), row.size() * sizeof(float));
  ++rows_;
  bytes_ += sizeof(key) + row.size() * sizeof(float);
  if (piece.keys().size() + piece.rows().size() < kPieceBytes) return absl::OkStatus();
  return Send(&piece, /*last=*/false);
}

absl::Status PieceStream::Finish() {
  for (auto& [owner, piece] : pending_) {
    if (!piece.keys().empty()) KESTREL_RETURN_IF_ERROR(Send(&piece, /*last=*/false));
  }
  GroupChunk last;
  last.set_owner(header_.owner());
  KESTREL_RETURN_IF_ERROR(Send(&last, /*last=*/true));
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](PieceStream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->queue_.empty() && !s->busy_; }, this));
  return error_;
}

absl::Status PieceStream::Send(GroupChunk* piece, bool last) {
  GroupChunk sent = header_;
  sent.set_owner(piece->owner());
  sent.set_table(piece->table());
  sent.set_keys(std::move(*piece->mutable_keys()));
  sent.set_rows(std::move(*piece->mutable_rows()));
  sent.set_sequence(sequence_++);
  sent.set_last(last);
  if (sent.sequence() == 0) {
    for (const TableConfig& t : tables_) *sent.add_tables() = t;
  } else {
    sent.clear_partition();
  }
  piece->clear_keys();
  piece->clear_rows();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](PieceStream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
        return s->queue_.size() < kInFlight || !s->error_.ok();
      },
      this));
  if (!error_.ok()) return error_;
  queue_.push_back(std::move(sent));
  return absl::OkStatus();
}

void PieceStream::SendLoop() {
  while (true) {
    GroupChunk piece;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](PieceStream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return !s->queue_.empty() || s->closed_; },
          this));
      if (queue_.empty()) return;  // closed
      piece = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    const absl::Status status = error_ok() ? deliver_(piece) : absl::OkStatus();
    absl::MutexLock lock(&mu_);
    busy_ = false;
    if (!status.ok() && error_.ok()) error_ = status;
  }
}

bool PieceStream::error_ok() {
  absl::MutexLock lock(&mu_);
  return error_.ok();
}

}  // namespace kestrel
