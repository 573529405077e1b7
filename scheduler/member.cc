#include "scheduler/member.h"

namespace kestrel {

const char* RoleName(Role role) { return role == Role::kServer ? "server" : "worker"; }

}  // namespace kestrel
