#include "common/rank_offset_flag.h"

#include "absl/flags/flag.h"

ABSL_FLAG(int, rank_offset, 0,
          "MPI / Slurm MPMD launches: subtracted from the launcher's global rank to give this process's rank.");
