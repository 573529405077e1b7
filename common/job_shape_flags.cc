#include "common/job_shape_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(int, num_servers, -1,
          "Servers the job's key space is split across (>= 1); the scheduler and every server must agree. -1: from "
          "the launcher's environment (KESTREL_NUM_SERVERS, TF_CONFIG, DMLC_NUM_SERVER), else 1.");
ABSL_FLAG(int, ranges_per_server, 1,
          "Key ranges per server: the key space is cut into num_servers * ranges_per_server equal ranges, dealt "
          "round-robin.");
ABSL_FLAG(int, replicas, 1,
          "Copies of every key range, on distinct servers, in [1, --num_servers] (docs/replication.md); the "
          "scheduler and every server must agree. 1: a server's death rolls the job back to its last checkpoint. "
          "R >= 2: each server also holds the backups of the R-1 servers before it, and a death fails over to a "
          "backup without a rollback while every range keeps a copy.");

namespace kestrel {

absl::StatusOr<Partition> UniformPartitionFromFlags(int num_servers) {
  absl::StatusOr<Partition> partition = Partition::Uniform(num_servers, absl::GetFlag(FLAGS_ranges_per_server));
  if (partition.ok() && absl::GetFlag(FLAGS_replicas) != 1) {
    partition = partition->WithReplicas(absl::GetFlag(FLAGS_replicas));
  }
  return partition;
}

}  // namespace kestrel
