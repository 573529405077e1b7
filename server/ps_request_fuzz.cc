// Fuzz target: serialized ParameterServer requests through the server's handlers (ps_handlers.h) against a small
// in-memory Shard, exactly as the gRPC service (ps_service.cc) calls them, plus the pull wire format
// (common/pull_wire.h) both ways.
//
// Input: a configuration byte (SSP or BSP with 2 workers, which of 2 servers the shard is), then operations, each
// an opcode byte and a message (FuzzInput::Bytes): Pull, PullDense, Push, PushDense, CreateTable (the bytes
// parsed as that request; a Pull goes through grpc::ByteBuffer deserialization and PullResponseWriter as on the
// server), or raw bytes read by ReadPullValues as a client reads a response. The shard starts with a sparse
// (dim 4, Adagrad), a dense (10 floats in blocks of 3) and a sparse dim-1 FTRL table. Invariants:
//   - a refused request leaves the shard unchanged (same Fingerprint, same tables) and is counted as rejected
//     exactly once; an accepted one is not counted;
//   - an accepted pull answers keys * dim floats, and the zero-copy path (HandlePullInto + PullResponseWriter,
//     read back by ReadPullValues) answers the very bytes HandlePull does;
//   - ReadPullValues of arbitrary bytes, cut into arbitrary slices, fails cleanly or fills exactly what it is
//     asked for.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/fuzz_input.h"
#include "common/half.h"
#include "common/pull_wire.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "proto/ps.pb.h"
#include "server/fuzz_shard.h"
#include "server/ps_handlers.h"
#include "server/shard.h"

namespace kestrel {
namespace {

constexpr const char* kJob = kFuzzJob;

// A sparse Pull as the gRPC edge serves it (deserialized from a ByteBuffer, rows written into the response
// slice), checked against HandlePull.
absl::Status Pull(Shard& shard, const std::string& bytes, size_t piece) {
  grpc::ByteBuffer buffer = Sliced(bytes, piece);
  PullRequest request;
  if (!grpc::SerializationTraits<PullRequest>::Deserialize(&buffer, &request).ok()) {
    return absl::InvalidArgumentError("not a PullRequest");
  }
  PullResponse plain;
  const absl::Status status = HandlePull(shard, request, &plain);
  PullResponseWriter writer;
  size_t floats = 0;
  const absl::Status into = HandlePullInto(shard, request, [&](size_t n, int, ValueType type) {
    floats = n;
    return writer.Allocate(n, plain.dim(), type);
  });
  FUZZ_CHECK(status.code() == into.code(), "HandlePull and HandlePullInto disagree");
  if (!status.ok()) return status;
  const ValueType type = request.value_type();
  FUZZ_CHECK(plain.value_type() == type);
  FUZZ_CHECK(plain.values().size() == floats * BytesPerValue(type));
  const size_t keys = request.keys().size() / sizeof(uint64_t);
  FUZZ_CHECK(keys == 0 ? floats == 0 : floats % keys == 0 && static_cast<int>(floats / keys) == plain.dim());
  std::vector<float> values(floats), expected(floats);
  FUZZ_CHECK(ReadPullValues(writer.Finish(), values.data(), floats, type).ok(), "the pull wire does not read back");
  FUZZ_CHECK(DecodeValues(type, plain.values().data(), floats, 0, expected.data()).ok());
  FUZZ_CHECK(floats == 0 || std::memcmp(values.data(), expected.data(), floats * sizeof(float)) == 0,
             "the zero-copy pull answered other values than HandlePull");
  return status;
}

// A sparse Push as the gRPC edge serves it: read field by field from the sliced buffer (ReadPushRequest),
// which must agree with protobuf's parse, then applied.
absl::Status Push(Shard& shard, const std::string& bytes, size_t piece) {
  PushRequest request;
  if (!request.ParseFromString(bytes)) return absl::InvalidArgumentError("not a message");
  PushRequestView view;
  FUZZ_CHECK(ReadPushRequest(Sliced(bytes, piece), &view).ok(), "protobuf parses a push the raw reader refuses");
  FUZZ_CHECK(view.header->SerializeAsString() == request.header().SerializeAsString(), "headers differ");
  FUZZ_CHECK(view.table == request.table() && view.keys == request.keys() && view.values == request.values());
  FUZZ_CHECK(view.value_type == request.value_type() && view.dim == request.dim() && view.part == request.part() &&
                 view.parts == request.parts() && view.scale_exponent == request.scale_exponent(),
             "scalar fields differ");
  PushResponse response;
  return HandlePushFields(shard, /*dense=*/false, view, &response);
}

template <typename Request, typename Response>
[[nodiscard]] absl::Status Call(absl::Status (*handler)(Shard&, const Request&, Response*), Shard& shard,
                  const std::string& bytes) {
  Request request;
  if (!request.ParseFromString(bytes)) return absl::InvalidArgumentError("not a message");
  Response response;
  return handler(shard, request, &response);
}

}  // namespace
}  // namespace kestrel

// Malformed messages are the point here: protobuf's parse-error logging would only slow the fuzzer down.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kestrel;  // NOLINT(build/namespaces): a fuzz entry point
  FuzzInput in(data, size);
  std::unique_ptr<Shard> shard = MakeFuzzShard(in.U8());
  for (int ops = 0; !in.empty() && ops < 64; ++ops) {
    const uint8_t op = in.U8();
    const std::string bytes = in.Bytes();
    const size_t piece = 1 + (op >> 3);
    if (op % 6 == 5) {  // a client reading a PullResponse
      const size_t floats = op >> 3;
      std::vector<float> out(floats + 1, 0.0f);
      const float canary = 1234.5f;
      out[floats] = canary;
      const absl::Status read = ReadPullValues(Sliced(bytes, piece), out.data(), floats);
      FUZZ_CHECK(read.ok() || read.code() == absl::StatusCode::kDataLoss ||
                 read.code() == absl::StatusCode::kInvalidArgument);
      FUZZ_CHECK(out[floats] == canary, "ReadPullValues wrote past the floats it was given");
      continue;
    }
    const uint64_t fingerprint = shard->Fingerprint();
    const size_t tables = shard->DescribeTables().size();
    const uint64_t rejected = shard->Stats().rejected_requests;
    absl::Status status;
    bool parsed = true;
    switch (op % 6) {
      case 0:
        status = Pull(*shard, bytes, piece);
        parsed = status.message() != "not a PullRequest";
        break;
      case 1:
        status = Call(&HandlePullDense, *shard, bytes);
        break;
      case 2:
        status = Push(*shard, bytes, piece);
        break;
      case 3:
        status = Call(&HandlePushDense, *shard, bytes);
        break;
      case 4:
        status = Call(&HandleCreateTable, *shard, bytes);
        break;
    }
    if (status.message() == "not a message") parsed = false;
    if (!parsed) continue;
    const uint64_t now_rejected = shard->Stats().rejected_requests;
    if (status.ok()) {
      FUZZ_CHECK(now_rejected == rejected, "an accepted request was counted as rejected");
    } else {
      FUZZ_CHECK(shard->Fingerprint() == fingerprint, "a refused request changed the shard");
      FUZZ_CHECK(shard->DescribeTables().size() == tables, "a refused request changed the tables");
      // HandlePull and HandlePullInto each count the refusal.
      FUZZ_CHECK(now_rejected == rejected + (op % 6 == 0 ? 2 : 1), "a refusal was not counted exactly once");
    }
  }
  StatsRequest stats;
  stats.mutable_header()->set_job_id(kJob);
  stats.set_fingerprints(true);
  StatsResponse response;
  FUZZ_CHECK(HandleStats(*shard, stats, &response).ok());
  return 0;
}
