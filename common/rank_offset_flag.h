// --rank_offset: one flag, defined once for the members whose rank may come from a launcher (server, worker) (link //common:rank_offset_flag and read it with
// absl::GetFlag(FLAGS_rank_offset)).
#ifndef KESTREL_COMMON_RANK_OFFSET_FLAG_H_
#define KESTREL_COMMON_RANK_OFFSET_FLAG_H_

#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(int, rank_offset);

#endif  // KESTREL_COMMON_RANK_OFFSET_FLAG_H_
