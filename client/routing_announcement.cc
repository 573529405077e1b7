#include "client/routing_announcement.h"

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"

namespace kestrel {

bool ApplyRouting(RoutingTable& table, uint64_t generation,
                  const google::protobuf::RepeatedField<int32_t>& out_of_service) {
  const uint64_t before = table.generation();
  absl::Status status = table.Update(generation, {out_of_service.data(), static_cast<size_t>(out_of_service.size())});
  if (!status.ok()) {
    KLOG(Warning) << "ignoring the scheduler's routing: " << status;
    return false;
  }
  if (table.generation() == before) return false;
  KLOG(Info) << "routing generation " << generation << ": servers out of service ["
             << absl::StrJoin(out_of_service, ",") << "]";
  return true;
}

}  // namespace kestrel
