#include "client/heartbeater.h"

#include <utility>

#include "common/logging.h"

namespace kestrel {

Heartbeater::Heartbeater(SchedulerClient* client, MemberRole role, int id, std::string incarnation,
                         absl::Duration interval, std::function<void(absl::Status)> on_refused,
                         std::function<void(const HeartbeatResponse&)> on_answer)
    : thread_([this, client, role, id, incarnation = std::move(incarnation), interval,
               on_refused = std::move(on_refused), on_answer = std::move(on_answer)] {
        while (true) {
          {
            absl::MutexLock lock(&mu_);
            mu_.AwaitWithTimeout(absl::Condition(
                                     +[](Heartbeater* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
                                       return self->stop_ || self->soon_;
                                     },
                                     this),
                                 interval);
            if (stop_) return;
            soon_ = false;
          }
          const auto sent = std::chrono::steady_clock::now();
          auto response = client->Heartbeat(role, id, incarnation, routing_generation_.load(), progress_.load());
          if (absl::IsFailedPrecondition(response.status())) {
            on_refused(response.status());
            return;
          }
          if (!response.ok()) {
            KLOG(Warning) << "heartbeat of id " << id << " failed: " << response.status();
          } else {
            answered_sent_.store(
                std::chrono::duration_cast<std::chrono::nanoseconds>(sent.time_since_epoch()).count());
            if (on_answer) on_answer(*response);
          }
        }
      }) {}

void Heartbeater::BeatSoon() {
  absl::MutexLock lock(&mu_);
  soon_ = true;
}

Heartbeater::~Heartbeater() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

}  // namespace kestrel
