// --scheduler: one flag, defined once for the members that join a job (server, worker) and kestrel_ctl (link //common:scheduler_flag and read it with
// absl::GetFlag(FLAGS_scheduler)).
#ifndef KESTREL_COMMON_SCHEDULER_FLAG_H_
#define KESTREL_COMMON_SCHEDULER_FLAG_H_

#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, scheduler);

#endif  // KESTREL_COMMON_SCHEDULER_FLAG_H_
