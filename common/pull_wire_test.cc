#include "common/pull_wire.h"

#include <string>
#include <vector>

#include "common/half.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"

namespace kestrel {
namespace {

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// A ByteBuffer holding `bytes` split into slices of `piece` bytes, as the network delivers them.
grpc::ByteBuffer Split(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t i = 0; i < bytes.size(); i += piece) slices.emplace_back(bytes.data() + i, std::min(piece, bytes.size() - i));
  return grpc::ByteBuffer(slices.data(), slices.size());
}

TEST(PullWireTest, WriterOutputIsAValidPullResponse) {
  PullResponseWriter writer;
  float* rows = static_cast<float*>(writer.Allocate(6, 3));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(rows) % alignof(float), 0u);
  for (int i = 0; i < 6; ++i) rows[i] = 0.5f * i;
  PullResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(writer.Finish())));
  EXPECT_EQ(parsed.dim(), 3);
  ASSERT_EQ(parsed.values().size(), 6 * sizeof(float));
  std::vector<float> values(6);
  std::memcpy(values.data(), parsed.values().data(), parsed.values().size());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(values[i], 0.5f * i);
}

TEST(PullWireTest, TinyResponsesAreAlignedToo) {
  for (size_t floats : {1, 2, 3, 5}) {
    PullResponseWriter writer;
    float* rows = static_cast<float*>(writer.Allocate(floats, 1));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(rows) % alignof(float), 0u) << floats;
    for (size_t i = 0; i < floats; ++i) rows[i] = 1.5f;
    PullResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(Flatten(writer.Finish())));
    EXPECT_EQ(parsed.values().size(), floats * sizeof(float));
  }
}

TEST(PullWireTest, ReadsAnyEncodingAcrossSlices) {
  PullResponse response;
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) - 3.25f;
  response.set_values(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
  response.set_dim(10);
  response.set_value_type(VALUE_TYPE_FLOAT32);
  const std::string bytes = response.SerializeAsString();
  for (size_t piece : {1, 7, 4096, 100000}) {
    std::vector<float> out(values.size(), -1.0f);
    ASSERT_TRUE(ReadPullValues(Split(bytes, piece), out.data(), out.size()).ok()) << piece;
    EXPECT_EQ(out, values) << piece;
  }
}

TEST(PullWireTest, RejectsWrongSizeAndTruncation) {
  PullResponseWriter writer;
  float* rows = static_cast<float*>(writer.Allocate(4, 2));
  for (int i = 0; i < 4; ++i) rows[i] = 1.0f;
  const std::string bytes = Flatten(writer.Finish());
  std::vector<float> out(8);
  EXPECT_EQ(ReadPullValues(Split(bytes, 5), out.data(), 8).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadPullValues(Split(bytes.substr(0, bytes.size() - 1), 5), out.data(), 4).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadPullValues(grpc::ByteBuffer(), out.data(), 4).code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(ReadPullValues(grpc::ByteBuffer(), out.data(), 0).ok());
}

// Half-type answers: written with their value_type, read back (across any slicing) to exactly the scalar
// conversion of each value; a reader expecting another type or count refuses them.
TEST(PullWireTest, HalfTypesRoundTripAsSpecified) {
  std::vector<float> values(777);
  for (size_t i = 0; i < values.size(); ++i) values[i] = (static_cast<float>(i) - 300.3f) / 7.0f;
  for (ValueType type : {VALUE_TYPE_FLOAT16, VALUE_TYPE_BFLOAT16}) {
    SCOPED_TRACE(ValueType_Name(type));
    PullResponseWriter writer;
    void* rows = writer.Allocate(values.size(), 7, type);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(rows) % 2, 0u);
    ASSERT_TRUE(EncodeValues(type, values.data(), values.size(), 0, rows).ok());
    const std::string bytes = Flatten(writer.Finish());
    PullResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(bytes));
    EXPECT_EQ(parsed.value_type(), type);
    EXPECT_EQ(parsed.values().size(), values.size() * 2);
    for (size_t piece : {1, 3, 4096, 100000}) {
      std::vector<float> out(values.size());
      ASSERT_TRUE(ReadPullValues(Split(bytes, piece), out.data(), out.size(), type).ok()) << piece;
      for (size_t i = 0; i < values.size(); ++i) {
        const float expected = type == VALUE_TYPE_FLOAT16 ? HalfToFloat(FloatToHalf(values[i]))
                                                          : Bfloat16ToFloat(FloatToBfloat16(values[i]));
        ASSERT_EQ(out[i], expected) << i;
      }
    }
    std::vector<float> out(values.size());
    EXPECT_EQ(ReadPullValues(Split(bytes, 64), out.data(), out.size(), VALUE_TYPE_FLOAT32).code(),
              absl::StatusCode::kDataLoss);
    const ValueType other = type == VALUE_TYPE_FLOAT16 ? VALUE_TYPE_BFLOAT16 : VALUE_TYPE_FLOAT16;
    EXPECT_EQ(ReadPullValues(Split(bytes, 64), out.data(), out.size(), other).code(), absl::StatusCode::kDataLoss)
        << "the answered type is checked";
  }
}

// The raw push reader gives exactly the fields protobuf's parser gives, over any slicing, with keys and values
// viewed in place where they lie inside one slice; malformed buffers are refused, never over-read.
TEST(PullWireTest, PushRequestReadFieldByField) {
  PushRequest request;
  request.mutable_header()->set_job_id("job");
  request.mutable_header()->set_worker_rank(3);
  request.mutable_header()->set_clock(17);
  request.set_table("emb");
  std::vector<uint64_t> keys = {1, 5, 9, 1ull << 63};
  request.set_keys(std::string(reinterpret_cast<const char*>(keys.data()), keys.size() * 8));
  request.set_values(std::string(64, 'x'));
  request.set_value_type(VALUE_TYPE_FLOAT16);
  request.set_dim(8);
  request.set_part(2);
  request.set_parts(3);
  request.set_scale_exponent(-12);
  const std::string bytes = request.SerializeAsString();
  for (size_t piece : {1, 5, 16, 100000}) {
    SCOPED_TRACE(piece);
    PushRequestView view;
    ASSERT_TRUE(ReadPushRequest(Split(bytes, piece), &view).ok());
    EXPECT_EQ(view.header->job_id(), "job");
    EXPECT_EQ(view.header->worker_rank(), 3);
    EXPECT_EQ(view.header->clock(), 17);
    EXPECT_EQ(view.table, "emb");
    EXPECT_EQ(view.keys, request.keys());
    EXPECT_EQ(view.values, request.values());
    EXPECT_EQ(view.value_type, VALUE_TYPE_FLOAT16);
    EXPECT_EQ(view.dim, 8);
    EXPECT_EQ(view.part, 2);
    EXPECT_EQ(view.parts, 3);
    EXPECT_EQ(view.scale_exponent, -12);
    if (piece == 100000) {
      EXPECT_TRUE(view.value_scratch.empty()) << "one slice: the values are not copied";
    }
  }
  PushRequestView view;
  EXPECT_EQ(ReadPushRequest(Split(bytes.substr(0, bytes.size() - 3), 7), &view).code(),
            absl::StatusCode::kInvalidArgument);
  std::string huge_length = "\x22\xff\xff\xff\xff\x0f";  // field 4, a 4 GiB length, no bytes
  PushRequestView view2;
  EXPECT_EQ(ReadPushRequest(Split(huge_length, 100), &view2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(view2.value_scratch.empty()) << "nothing allocated for a length the buffer does not hold";
}

// Fields the reader does not know are skipped as protobuf skips them (a client built from a newer proto): every
// wire type, known field numbers with another wire type, and groups (deprecated, still parsed), nested ones too.
// What protobuf refuses (an end tag without its start, field number 0, wire types 6 and 7) the reader refuses.
TEST(PullWireTest, PushRequestSkipsUnknownFieldsAsProtobufDoes) {
  PushRequest request;
  request.mutable_header()->set_job_id("job");
  request.set_table("emb");
  request.set_keys(std::string(8, '\x01'));
  request.set_values(std::string(16, 'v'));
  request.set_dim(4);
  const std::string known = request.SerializeAsString();
  const std::vector<std::string> unknown = {
      std::string("\x65\x03\x12\x6d\x62", 5),                  // field 12, fixed32
      std::string("\x69", 1) + std::string(8, '\x07'),            // field 13, fixed64
      std::string("\xa0\x06\x96\x01", 4),                       // field 100, varint
      std::string("\xaa\x06\x03" "abc", 6),                      // field 101, bytes
      std::string("\x23\x68\x68\x08\x01\x24", 6),             // a group numbered 4 (values' number)
      std::string("\x5b\x63\x08\x01\x64\x65\x00\x00\x00\x00\x5c", 11),  // group 11 holding group 12
      std::string("\x2a\x01\x02", 3),                            // field 5 (an enum) as bytes
  };
  for (const std::string& extra : unknown) {
    for (const std::string& bytes : {extra + known, known + extra}) {
      SCOPED_TRACE(testing::PrintToString(bytes));
      PushRequest parsed;
      ASSERT_TRUE(parsed.ParseFromString(bytes));
      for (size_t piece : {1, 3, 1000}) {
        PushRequestView view;
        ASSERT_TRUE(ReadPushRequest(Split(bytes, piece), &view).ok());
        EXPECT_EQ(view.table, parsed.table());
        EXPECT_EQ(view.keys, parsed.keys());
        EXPECT_EQ(view.values, parsed.values());
        EXPECT_EQ(view.dim, parsed.dim());
        EXPECT_EQ(view.value_type, parsed.value_type());
      }
    }
  }
  const std::vector<std::string> refused = {
      std::string("\x24", 1),                  // an end group without its start
      std::string("\x23\x08\x01", 3),        // a group that never ends
      std::string("\x23\x08\x01\x2c", 4),   // a group ended by another number's end tag
      std::string("\x00\x01", 2),             // field number 0
      std::string("\x0e\x01", 2),             // wire type 6
      std::string("\x0f\x01", 2),             // wire type 7
  };
  for (const std::string& extra : refused) {
    const std::string bytes = known + extra;
    SCOPED_TRACE(testing::PrintToString(bytes));
    PushRequest parsed;
    EXPECT_FALSE(parsed.ParseFromString(bytes));
    PushRequestView view;
    EXPECT_EQ(ReadPushRequest(Split(bytes, 2), &view).code(), absl::StatusCode::kInvalidArgument);
  }
  // Groups nested deeper than protobuf's recursion limit are refused, not followed down the stack.
  std::string deep;
  for (int i = 0; i < 200; ++i) deep += "\x23";
  for (int i = 0; i < 200; ++i) deep += "\x24";
  PushRequestView view;
  EXPECT_EQ(ReadPushRequest(Split(known + deep, 64), &view).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kestrel
