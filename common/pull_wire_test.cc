#include "common/pull_wire.h"

#include <string>
#include <vector>

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
  float* rows = writer.Allocate(6, 3);
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
    float* rows = writer.Allocate(floats, 1);
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
  float* rows = writer.Allocate(4, 2);
  for (int i = 0; i < 4; ++i) rows[i] = 1.0f;
  const std::string bytes = Flatten(writer.Finish());
  std::vector<float> out(8);
  EXPECT_EQ(ReadPullValues(Split(bytes, 5), out.data(), 8).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadPullValues(Split(bytes.substr(0, bytes.size() - 1), 5), out.data(), 4).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadPullValues(grpc::ByteBuffer(), out.data(), 4).code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(ReadPullValues(grpc::ByteBuffer(), out.data(), 0).ok());
}

}  // namespace
}  // namespace kestrel
