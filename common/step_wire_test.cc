#include "common/step_wire.h"

#include <cstring>
#include <string>
#include <vector>

#include "common/half.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"

namespace kestrel {
namespace {

// `bytes` cut into slices of `piece` bytes, as the network delivers a message.
grpc::ByteBuffer Sliced(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t i = 0; i < bytes.size(); i += piece)
    slices.emplace_back(bytes.data() + i, std::min(piece, bytes.size() - i));
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

void ExpectSameFields(const StepFields& a, const StepFields& b) {
  EXPECT_EQ(a.header->SerializeAsString(), b.header->SerializeAsString());
  EXPECT_EQ(a.pull_clock, b.pull_clock);
  ASSERT_EQ(a.tables.size(), b.tables.size());
  for (size_t i = 0; i < a.tables.size(); ++i) {
    const StepTableFields &x = a.tables[i], &y = b.tables[i];
    EXPECT_EQ(x.table, y.table);
    EXPECT_EQ(x.dense, y.dense);
    EXPECT_EQ(x.dim, y.dim);
    EXPECT_EQ(x.push, y.push);
    EXPECT_EQ(x.push_keys, y.push_keys);
    EXPECT_EQ(x.push_values, y.push_values);
    EXPECT_EQ(x.push_type, y.push_type);
    EXPECT_EQ(x.scale_exponent, y.scale_exponent);
    EXPECT_EQ(x.pull, y.pull);
    EXPECT_EQ(x.pull_keys, y.pull_keys);
    EXPECT_EQ(x.pull_type, y.pull_type);
  }
}

class StepWireTest : public ::testing::Test {
 protected:
  StepWireTest() {
    header_.set_job_id("job");
    header_.set_worker_rank(1);
    header_.set_clock(41);
    header_.set_request_id(900);
    header_.set_wait_clock(42);
    grads_ = {0.5f, -0.25f, 0.125f, 7.0f, -3.5f, 0.0f};
    StepTableWrite emb;
    emb.table = "emb";
    emb.dim = 2;
    emb.push = true;
    emb.push_keys = push_keys_;
    emb.grads = grads_.data();
    emb.push_type = VALUE_TYPE_FLOAT16;
    emb.pull = true;
    emb.pull_keys = pull_keys_;
    emb.pull_type = VALUE_TYPE_BFLOAT16;
    StepTableWrite empty;  // the worker's empty part of a table it has no key of here
    empty.table = "wide";
    empty.dim = 1;
    empty.push = true;
    StepTableWrite dense;
    dense.table = "mlp";
    dense.dense = true;
    dense.dim = 3;
    dense.push = true;
    dense.push_keys = blocks_;
    dense.grads = grads_.data();
    dense.pull = true;
    dense.pull_keys = blocks_;
    tables_ = {emb, empty, dense};
  }

  RequestHeader header_;
  std::vector<uint64_t> push_keys_ = {3, 9, 1ull << 60};
  std::vector<uint64_t> pull_keys_ = {3, 4, 9, 10};
  std::vector<uint64_t> blocks_ = {0, 2};
  std::vector<float> grads_;
  std::vector<StepTableWrite> tables_;
};

TEST_F(StepWireTest, WrittenRequestParsesAsProtobufAndReadsBackFromAnySlicing) {
  absl::StatusOr<std::string> bytes = WriteStepRequest(header_, 42, tables_);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  StepRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(*bytes));
  EXPECT_EQ(parsed.header().wait_clock(), 42);
  EXPECT_EQ(parsed.pull_clock(), 42);
  ASSERT_EQ(parsed.tables_size(), 3);
  const StepTable& emb = parsed.tables(0);
  EXPECT_EQ(emb.table(), "emb");
  EXPECT_EQ(emb.push_keys().size(), 3 * sizeof(uint64_t));
  EXPECT_EQ(emb.push_values().size(), 6 * 2u);
  EXPECT_EQ(emb.scale_exponent(), Float16ScaleExponent(grads_.data(), 6));
  std::vector<float> decoded(6);
  ASSERT_TRUE(DecodeValues(VALUE_TYPE_FLOAT16, emb.push_values().data(), 6, emb.scale_exponent(), decoded.data()).ok());
  EXPECT_EQ(decoded, grads_);  // every gradient here is exact in fp16 at that scale
  EXPECT_EQ(emb.pull_keys().size(), 4 * sizeof(uint64_t));
  EXPECT_EQ(emb.pull_type(), VALUE_TYPE_BFLOAT16);
  EXPECT_TRUE(parsed.tables(1).push());
  EXPECT_TRUE(parsed.tables(1).push_keys().empty());
  EXPECT_FALSE(parsed.tables(1).pull());
  EXPECT_TRUE(parsed.tables(2).dense());
  EXPECT_EQ(parsed.tables(2).push_values().size(), 6 * sizeof(float));

  for (size_t piece : {1, 3, 7, 64, 4096}) {
    StepRequestView view;
    ASSERT_TRUE(ReadStepRequest(Sliced(*bytes, piece), &view).ok()) << piece;
    ExpectSameFields(view, StepFieldsOf(parsed));
  }
}

TEST_F(StepWireTest, UnknownFieldsAreSkippedAsProtobufSkipsThem) {
  StepRequest request;
  *request.mutable_header() = header_;
  StepTable* t = request.add_tables();
  t->set_table("emb");
  t->set_push(true);
  t->set_push_keys(std::string(8, '\1'));
  // Field 99 (varint) inside the table, field 40 (length-delimited) and a group (field 50) at the top level:
  // what a client built from a newer schema might send.
  std::string table = t->SerializeAsString() + std::string("\x98\x06\x05", 3);
  request.clear_tables();
  std::string bytes = request.SerializeAsString();
  bytes += std::string("\x12", 1) + static_cast<char>(table.size()) + table;
  bytes += std::string(
      "\xc2\x02\x03"
      "abc",
      6);
  bytes += std::string("\x93\x03\x08\x01\x94\x03", 6);
  StepRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  ASSERT_EQ(parsed.tables_size(), 1);
  StepRequestView view;
  ASSERT_TRUE(ReadStepRequest(Sliced(bytes, 5), &view).ok());
  ExpectSameFields(view, StepFieldsOf(parsed));
}

TEST_F(StepWireTest, MalformedOrOversizedRequestsAreRefused) {
  absl::StatusOr<std::string> bytes = WriteStepRequest(header_, 42, tables_);
  ASSERT_TRUE(bytes.ok());
  for (size_t cut : {1ul, 5ul, bytes->size() / 2, bytes->size() - 1}) {
    StepRequestView view;
    EXPECT_EQ(ReadStepRequest(Sliced(bytes->substr(0, cut), 3), &view).code(), absl::StatusCode::kInvalidArgument)
        << cut;
  }
  std::vector<StepTableWrite> many(65, tables_[1]);
  absl::StatusOr<std::string> too_many = WriteStepRequest(header_, 42, many);
  ASSERT_TRUE(too_many.ok());
  StepRequestView view;
  absl::Status read = ReadStepRequest(Sliced(*too_many, 100), &view);
  EXPECT_EQ(read.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(read.message().find("more than 64 tables"), std::string::npos) << read;
}

TEST_F(StepWireTest, ResponseWriterSlicesReadBackAsOneStepResponse) {
  StepResponseWriter writer;
  auto* rows = static_cast<float*>(writer.AddPull(4, 2, VALUE_TYPE_FLOAT32));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(rows) % 4, 0u);
  for (int i = 0; i < 4; ++i) rows[i] = 1.5f * i;
  void* halves = writer.AddPull(2, 1, VALUE_TYPE_BFLOAT16);
  const float two[2] = {0.5f, -2.0f};
  ASSERT_TRUE(EncodeValues(VALUE_TYPE_BFLOAT16, two, 2, 0, halves).ok());
  PullResponse dense;
  dense.set_dim(3);
  const float three[3] = {1.0f, 2.0f, 3.0f};
  dense.set_values(reinterpret_cast<const char*>(three), sizeof(three));
  writer.AddPull(dense);
  const std::string bytes = Flatten(writer.Finish());

  StepResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  ASSERT_EQ(parsed.pulls_size(), 3);
  EXPECT_EQ(parsed.pulls(0).dim(), 2);
  EXPECT_EQ(parsed.pulls(1).value_type(), VALUE_TYPE_BFLOAT16);
  EXPECT_EQ(parsed.pulls(2).dim(), 3);

  for (size_t piece : {1, 6, 1000}) {
    std::vector<float> a(4), b(2), c(3);
    const StepRead reads[] = {
        {a.data(), 4, VALUE_TYPE_FLOAT32}, {b.data(), 2, VALUE_TYPE_BFLOAT16}, {c.data(), 3, VALUE_TYPE_FLOAT32}};
    ASSERT_TRUE(ReadStepPulls(Sliced(bytes, piece), reads).ok()) << piece;
    EXPECT_EQ(a, (std::vector<float>{0.0f, 1.5f, 3.0f, 4.5f}));
    EXPECT_EQ(b, (std::vector<float>{0.5f, -2.0f}));
    EXPECT_EQ(c, (std::vector<float>{1.0f, 2.0f, 3.0f}));
  }
  std::vector<float> a(4), b(2), c(3);
  const StepRead fewer[] = {{a.data(), 4, VALUE_TYPE_FLOAT32}, {b.data(), 2, VALUE_TYPE_BFLOAT16}};
  EXPECT_EQ(ReadStepPulls(Sliced(bytes, 8), fewer).code(), absl::StatusCode::kDataLoss);
  const StepRead more[] = {{a.data(), 4, VALUE_TYPE_FLOAT32},
                           {b.data(), 2, VALUE_TYPE_BFLOAT16},
                           {c.data(), 3, VALUE_TYPE_FLOAT32},
                           {c.data(), 3, VALUE_TYPE_FLOAT32}};
  EXPECT_EQ(ReadStepPulls(Sliced(bytes, 8), more).code(), absl::StatusCode::kDataLoss);
  const StepRead wrong_type[] = {
      {a.data(), 4, VALUE_TYPE_FLOAT32}, {b.data(), 2, VALUE_TYPE_FLOAT16}, {c.data(), 3, VALUE_TYPE_FLOAT32}};
  EXPECT_EQ(ReadStepPulls(Sliced(bytes, 8), wrong_type).code(), absl::StatusCode::kDataLoss);

  StepResponseWriter none;
  EXPECT_TRUE(ReadStepPulls(none.Finish(), {}).ok());
}

}  // namespace
}  // namespace kestrel
