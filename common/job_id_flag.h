// --job_id: one flag, defined once for every process of a job: server, scheduler, worker, kestrel_ctl (link //common:job_id_flag and read it with
// absl::GetFlag(FLAGS_job_id)).
#ifndef KESTREL_COMMON_JOB_ID_FLAG_H_
#define KESTREL_COMMON_JOB_ID_FLAG_H_

#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, job_id);

#endif  // KESTREL_COMMON_JOB_ID_FLAG_H_
