// UsableCores: the number of CPUs this process may run on (its affinity mask, which taskset, cgroups' cpusets and
// container runtimes narrow), at least 1. The one count every default thread number is derived from.
#ifndef KESTREL_COMMON_USABLE_CORES_H_
#define KESTREL_COMMON_USABLE_CORES_H_

namespace kestrel {

int UsableCores();

}  // namespace kestrel

#endif  // KESTREL_COMMON_USABLE_CORES_H_
