// The hot path's PullResponse, written and read directly in gRPC buffers (the gRPC edge only).
//
// A pull of 1e5 keys x 16 floats answers 6.4 MB. Going through the generated message costs a zero-fill and a
// copy on the server (values string, then serialization) and a copy on the client (parse, then scatter).
// Instead the server writes the rows straight into one grpc::Slice laid out as a valid PullResponse, and the
// client copies the values field straight from the received slices into the caller's rows.
//
// Layout written: field 3 (dim) then field 1 (values), both varints padded to 5 bytes (valid protobuf, accepted
// by any parser) so the 12-byte prefix keeps the rows 4-byte aligned. Any PullResponse encoding is read.
#ifndef KESTREL_COMMON_PULL_WIRE_H_
#define KESTREL_COMMON_PULL_WIRE_H_

#include <cstddef>

#include "absl/status/status.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace kestrel {

// Builds one PullResponse buffer. Thread-compatible.
class PullResponseWriter {
 public:
  // Returns room for `floats` values of rows of `dim` floats. Call at most once.
  float* Allocate(size_t floats, int dim);
  // The finished response (empty values when Allocate was never called).
  grpc::ByteBuffer Finish();

 private:
  grpc::Slice slice_;
  bool allocated_ = false;
};

// Copies the values of the serialized PullResponse in `buffer` to `out`, which holds `floats` floats.
// DataLoss when the buffer is malformed or carries another number of values.
absl::Status ReadPullValues(const grpc::ByteBuffer& buffer, float* out, size_t floats);

}  // namespace kestrel

#endif  // KESTREL_COMMON_PULL_WIRE_H_
