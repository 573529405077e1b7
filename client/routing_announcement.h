// The scheduler's routing announcements (replicated jobs, docs/replication.md): which servers are out of service
// as of which routing generation, as servers and workers take them from the scheduler's answers.
#ifndef KESTREL_CLIENT_ROUTING_ANNOUNCEMENT_H_
#define KESTREL_CLIENT_ROUTING_ANNOUNCEMENT_H_

#include <cstdint>

#include "common/partition.h"
#include "google/protobuf/repeated_field.h"

namespace kestrel {

// Replicated jobs: takes the scheduler's routing announcement (a ClusterView's or a HeartbeatResponse's routing
// generation and out-of-service servers) into `table`, logging when it moves (and a refused one). Returns
// whether the table moved to it.
bool ApplyRouting(RoutingTable& table, uint64_t generation,
                  const google::protobuf::RepeatedField<int32_t>& out_of_service);

}  // namespace kestrel

#endif  // KESTREL_CLIENT_ROUTING_ANNOUNCEMENT_H_
