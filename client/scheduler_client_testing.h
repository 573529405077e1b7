// SchedulerClientForTests: a SchedulerClient whose every call a test answers itself (each a std::function; an
// unset one answers UNIMPLEMENTED naming the call), so the sessions' core (server/server_session.h,
// worker/worker_session.h) is driven without a channel or a scheduler process. Counts the calls. Thread-safe as
// far as the functions the test sets are.
#ifndef KESTREL_CLIENT_SCHEDULER_CLIENT_TESTING_H_
#define KESTREL_CLIENT_SCHEDULER_CLIENT_TESTING_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "client/scheduler_client.h"

namespace kestrel {

class SchedulerClientForTests final : public SchedulerClient {
 public:
  std::function<absl::StatusOr<RegisterResponse>(MemberRole role, const std::string& address, int id)> register_;
  std::function<absl::StatusOr<HeartbeatResponse>(MemberRole role, int id, const std::string& incarnation,
                                                  uint64_t routing_generation)>
      heartbeat;
  std::function<absl::StatusOr<int64_t>(int rank, int64_t clock)> wait_to_start;
  std::function<absl::StatusOr<int64_t>(int rank, int64_t finished, bool done)> advance;
  std::function<absl::Status(int rank, int64_t finished)> leave;
  std::function<absl::StatusOr<DescribeResponse>()> describe;
  std::function<absl::StatusOr<RegisterResponse>(int id, const std::string& incarnation)> rejoin;
  std::function<absl::StatusOr<RequestRollbackResponse>(int id, uint64_t generation)> request_rollback;

  std::atomic<int> registers{0}, heartbeats{0};

  [[nodiscard]] absl::StatusOr<RegisterResponse> Register(MemberRole role, const std::string& address, int id) override {
    ++registers;
    return register_ ? register_(role, address, id) : Unset("Register");
  }
  [[nodiscard]] absl::StatusOr<HeartbeatResponse> Heartbeat(MemberRole role, int id, const std::string& incarnation,
                                              uint64_t routing_generation, int64_t) override {
    ++heartbeats;
    return heartbeat ? heartbeat(role, id, incarnation, routing_generation) : Unset("Heartbeat");
  }
  [[nodiscard]] absl::StatusOr<int64_t> WaitToStart(int rank, int64_t clock, uint64_t, const std::string&, uint64_t,
                                      int64_t* permitted_through) override {
    if (permitted_through != nullptr) *permitted_through = clock;
    return wait_to_start ? wait_to_start(rank, clock) : Unset("WaitToStart");
  }
  [[nodiscard]] absl::StatusOr<int64_t> Advance(int rank, int64_t finished, uint64_t, const std::string&, bool done,
                                  const WorkerState*, uint64_t, int64_t* permitted_through) override {
    if (permitted_through != nullptr) *permitted_through = -1;
    return advance ? advance(rank, finished, done) : Unset("Advance");
  }
  [[nodiscard]] absl::Status Leave(int rank, int64_t finished, uint64_t, const std::string&, uint64_t) override {
    return leave ? leave(rank, finished) : Unset("Leave");
  }
  [[nodiscard]] absl::StatusOr<DescribeResponse> Describe() override { return describe ? describe() : Unset("Describe"); }
  [[nodiscard]] absl::StatusOr<RegisterResponse> Rejoin(int id, const std::string& incarnation) override {
    return rejoin ? rejoin(id, incarnation) : Unset("Rejoin");
  }
  [[nodiscard]] absl::StatusOr<RequestRollbackResponse> RequestRollback(int id, const std::string&, uint64_t generation,
                                                          const std::string&) override {
    return request_rollback ? request_rollback(id, generation) : Unset("RequestRollback");
  }
  [[nodiscard]] absl::StatusOr<int64_t> RequestCheckpoint() override { return Unset("RequestCheckpoint"); }
  [[nodiscard]] absl::StatusOr<ScaleResponse> Scale(ScaleRequest, absl::Duration) override { return Unset("Scale"); }

 private:
  [[nodiscard]] static absl::Status Unset(const char* call) {
    return absl::UnimplementedError(std::string(call) + " is not answered by this test");
  }
};

}  // namespace kestrel

#endif  // KESTREL_CLIENT_SCHEDULER_CLIENT_TESTING_H_
