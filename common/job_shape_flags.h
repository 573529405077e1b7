// The job's shape as the scheduler and the servers are told it, defined once for both (they must agree):
//
//   --num_servers        servers the key space is split across; -1: from the launcher's environment, else 1
//   --ranges_per_server  the uniform partition's ranges per server
//   --replicas           copies of every key range (docs/replication.md)
//
// and the partition they make (UniformPartitionFromFlags). The scheduler's --num_workers and a server's explicit
// --partition are their own.
#ifndef KESTREL_COMMON_JOB_SHAPE_FLAGS_H_
#define KESTREL_COMMON_JOB_SHAPE_FLAGS_H_

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "common/partition.h"

ABSL_DECLARE_FLAG(int, num_servers);
ABSL_DECLARE_FLAG(int, ranges_per_server);
ABSL_DECLARE_FLAG(int, replicas);

namespace kestrel {

// The key ranges of `num_servers` servers: num_servers * --ranges_per_server equal ranges dealt round-robin,
// each with --replicas copies. InvalidArgument for counts out of range.
[[nodiscard]] absl::StatusOr<Partition> UniformPartitionFromFlags(int num_servers);

}  // namespace kestrel

#endif  // KESTREL_COMMON_JOB_SHAPE_FLAGS_H_
