// Member: one registration of the job as the scheduler records it: its role, rank and id, where it serves, the
// incarnation that names it, and whether (and since when) it is alive. A plain record: Membership
// (scheduler/membership.h) keeps the tables of them, RescaleLayout (scheduler/rescale_layout.h) the joining and
// removed ones, and callers receive copies.
#ifndef KESTREL_SCHEDULER_MEMBER_H_
#define KESTREL_SCHEDULER_MEMBER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace kestrel {

enum class Role { kServer, kWorker };

const char* RoleName(Role role);

// The length of an incarnation, in bytes (128 random bits).
inline constexpr size_t kIncarnationBytes = 16;

struct Member {
  Role role = Role::kWorker;
  int rank = -1;  // -1: never registered
  int id = -1;    // the rank its certificate names (see scheduler/membership.h); known before it registers
  std::string address;
  std::string incarnation;  // kIncarnationBytes random bytes; "" before the first registration
  uint64_t registered_generation = 0;  // the job generation right after this registration
  absl::Time last_heartbeat;
  bool alive = false;
  uint64_t routing_generation = 0;  // servers: the routing generation their latest heartbeat said they act on
  absl::Time dead_since = absl::InfiniteFuture();  // when it was declared dead (InfiniteFuture: it was not)
};

}  // namespace kestrel

#endif  // KESTREL_SCHEDULER_MEMBER_H_
