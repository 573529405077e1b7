// OnEachServer: the scheduler's fan-out of one admin call (ServerAdmin) to every server rank, concurrently.
//
// Each call runs on a thread of its own, so one slow server costs the others nothing; the call returns once every
// call has answered (each carries the admin deadline).
#ifndef KESTREL_SCHEDULER_EACH_SERVER_H_
#define KESTREL_SCHEDULER_EACH_SERVER_H_

#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace kestrel {

// Calls `call(rank, addresses[rank])` for every rank and answers the results by rank. A rank whose address is
// empty (not alive) is not called: it answers Unavailable ("server N is not alive"). `Result` is absl::Status or
// an absl::StatusOr.
template <typename Result, typename Call>
std::vector<Result> OnEachServer(const std::vector<std::string>& addresses, const Call& call) {
  std::vector<Result> results(addresses.size(), Result(absl::UnknownError("not run")));
  std::vector<std::thread> threads;
  threads.reserve(addresses.size());
  for (size_t s = 0; s < addresses.size(); ++s) {
    threads.emplace_back([&, s] {
      const int rank = static_cast<int>(s);
      results[s] = addresses[s].empty() ? Result(absl::UnavailableError(absl::StrFormat("server %d is not alive", rank)))
                                        : Result(call(rank, addresses[s]));
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

}  // namespace kestrel

#endif  // KESTREL_SCHEDULER_EACH_SERVER_H_
