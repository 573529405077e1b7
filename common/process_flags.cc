#include "common/process_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, job_id, "kestrel",
          "The job's id: every process of one job passes the same, and every request carries it. Default: kestrel.");
ABSL_FLAG(std::string, scheduler, "",
          "host:port of kestrel_scheduler. A server registers there and heartbeats (told it was declared dead or "
          "superseded, it shuts down and exits 3); a worker joins the job there. Default: none (kestrel_ctl: "
          "localhost:7000).");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Checkpoint root shared by every process of the job (common/checkpoint_layout.h); a server keeps its "
          "working RocksDB under <dir>/live/. Default: none: no checkpoints, and a server's death restarts the job "
          "from its beginning.");
ABSL_FLAG(int, rank_offset, 0,
          "MPI / Slurm MPMD launches: subtracted from the launcher's global rank to give this process's rank. "
          "Default: 0.");
