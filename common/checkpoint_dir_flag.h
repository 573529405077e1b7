// --checkpoint_dir: one flag, defined once for the scheduler, the servers and kestrel_export (link //common:checkpoint_dir_flag and read it with
// absl::GetFlag(FLAGS_checkpoint_dir)).
#ifndef KESTREL_COMMON_CHECKPOINT_DIR_FLAG_H_
#define KESTREL_COMMON_CHECKPOINT_DIR_FLAG_H_

#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, checkpoint_dir);

#endif  // KESTREL_COMMON_CHECKPOINT_DIR_FLAG_H_
