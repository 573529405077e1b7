#include "client/registration.h"

#include "absl/strings/str_cat.h"
#include "common/retry.h"

namespace kestrel {

absl::StatusOr<Registered> RegisterWithRetry(SchedulerClient& client, const std::string& scheduler, MemberRole role,
                                             const std::string& address, int id, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const auto sent = std::chrono::steady_clock::now();
    absl::StatusOr<RegisterResponse> answer = client.Register(role, address, id);
    if (answer.ok()) return Registered{*std::move(answer), sent};
    const absl::Status& status = answer.status();
    if (absl::IsOutOfRange(status)) return status;
    // ALREADY_EXISTS names a state that changes by itself here: the predecessor is declared dead within a timeout.
    const bool may_change = IsTransient(status) || absl::IsAlreadyExists(status);
    if (!may_change || absl::Now() + kRegisterRetry >= deadline) {
      return absl::Status(status.code(),
                          absl::StrCat("cannot register with the scheduler at ", scheduler, ": ", status.message()));
    }
    absl::SleepFor(kRegisterRetry);
  }
}

}  // namespace kestrel
