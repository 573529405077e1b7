// Registration: how a server or a worker joins the job at the scheduler, shared by both sessions
// (server/server_session.h, worker/worker_session.h).
#ifndef KESTREL_CLIENT_REGISTRATION_H_
#define KESTREL_CLIENT_REGISTRATION_H_

#include <chrono>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/scheduler_client.h"
#include "proto/scheduler.pb.h"

namespace kestrel {

struct Registered {
  RegisterResponse answer;
  // When the Register call that was answered was sent (steady clock): the scheduler heard the member no
  // earlier (a server's primary lease counts from it).
  std::chrono::steady_clock::time_point sent;
};

// Registers as `role` with id `id` (-1: any free one) and `address`, retrying every kRegisterRetry for up to
// `timeout` while the answer may still change: a transient failure (common/retry.h: the scheduler is not up yet,
// or the id is outside the job until a rescale names it) and ALREADY_EXISTS (this id's crashed predecessor is not
// declared dead yet).
// OUT_OF_RANGE as the scheduler answered it (an elastic job removed this id: the member exits 0); any other
// failure with its code, naming `scheduler` (the address, for the message).
[[nodiscard]] absl::StatusOr<Registered> RegisterWithRetry(SchedulerClient& client, const std::string& scheduler, MemberRole role,
                                             const std::string& address, int id, absl::Duration timeout);

// How long RegisterWithRetry waits between attempts.
inline constexpr absl::Duration kRegisterRetry = absl::Milliseconds(500);

}  // namespace kestrel

#endif  // KESTREL_CLIENT_REGISTRATION_H_
