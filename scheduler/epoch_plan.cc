#include "scheduler/epoch_plan.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/line_assignment.h"
#include "common/status.h"

namespace kestrel {

absl::StatusOr<Standing> StandingAt(const WorkerState& state, int64_t at, int rank, int workers) {
  if (!state.has_reader() || !state.has_share() || state.share().count() < 1) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "worker %d has not reported where its reader is at clock %d", rank, state.clock()));
  }
  Standing standing;
  standing.epoch = state.epoch();
  standing.epoch_start = state.epoch_start();
  standing.share = state.share();
  standing.reader = state.reader();
  standing.consumed = AssignmentOf(state.share()).CountBelow(state.reader().global_line());
  if (at == state.clock()) return standing;
  if (at < state.clock() || state.batch_lines() <= 0 || state.epoch_end() <= state.epoch_start()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "worker %d's pushes end at clock %d, but its last report (clock %d) does not say where its reader is "
        "there (an older worker binary?)",
        rank, at, state.clock()));
  }
  const uint64_t batch = static_cast<uint64_t>(state.batch_lines());
  if (at < state.epoch_end()) {
    standing.consumed += static_cast<uint64_t>(at - state.clock()) * batch;
    return standing;
  }
  // Past the reported epoch's end: the next epoch, dealt plainly, read from its start.
  standing.epoch = state.epoch() + 1;
  standing.epoch_start = state.epoch_end();
  standing.share = LineShareOf(PlainAssignment(rank, workers));
  standing.reader = ReaderPositionProto();
  standing.consumed = static_cast<uint64_t>(at - state.epoch_end()) * batch;
  return standing;
}

absl::StatusOr<std::vector<WorkerState>> PlanEpoch(const std::vector<WorkerState>& states, int64_t cut,
                                                   const std::vector<int>& old_of_new,
                                                   const std::vector<int>& removed,
                                                   const std::vector<int64_t>& removed_at) {
  if (!removed_at.empty() && removed_at.size() != removed.size()) {
    return absl::InvalidArgumentError("removed_at names a clock for each removed worker, or none");
  }
  auto is_removed = [&](int w) { return std::find(removed.begin(), removed.end(), w) != removed.end(); };
  int ref = -1;  // a staying worker: they agree on where the cut falls
  for (int w = 0; w < static_cast<int>(states.size()); ++w) {
    if (is_removed(w)) continue;
    const WorkerState& s = states[w];
    if (s.clock() != cut || !s.has_reader() || !s.has_share() || s.share().count() < 1) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "worker %d has not reported where its reader is at clock %d (an older worker binary?): its share of the "
          "epoch cannot be handed on",
          w, cut));
    }
    if (ref == -1) ref = w;
    if (s.epoch() != states[ref].epoch() || s.epoch_start() != states[ref].epoch_start()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "workers %d and %d disagree on the epoch at clock %d (%d and %d)", w, ref, cut, s.epoch(),
          states[ref].epoch()));
    }
  }
  if (ref == -1) return absl::FailedPreconditionError("no worker stays: nobody to hand the epoch to");
  const WorkerState& at = states[ref];
  EpochPlan plan;
  plan.set_epoch(at.epoch());
  plan.set_start_clock(cut);
  std::optional<ReaderPositionProto> reader;  // none at an epoch's start: the next epoch starts afresh
  if (cut != at.epoch_start()) {
    // Mid-epoch: every unread line of the epoch goes to exactly one worker (common/line_assignment.h), read from
    // the slowest worker's position (every unread line lies beyond it). A removed worker hands on the lines
    // from where its last report says its reader was: under BSP its half-done clock was completed without it.
    std::vector<LineAssignment> shares;
    std::vector<uint64_t> consumed;
    bool from_start = false;  // some worker's lines start at the epoch's first line
    for (int w = 0; w < static_cast<int>(states.size()); ++w) {
      const WorkerState& s = states[w];
      // A removed worker stands where its pushes end (its state moved there), the others at their reports.
      int64_t stands_at = s.clock();
      for (size_t i = 0; i < removed_at.size(); ++i) {
        if (removed[i] == w) stands_at = std::max(stands_at, removed_at[i]);
      }
      WorkerState never;  // a removed worker that never reported, moved from the first epoch's start
      if (stands_at > s.clock() && !s.has_share() && at.epoch() == 0 && !at.has_plan()) {
        never.set_epoch_end(at.epoch_end());
        never.set_batch_lines(at.batch_lines());
        *never.mutable_share() = LineShareOf(PlainAssignment(w, static_cast<int>(states.size())));
        *never.mutable_reader() = ReaderPositionProto();
      }
      absl::StatusOr<Standing> standing =
          StandingAt(never.has_share() ? never : s, stands_at, w, static_cast<int>(states.size()));
      if (!standing.ok() && stands_at != s.clock()) return standing.status();
      if (standing.ok() && standing->epoch == at.epoch() && standing->epoch_start == at.epoch_start()) {
        shares.push_back(AssignmentOf(standing->share));
        consumed.push_back(standing->consumed);
        if (!reader.has_value() || standing->reader.global_line() < reader->global_line()) reader = standing->reader;
      } else if (is_removed(w) && !s.has_share() && at.epoch() == 0 && !at.has_plan()) {
        // Removed before it ever reported: it read nothing of the first epoch's plain sharding.
        shares.push_back(PlainAssignment(w, static_cast<int>(states.size())));
        consumed.push_back(0);
        from_start = true;
      } else {
        return absl::FailedPreconditionError(absl::StrFormat(
            "removed worker %d stopped in epoch %d, the others are in epoch %d: its unread lines cannot be handed on",
            w, s.epoch(), at.epoch()));
      }
    }
    if (from_start) reader = ReaderPositionProto();
    KESTREL_ASSIGN_OR_RETURN(std::vector<LineAssignment> next, ReassignLines(shares, consumed, old_of_new));
    for (const LineAssignment& a : next) *plan.add_shares() = LineShareOf(a);
  }
  // Each new worker's state at the cut as it will report it (a rollback to the checkpoint cut here, then another
  // rescale at that clock, plans from these): its share of the epoch (the plan's, or the new count's modulo at
  // an epoch's start), nothing of it read yet.
  const int new_count = static_cast<int>(old_of_new.size());
  std::vector<WorkerState> out(new_count);
  for (int v = 0; v < new_count; ++v) {
    WorkerState& s = out[v];
    s.set_clock(cut);
    if (reader.has_value()) *s.mutable_reader() = *reader;
    *s.mutable_plan() = plan;
    s.set_epoch(at.epoch());
    s.set_epoch_start(plan.shares_size() > 0 ? at.epoch_start() : cut);
    *s.mutable_share() = plan.shares_size() > 0 ? plan.shares(v) : LineShareOf(PlainAssignment(v, new_count));
  }
  return out;
}

}  // namespace kestrel
