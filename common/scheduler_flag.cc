#include "common/scheduler_flag.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, scheduler, "",
          "host:port of kestrel_scheduler. A server registers there and heartbeats (told it was declared dead "
          "or superseded, it shuts down and exits 3); a worker joins the job there; kestrel_ctl asks it (empty: "
          "localhost:7000).");
