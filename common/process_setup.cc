#include "common/process_setup.h"

#include <malloc.h>

namespace kestrel {

void TuneMallocForLargeBuffers() {
#ifdef __GLIBC__
  // Serve allocations below 256 MiB from the heap, and trim the heap only when 1 GiB is free at its top.
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace kestrel
