// ServerRouting: which servers of a replicated job serve (docs/replication.md), and which owe the job a rollback.
//
// A dead server whose ranges all have a copy elsewhere is failed over (FailOver): it goes out of service, the
// routing generation moves, and the job runs on without it. Re-replication puts it back in service
// (PutBackInService), a rollback puts every server back (AllBackInService), a rescale starts its new layout with
// every server in service (Relayout); each moves the routing generation. A server declared dead while in service
// is remembered as lost until a rollback or failover (a replacement that registers meanwhile holds none of the lost
// rows); one out of service serves nothing, so its death loses nothing.
//
// By server rank; it does not hold the members: callers say which are dead. Owned by Membership and guarded by
// its mutex; not thread-safe itself.
#ifndef KESTREL_SCHEDULER_SERVER_ROUTING_H_
#define KESTREL_SCHEDULER_SERVER_ROUTING_H_

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

namespace kestrel {

// Which servers serve nothing (common/partition.h Routing), as of a routing generation.
struct RoutingState {
  uint64_t generation = 0;  // 0 until the first failover
  std::vector<int> out_of_service;  // server ranks, increasing
  uint64_t failovers = 0;           // servers failed over so far (rollbacks do not reset it)
  uint64_t rereplications = 0;      // servers put back in service with synced copies so far

  // The generation ServerRouting::AllBackInService moves this routing to: a new one when a server is out.
  uint64_t AllInServiceGeneration() const { return generation + (out_of_service.empty() ? 0 : 1); }
};

class ServerRouting {
 public:
  // `num_servers` ranks, every one in service, none lost; routing generation 0.
  explicit ServerRouting(int num_servers);

  // Server `rank` is out of service (failed over, not yet put back). `rank` must be in range.
  bool out_of_service(int rank) const { return out_of_service_[rank]; }
  // Some server out of service is not one of `ranks`.
  bool AnyOutOfServiceBut(const std::vector<int>& ranks) const;
  // Some server was declared dead while in service since the last rollback or failover.
  bool AnyLost() const;

  // Server `rank` was declared dead: lost, unless it is out of service.
  void Died(int rank);
  // A rollback began: every lost server's rows come back from the checkpoint.
  void ForgetLost();
  // A rollback ended: every server restored the checkpoint, so each copy of each range is in service again (a new
  // routing generation when some server was out).
  void AllBackInService();

  // Puts out of service every server in service that is lost or `dead` (by rank: registered and not alive), if
  // `covered` says the resulting out-of-service set (by rank) leaves every range a copy; returns them (a new
  // routing generation; nothing lost any more). Nothing changes, and none is returned, when there is none or
  // `covered` refuses.
  std::vector<int> FailOver(const std::vector<bool>& dead,
                            absl::FunctionRef<bool(const std::vector<bool>& out_of_service)> covered);
  // Re-replication: server `rank` (`alive`, out of service) serves again; returns the new routing generation.
  // FailedPrecondition when it is out of range, not alive or in service.
  [[nodiscard]] absl::StatusOr<uint64_t> PutBackInService(int rank, bool alive);
  // A rescale committed a layout of `num_servers`: every one in service, none lost; returns the new routing
  // generation.
  uint64_t Relayout(int num_servers);

  RoutingState state() const;

 private:
  std::vector<bool> out_of_service_;  // by server rank
  // By server rank: declared dead while in service since the last rollback or failover. Remembered after a
  // replacement registers: it holds none of the lost rows.
  std::vector<bool> lost_;
  uint64_t generation_ = 0;
  uint64_t failovers_ = 0;
  uint64_t rereplications_ = 0;
};

}  // namespace kestrel

#endif  // KESTREL_SCHEDULER_SERVER_ROUTING_H_
