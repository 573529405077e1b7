#include "scheduler/liveness_judge.h"

#include <algorithm>

namespace kestrel {

LivenessJudge::LivenessJudge(absl::Duration heartbeat_timeout, absl::Duration stall_threshold,
                             absl::Duration deaf_grace)
    : heartbeat_timeout_(heartbeat_timeout), stall_threshold_(stall_threshold), deaf_grace_(deaf_grace) {}

absl::Duration LivenessJudge::Check(absl::Time now) {
  absl::Duration stall;
  if (last_check_ != absl::InfinitePast() && now - last_check_ > stall_threshold_) {
    stall = now - last_check_ - stall_threshold_;
    stalled_ += stall;
  }
  last_check_ = std::max(last_check_, now);
  return stall;
}

absl::Time LivenessJudge::AfterStall(absl::Time last_heartbeat, absl::Duration stall, absl::Time now) {
  return last_heartbeat > now ? last_heartbeat + stall : std::min(now, last_heartbeat + stall);
}

std::optional<absl::Time> LivenessJudge::Heard(absl::Time now) {
  std::optional<absl::Time> grace;
  if (deaf_grace_ != absl::InfiniteDuration() && last_heard_ != absl::InfinitePast() &&
      now - last_heard_ > heartbeat_timeout_) {
    ++deaf_periods_;
    grace = now + deaf_grace_ - heartbeat_timeout_;
  }
  last_heard_ = std::max(last_heard_, now);
  return grace;
}

absl::Time LivenessJudge::AfterDeafness(absl::Time last_heartbeat, absl::Time grace) {
  return std::max(last_heartbeat, grace);
}

bool LivenessJudge::Silent(absl::Time last_heartbeat, absl::Time now) const {
  // deaf_grace: a silence counts once someone was heard after its deadline (the scheduler itself can hear).
  return now - last_heartbeat > heartbeat_timeout_ &&
         (deaf_grace_ == absl::InfiniteDuration() || last_heard_ - last_heartbeat > heartbeat_timeout_);
}

}  // namespace kestrel
