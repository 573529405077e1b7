#include "common/checkpoint_dir_flag.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, checkpoint_dir, "",
          "Checkpoint root shared by every process of the job (common/checkpoint_layout.h); a server keeps its "
          "working RocksDB under <dir>/live/. Empty: no checkpoints, and a server's death restarts the job from "
          "its beginning.");
