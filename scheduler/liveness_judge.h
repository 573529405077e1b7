// LivenessJudge: when a member's silence makes it dead. A member silent for longer than heartbeat_timeout is
// declared dead, except for time the scheduler itself did not run (stall_threshold) and silence the scheduler
// cannot tell from its own deafness (deaf_grace); MembershipOptions (scheduler/membership.h) states both rules.
//
// A small value class: it keeps the judgement's own clocks (the previous check, the latest message heard) and its
// tallies (stalled time, deaf periods), not the members. Where a rule moves every member's last heartbeat (a stall
// ends, a deaf period ends) it answers by how much, and the caller moves them (AfterStall, AfterDeafness).
//
// Owned by Membership and guarded by its mutex; not thread-safe itself. Time is passed in (absl::Time now), so
// tests control it.
#ifndef KESTREL_SCHEDULER_LIVENESS_JUDGE_H_
#define KESTREL_SCHEDULER_LIVENESS_JUDGE_H_

#include <cstdint>
#include <optional>

#include "absl/time/time.h"

namespace kestrel {

class LivenessJudge {
 public:
  // MembershipOptions' heartbeat_timeout, stall_threshold and deaf_grace; an infinite stall_threshold or
  // deaf_grace turns that rule off (plain timeouts).
  LivenessJudge(absl::Duration heartbeat_timeout, absl::Duration stall_threshold, absl::Duration deaf_grace);

  // A liveness check at `now` (Membership::ExpireSilent). Returns the stall it ends: when the gap since the
  // previous check is longer than stall_threshold, the scheduler did not run for the gap's excess over the
  // threshold, which counts for nobody's silence (every member's last heartbeat moves by it: AfterStall); only
  // the excess, so a scheduler that is merely slow still declares the silent dead, a little later. ZeroDuration
  // when there is none (and at the first check).
  absl::Duration Check(absl::Time now);
  // A member last heard at `last_heartbeat`, after `stall` (from Check) that ended at `now`: the stall counts for
  // none of its silence, its silence before the stall is kept, and a member inside its deaf grace (last_heartbeat
  // ahead of now) keeps the grace, lengthened by the stall.
  static absl::Time AfterStall(absl::Time last_heartbeat, absl::Duration stall, absl::Time now);

  // A message (a heartbeat or a registration, from any member) arrived at `now`. When it ends a deaf period
  // (deaf_grace on, and no one heard for longer than heartbeat_timeout: the scheduler was cut off, or everyone
  // stopped at once), returns the grace it gives: from this first voice on, every member has deaf_grace to be
  // heard again before its silence counts (AfterDeafness). Else nullopt.
  std::optional<absl::Time> Heard(absl::Time now);
  // A member last heard at `last_heartbeat`, given `grace` (from Heard).
  static absl::Time AfterDeafness(absl::Time last_heartbeat, absl::Time grace);

  // Whether a member last heard at `last_heartbeat` has been silent long enough to be declared dead at `now`:
  // for longer than heartbeat_timeout, and (deaf_grace on) the scheduler has heard someone after that deadline.
  bool Silent(absl::Time last_heartbeat, absl::Time now) const;

  // The stalls Check did not count as anyone's silence, in all.
  absl::Duration stalled() const { return stalled_; }
  // The deaf periods Heard ended, in all.
  int64_t deaf_periods() const { return deaf_periods_; }

 private:
  absl::Duration heartbeat_timeout_;
  absl::Duration stall_threshold_;
  absl::Duration deaf_grace_;
  absl::Time last_check_ = absl::InfinitePast();  // the previous Check's `now`
  absl::Duration stalled_;
  absl::Time last_heard_ = absl::InfinitePast();  // the latest Heard's `now`
  int64_t deaf_periods_ = 0;
};

}  // namespace kestrel

#endif  // KESTREL_SCHEDULER_LIVENESS_JUDGE_H_
