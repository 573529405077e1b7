// The command-line flags that several of Kestrel's binaries share, defined once (link //common:process_flags
// and read them with absl::GetFlag(FLAGS_job_id) etc.):
//
//   --job_id          every process of one job passes the same; requests carry it. Default: "kestrel".
//   --scheduler       host:port of kestrel_scheduler. Default: "" (kestrel_ctl: localhost:7000).
//   --checkpoint_dir  the job's checkpoint root (common/checkpoint_layout.h). Default: "" (no checkpoints).
//   --rank_offset     MPI / Slurm MPMD launches: subtracted from the launcher's global rank. Default: 0.
#ifndef KESTREL_COMMON_PROCESS_FLAGS_H_
#define KESTREL_COMMON_PROCESS_FLAGS_H_

#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, job_id);
ABSL_DECLARE_FLAG(std::string, scheduler);
ABSL_DECLARE_FLAG(std::string, checkpoint_dir);
ABSL_DECLARE_FLAG(int, rank_offset);

#endif  // KESTREL_COMMON_PROCESS_FLAGS_H_
