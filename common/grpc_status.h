// Conversion between absl::Status and grpc::Status, used only at the gRPC edge (*_service, *_client).
// The canonical codes are numerically identical; messages pass through unchanged.
#ifndef KESTREL_COMMON_GRPC_STATUS_H_
#define KESTREL_COMMON_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace kestrel {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

[[nodiscard]] inline absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace kestrel

#endif  // KESTREL_COMMON_GRPC_STATUS_H_
