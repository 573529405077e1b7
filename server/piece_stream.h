// PieceStream: rows streamed to one server as numbered GroupChunk pieces (a group copy's or a rescale's). The
// delivery of a piece to another server's ReceiveGroup is a PeerLinks' (server/peer_links.h).
#ifndef KESTREL_SERVER_PIECE_STREAM_H_
#define KESTREL_SERVER_PIECE_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/ps.pb.h"

namespace kestrel {

// Streams rows to one server as GroupChunk pieces of about kPieceBytes, numbered 0, 1, 2, ... Rows are kept in
// one pending piece per range group, so rows of several groups arriving interleaved still travel in full pieces.
// `deliver` sends a finished piece (over gRPC, or into this server's own staging), in order, on the stream's own
// thread: reading the rows overlaps sending them, and the streams to different servers send at once. At most
// kInFlight finished pieces wait for it.
//
// Add and Finish are called from one thread; the stream owns its sender thread, joined by the destructor.
class PieceStream {
 public:
  using Deliver = std::function<absl::Status(const GroupChunk&)>;
  static constexpr size_t kPieceBytes = size_t{4} << 20;
  static constexpr size_t kInFlight = 3;

  // `header`: every piece's fields but the rows, the sequence and `last`; `tables` go with piece 0.
  PieceStream(GroupChunk header, std::vector<TableConfig> tables, Deliver deliver);
  ~PieceStream();

  PieceStream(const PieceStream&) = delete;
  PieceStream& operator=(const PieceStream&) = delete;

  // Adds one row of `owner`'s group; sends the group's pending piece once it is full. The first failure so far.
  [[nodiscard]] absl::Status Add(int owner, absl::string_view table, uint64_t key, absl::Span<const float> row);
  // Sends every pending row, then the last piece, and waits until every piece was delivered: the first failure.
  [[nodiscard]] absl::Status Finish();
  // Rows and bytes (keys and rows) added.
  uint64_t rows() const { return rows_; }
  uint64_t bytes() const { return bytes_; }

 private:
  // Queues `piece` for the sender thread (waiting while kInFlight are queued); the first failure so far.
  [[nodiscard]] absl::Status Send(GroupChunk* piece, bool last);
  void SendLoop();
  bool error_ok();

  const GroupChunk header_;
  const std::vector<TableConfig> tables_;
  const Deliver deliver_;
  std::map<int, GroupChunk> pending_;  // by range group (the adding thread's)
  uint64_t sequence_ = 0;
  uint64_t rows_ = 0, bytes_ = 0;
  absl::Mutex mu_;
  std::deque<GroupChunk> queue_ ABSL_GUARDED_BY(mu_);  // finished, not yet delivered
  bool busy_ ABSL_GUARDED_BY(mu_) = false;             // the sender thread is delivering one
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);             // the first failed delivery
  std::thread sender_;  // last: started once the members above exist
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_PIECE_STREAM_H_
