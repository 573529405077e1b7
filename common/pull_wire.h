// The hot path's PullResponse, written and read directly in gRPC buffers (the gRPC edge only).
//
// A pull of 1e5 keys x 16 floats answers 6.4 MB. Going through the generated message costs a zero-fill and a
// copy on the server (values string, then serialization) and a copy on the client (parse, then scatter).
// Instead the server writes the rows straight into one grpc::Slice laid out as a valid PullResponse, and the
// client copies the values field straight from the received slices into the caller's rows.
//
// Layout written: field 3 (dim), for the half types field 2 (value_type), then field 1 (values), varints padded to
// 5 bytes (valid protobuf, accepted by any parser) so the 12-byte prefix keeps fp32 rows 4-byte aligned (18
// bytes, 2-byte aligned, with value_type). Any PullResponse encoding is read.
//
// Pushes are read the same way (ReadPushRequest): the server's raw Push handler takes the keys and values
// straight from the received slices rather than through protobuf's parse, which copies both into strings.
#ifndef KESTREL_COMMON_PULL_WIRE_H_
#define KESTREL_COMMON_PULL_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "common/slice_reader.h"
#include "proto/ps.pb.h"

namespace kestrel {

// Builds one PullResponse buffer. Thread-compatible.
class PullResponseWriter {
 public:
  // Returns room for `values` values of `type` (rows of `dim` values): 4-byte aligned for fp32, 2-byte for
  // the half types. Call at most once.
  void* Allocate(size_t values, int dim, ValueType type = VALUE_TYPE_FLOAT32);
  // The finished response (empty values when Allocate was never called).
  grpc::ByteBuffer Finish();

 private:
  grpc::Slice slice_;
  bool allocated_ = false;
};

// One slice holding a PullResponse of `values` values of `type` (rows of `dim`), its rows left for the caller
// to write at the returned address (4-byte aligned for fp32, 2-byte for the half types). `nested`: the slice is
// a StepResponse.pulls field (its tag and length first), so that a response's slices can be concatenated.
void* AllocatePullSlice(size_t values, int dim, ValueType type, bool nested, grpc::Slice* slice);

// Decodes the values of the serialized PullResponse in `buffer`, which must be `floats` values of `type`
// (its value_type field, wherever it is, must say so), into `out`. DataLoss when the buffer is malformed or
// carries another number or type of values; InvalidArgument for a non-finite value.
[[nodiscard]] absl::Status ReadPullValues(const grpc::ByteBuffer& buffer, float* out, size_t floats,
                            ValueType type = VALUE_TYPE_FLOAT32);
// The same, of the PullResponse that `reader` reads to its end (a nested one: SliceReader::Sub).
[[nodiscard]] absl::Status ReadPullValues(SliceReader& reader, float* out, size_t floats, ValueType type);

// A push's fields, wherever they were read from: a parsed PushRequest, or the received gRPC buffers
// (PushRequestView). The views must outlive their use.
struct PushFields {
  const RequestHeader* header = nullptr;
  absl::string_view table;
  absl::string_view keys;    // packed uint64 LE
  absl::string_view values;  // packed values of value_type
  ValueType value_type = VALUE_TYPE_FLOAT32;
  int32_t dim = 0;
  int32_t part = 0;
  int32_t parts = 0;
  int32_t scale_exponent = 0;
};

// A PushRequest read field by field from the received buffers, without protobuf's parse: table, keys and
// values are views of the received slices where a field lies inside one slice, else of a scratch string (one
// copy, straight from the slices). Unknown fields are skipped. Valid while this object lives.
struct PushRequestView : PushFields {
  PushRequestView() { header = &header_storage; }
  // Views may point into `slices` (inline ones included) or the scratch strings: never copied or moved.
  PushRequestView(const PushRequestView&) = delete;
  PushRequestView& operator=(const PushRequestView&) = delete;

  RequestHeader header_storage;
  std::vector<grpc::Slice> slices;  // keeps the views' bytes alive
  std::string table_scratch, key_scratch, value_scratch;
};

// InvalidArgument when `buffer` is no well-formed PushRequest.
[[nodiscard]] absl::Status ReadPushRequest(const grpc::ByteBuffer& buffer, PushRequestView* out);

}  // namespace kestrel

#endif  // KESTREL_COMMON_PULL_WIRE_H_
