// ParameterServer.Step's request and response, written and read straight in gRPC buffers (the gRPC edge and the
// routed client only), as common/pull_wire.h does for Pull and Push.
//
// Server side: ReadStepRequest reads a StepRequest field by field from the received slices (keys and values are
// views of them where a field lies inside one slice), skipping unknown fields as protobuf does, and
// StepResponseWriter writes each read's rows straight into a slice of its own laid out as one StepResponse.pulls
// field (the slices concatenate into a valid StepResponse).
// Client side: WriteStepRequest encodes every table's keys and gradients once, into one buffer laid out as a
// StepRequest, and ReadStepPulls decodes the answer's rows straight from the received slices into the caller's.
//
// Any encoding protobuf accepts is read; what the writers produce is a valid encoding (padded varints included),
// so a protobuf-generated peer on the other side interoperates. server/step_request_fuzz.cc checks both against
// protobuf.
#ifndef KESTREL_COMMON_STEP_WIRE_H_
#define KESTREL_COMMON_STEP_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/ps.pb.h"

namespace kestrel {

// One StepTable's fields, wherever they were read from (views: they must not outlive their source).
struct StepTableFields {
  absl::string_view table;
  bool dense = false;
  int32_t dim = 0;
  bool push = false;
  absl::string_view push_keys;    // packed uint64 LE
  absl::string_view push_values;  // packed values of push_type
  ValueType push_type = VALUE_TYPE_FLOAT32;
  int32_t scale_exponent = 0;
  bool pull = false;
  absl::string_view pull_keys;
  ValueType pull_type = VALUE_TYPE_FLOAT32;
};

// A StepRequest's fields: a parsed message's (StepFieldsOf) or the received buffers' (StepRequestView).
struct StepFields {
  const RequestHeader* header = nullptr;
  int64_t pull_clock = 0;
  std::vector<StepTableFields> tables;
};

// Views of `request`'s fields, valid while it lives unchanged.
StepFields StepFieldsOf(const StepRequest& request);

// A StepRequest read from the received buffers. Views point into `slices` or `scratch`: never copied or moved.
struct StepRequestView : StepFields {
  StepRequestView() { header = &header_storage; }
  StepRequestView(const StepRequestView&) = delete;
  StepRequestView& operator=(const StepRequestView&) = delete;

  RequestHeader header_storage;
  std::vector<grpc::Slice> slices;  // keeps the views' bytes alive
  std::deque<std::string> scratch;  // fields that span slices, copied once (a deque never moves them)
};

// InvalidArgument when `buffer` is no well-formed StepRequest, or names more than kMaxStepTables tables (checked
// while reading, before anything is allocated for the next).
[[nodiscard]] absl::Status ReadStepRequest(const grpc::ByteBuffer& buffer, StepRequestView* out);

// Builds one StepResponse, a slice per read. Thread-compatible.
class StepResponseWriter {
 public:
  // Appends a read of `values` values of `type` (rows of `dim`); returns where its rows go (4-byte aligned for
  // fp32, 2-byte for the half types).
  void* AddPull(size_t values, int dim, ValueType type);
  // Appends a read answered as a message (dense reads).
  void AddPull(const PullResponse& pull);
  grpc::ByteBuffer Finish();

 private:
  std::vector<grpc::Slice> slices_;
};

// One table's part of a Step, as the client writes it.
struct StepTableWrite {
  absl::string_view table;
  bool dense = false;
  int32_t dim = 0;  // values per row (dense: per block)
  // The push: one row of dim gradients per key, encoded as push_type (fp16 with the scale common/half.h picks
  // for them). Default: no push.
  bool push = false;
  absl::Span<const uint64_t> push_keys;
  const float* grads = nullptr;
  ValueType push_type = VALUE_TYPE_FLOAT32;
  // The read, answered in pull_type. Default: no read.
  bool pull = false;
  absl::Span<const uint64_t> pull_keys;
  ValueType pull_type = VALUE_TYPE_FLOAT32;
};

// The serialized StepRequest of `tables` (keys and gradients encoded straight into it). InvalidArgument when a
// gradient cannot be encoded in its push_type.
[[nodiscard]] absl::StatusOr<std::string> WriteStepRequest(const RequestHeader& header, int64_t pull_clock,
                                             absl::Span<const StepTableWrite> tables);

// Where one read of a Step's answer lands: `floats` values of `type`, decoded into `out`.
struct StepRead {
  float* out = nullptr;
  size_t floats = 0;
  ValueType type = VALUE_TYPE_FLOAT32;
};

// Decodes the serialized StepResponse in `buffer`: one pulls entry per element of `reads`, in order. DataLoss
// when it is malformed or answers another number, size or type of reads; InvalidArgument for a non-finite value
// of a half type.
[[nodiscard]] absl::Status ReadStepPulls(const grpc::ByteBuffer& buffer, absl::Span<const StepRead> reads);

}  // namespace kestrel

#endif  // KESTREL_COMMON_STEP_WIRE_H_
