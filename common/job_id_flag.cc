#include "common/job_id_flag.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, job_id, "kestrel",
          "The job's id: every process of one job passes the same, and every request carries it.");
