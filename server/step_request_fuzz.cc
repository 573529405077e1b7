// Fuzz target: ParameterServer.Step's wire (common/step_wire.h) against protobuf, both ways, and through the
// server's Step handlers (ps_handlers.h) on a small in-memory Shard (server/fuzz_shard.h).
//
// Input: a configuration byte (MakeFuzzShard), then operations, each an opcode byte and a message
// (FuzzInput::Bytes), op % 3 choosing:
//   0 a StepRequest as the gRPC edge receives it, cut into slices of 1 + (op >> 2) bytes. Whenever protobuf
//     parses it, ReadStepRequest must read it too (unless it names more than kMaxStepTables tables) with the
//     very same fields. It is then applied: its pushes (a refused Step leaves the shard unchanged), then its reads
//     through a StepResponseWriter, whose answer protobuf must parse and ReadStepPulls must decode to exactly the rows
//     a separate Pull / PullDense of the same fields answers.
//   1 a step the client writes: WriteStepRequest of up to 3 tables whose names, keys and gradients come from the
//     message must parse with protobuf to those fields (fp32 gradients bit for bit).
//   2 a StepResponse as the client receives it (arbitrary bytes, sliced): ReadStepPulls of 1 + (op >> 6) % 3
//     reads (read i: (op >> (2 + 2i)) & 3 values, of fp16, fp32, bf16 in turn) fails cleanly or fills exactly what it
//     is asked for, and whenever protobuf parses the bytes as an answer of exactly those reads, decodes what
//     DecodeValues decodes.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/fuzz_input.h"
#include "common/half.h"
#include "common/limits.h"
#include "common/step_wire.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/ps.pb.h"
#include "server/fuzz_shard.h"
#include "server/ps_handlers.h"
#include "server/shard.h"

namespace kestrel {
namespace {

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  FUZZ_CHECK(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

bool SameFields(const StepFields& a, const StepFields& b) {
  if (a.header->SerializeAsString() != b.header->SerializeAsString() || a.pull_clock != b.pull_clock ||
      a.tables.size() != b.tables.size()) {
    return false;
  }
  for (size_t i = 0; i < a.tables.size(); ++i) {
    const StepTableFields &x = a.tables[i], &y = b.tables[i];
    if (x.table != y.table || x.dense != y.dense || x.dim != y.dim || x.push != y.push || x.push_keys != y.push_keys ||
        x.push_values != y.push_values || x.push_type != y.push_type || x.scale_exponent != y.scale_exponent ||
        x.pull != y.pull || x.pull_keys != y.pull_keys || x.pull_type != y.pull_type) {
      return false;
    }
  }
  return true;
}

void ServerStep(Shard& shard, const std::string& bytes, size_t piece) {
  StepRequest parsed;
  const bool protobuf_parses = parsed.ParseFromString(bytes);
  StepRequestView view;
  const absl::Status read = ReadStepRequest(Sliced(bytes, piece), &view);
  if (!protobuf_parses) return;  // the raw reader may be more lenient (it does not check UTF-8), never stricter
  if (parsed.tables_size() > kMaxStepTables) {
    FUZZ_CHECK(absl::IsInvalidArgument(read), "a step of too many tables was read");
    return;
  }
  FUZZ_CHECK(read.ok(), "protobuf parses a step the raw reader refuses");
  FUZZ_CHECK(SameFields(view, StepFieldsOf(parsed)), "the raw reader read other fields than protobuf");

  const uint64_t fingerprint = shard.Fingerprint();
  if (!HandleStepPushes(shard, view).ok()) {
    FUZZ_CHECK(shard.Fingerprint() == fingerprint, "a refused step changed the shard");
    return;
  }
  StepResponseWriter writer;
  if (!HandleStepPulls(shard, view, &writer).ok()) return;
  const std::string answer = Flatten(writer.Finish());
  StepResponse response;
  FUZZ_CHECK(response.ParseFromString(answer), "the step's answer is no StepResponse");
  // Every read, against a separate Pull / PullDense of the same fields (reads change nothing).
  std::vector<std::vector<float>> rows;
  std::vector<StepRead> reads;
  int next = 0;
  for (const StepTableFields& t : view.tables) {
    if (!t.pull) continue;
    FUZZ_CHECK(next < response.pulls_size(), "the step's answer lacks a read");
    PullRequest pull;
    *pull.mutable_header() = *view.header;
    pull.mutable_header()->set_clock(view.pull_clock);
    pull.set_table(std::string(t.table));
    pull.set_keys(std::string(t.pull_keys));
    pull.set_dim(t.dim);
    pull.set_value_type(t.pull_type);
    PullResponse alone;
    FUZZ_CHECK((t.dense ? HandlePullDense(shard, pull, &alone) : HandlePull(shard, pull, &alone)).ok(),
               "a read the step answered is refused alone");
    const PullResponse& together = response.pulls(next++);
    FUZZ_CHECK(together.values() == alone.values() && together.value_type() == alone.value_type(),
               "the step answered other rows than a separate pull");
    const size_t floats = alone.values().size() / BytesPerValue(t.pull_type);
    rows.emplace_back(floats);
    reads.push_back({rows.back().data(), floats, t.pull_type});
  }
  FUZZ_CHECK(next == response.pulls_size(), "the step's answer carries reads it was not asked");
  FUZZ_CHECK(ReadStepPulls(Sliced(answer, piece), reads).ok(), "the step's answer does not read back");
}

void ClientWrite(const std::string& bytes) {
  FuzzInput fields(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  RequestHeader header;
  std::string job = fields.Bytes();
  for (char& c : job) c &= 0x7f;
  header.set_job_id(job);
  header.set_clock(fields.I64());
  header.set_request_id(fields.U64());
  const int64_t pull_clock = fields.I64();
  const int n = fields.U8() % 4;
  std::vector<std::string> names(n);
  std::vector<std::vector<uint64_t>> push_keys(n), pull_keys(n);
  std::vector<std::vector<float>> grads(n);
  std::vector<StepTableWrite> tables(n);
  for (int i = 0; i < n; ++i) {
    StepTableWrite& t = tables[i];
    names[i] = fields.Bytes();
    for (char& c : names[i]) c &= 0x7f;  // table names are UTF-8 (proto3 strings): protobuf refuses other bytes
    t.table = names[i];
    const uint8_t flags = fields.U8();
    t.dense = flags & 1;
    t.push = flags & 2;
    t.pull = flags & 4;
    t.push_type = static_cast<ValueType>((flags >> 3) % 4);
    t.pull_type = static_cast<ValueType>((flags >> 5) % 4);
    t.dim = 1 + fields.U8() % 4;
    push_keys[i].resize(fields.U8() % 8);
    for (uint64_t& k : push_keys[i]) k = fields.U64();
    grads[i].resize(push_keys[i].size() * t.dim);
    for (float& g : grads[i]) g = static_cast<float>(static_cast<int32_t>(fields.U32())) / 65536.0f;
    pull_keys[i].resize(fields.U8() % 8);
    for (uint64_t& k : pull_keys[i]) k = fields.U64();
    t.push_keys = push_keys[i];
    t.grads = grads[i].data();
    t.pull_keys = pull_keys[i];
  }
  absl::StatusOr<std::string> written = WriteStepRequest(header, pull_clock, tables);
  if (!written.ok()) return;  // a push type that cannot carry these gradients
  StepRequest parsed;
  FUZZ_CHECK(parsed.ParseFromString(*written), "protobuf does not parse a written step");
  FUZZ_CHECK(parsed.header().SerializeAsString() == header.SerializeAsString() && parsed.pull_clock() == pull_clock);
  FUZZ_CHECK(parsed.tables_size() == n);
  for (int i = 0; i < n; ++i) {
    const StepTable& p = parsed.tables(i);
    const StepTableWrite& t = tables[i];
    auto packed = [](const std::vector<uint64_t>& keys) {
      return std::string(reinterpret_cast<const char*>(keys.data()), keys.size() * sizeof(uint64_t));
    };
    FUZZ_CHECK(
        p.table() == t.table && p.dense() == t.dense && p.dim() == t.dim && p.push() == t.push && p.pull() == t.pull,
        "a written step's table fields differ");
    FUZZ_CHECK(
        p.push_keys() == (t.push ? packed(push_keys[i]) : "") && p.pull_keys() == (t.pull ? packed(pull_keys[i]) : ""),
        "a written step's keys differ");
    const size_t floats = t.push ? grads[i].size() : 0;
    FUZZ_CHECK(p.push_values().size() == floats * BytesPerValue(t.push_type));
    if (t.push && t.push_type == VALUE_TYPE_FLOAT32 && floats > 0) {
      FUZZ_CHECK(std::memcmp(p.push_values().data(), grads[i].data(), floats * sizeof(float)) == 0,
                 "a written step's fp32 gradients differ");
    }
  }
}

void ClientRead(const std::string& bytes, uint8_t op) {
  const size_t piece = 1 + (op >> 2);
  const int n = 1 + (op >> 6) % 3;
  const ValueType types[3] = {VALUE_TYPE_FLOAT32, VALUE_TYPE_BFLOAT16, VALUE_TYPE_FLOAT16};
  const float canary = 1234.5f;
  std::vector<std::vector<float>> out(n);
  std::vector<StepRead> reads(n);
  for (int i = 0; i < n; ++i) {
    const size_t floats = (op >> (2 + 2 * i)) & 3;
    out[i].assign(floats + 1, 0.0f);
    out[i][floats] = canary;
    reads[i] = {out[i].data(), floats, types[(op + i) % 3]};
  }
  const absl::Status read = ReadStepPulls(Sliced(bytes, piece), reads);
  FUZZ_CHECK(read.ok() || absl::IsDataLoss(read) || absl::IsInvalidArgument(read));
  for (int i = 0; i < n; ++i) FUZZ_CHECK(out[i][reads[i].floats] == canary, "ReadStepPulls wrote past a read");

  StepResponse parsed;
  if (!parsed.ParseFromString(bytes) || parsed.pulls_size() != n) return;
  for (int i = 0; i < n; ++i) {
    const PullResponse& p = parsed.pulls(i);
    if (p.value_type() != reads[i].type || p.values().size() != reads[i].floats * BytesPerValue(reads[i].type)) return;
  }
  // The reference: fp32 rows as they are (the client does not check them), halves through DecodeValues.
  bool decodable = true;
  std::vector<std::vector<float>> expected(n);
  for (int i = 0; i < n && decodable; ++i) {
    expected[i].resize(reads[i].floats);
    if (reads[i].floats == 0) continue;
    if (reads[i].type == VALUE_TYPE_FLOAT32) {
      std::memcpy(expected[i].data(), parsed.pulls(i).values().data(), reads[i].floats * sizeof(float));
    } else {
      decodable =
          DecodeValues(reads[i].type, parsed.pulls(i).values().data(), reads[i].floats, 0, expected[i].data()).ok();
    }
  }
  FUZZ_CHECK(read.ok() == decodable, "protobuf and ReadStepPulls disagree on an answer");
  for (int i = 0; i < n && decodable; ++i) {
    FUZZ_CHECK(
        reads[i].floats == 0 || std::memcmp(out[i].data(), expected[i].data(), reads[i].floats * sizeof(float)) == 0,
        "ReadStepPulls decoded other values than protobuf");
  }
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
    switch (op % 3) {
      case 0:
        ServerStep(*shard, bytes, 1 + (op >> 2));
        break;
      case 1:
        ClientWrite(bytes);
        break;
      case 2:
        ClientRead(bytes, op);
        break;
    }
  }
  return 0;
}
