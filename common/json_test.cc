// ToJson / FromJson: protobuf's JSON with the proto field names, errors on one line.
#include "common/json.h"

#include <string>

#include "google/protobuf/api.pb.h"
#include "google/protobuf/struct.pb.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

using google::protobuf::Method;

TEST(JsonTest, PrintsProtoFieldNamesOnOneLineOrIndented) {
  Method m;
  m.set_name("Pull");
  m.set_request_type_url("type.googleapis.com/kestrel.PullRequest");
  m.set_request_streaming(false);  // proto3 scalar equal to its default: left out
  EXPECT_EQ(ToJson(m), R"({"name":"Pull","request_type_url":"type.googleapis.com/kestrel.PullRequest"})");
  ToJsonOptions indented;
  indented.multiline = true;
  const std::string multiline = ToJson(m, indented);
  EXPECT_NE(multiline.find("\n \"name\": \"Pull\",\n"), std::string::npos) << multiline;
  EXPECT_NE(multiline.back(), '\n');
}

TEST(JsonTest, ParsesBackAndClearsFirst) {
  Method m;
  m.set_response_type_url("stale");
  ASSERT_TRUE(FromJson(R"({"name": "Push", "request_streaming": true})", &m).ok());
  EXPECT_EQ(m.name(), "Push");
  EXPECT_TRUE(m.request_streaming());
  EXPECT_EQ(m.response_type_url(), "");
  Method again;
  ASSERT_TRUE(FromJson(ToJson(m), &again).ok());
  EXPECT_EQ(again.DebugString(), m.DebugString());
}

TEST(JsonTest, UnknownKeysAreErrorsUnlessIgnored) {
  Method m;
  absl::Status s = FromJson(R"({"name": "Pull", "extra": [1, {"a": null}]})", &m);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("extra"), absl::string_view::npos) << s;
  FromJsonOptions lenient;
  lenient.ignore_unknown_fields = true;
  EXPECT_TRUE(FromJson(R"({"name": "Pull", "extra": [1, {"a": null}]})", &m, lenient).ok());
  EXPECT_EQ(m.name(), "Pull");
}

TEST(JsonTest, ErrorsAreOneLineAndSayWhere) {
  Method m;
  absl::Status syntax = FromJson("{\"name\": \"Pull\"\n \"request_streaming\": true}", &m);
  EXPECT_EQ(syntax.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(syntax.message()), R"(Expected , or } after key:value pair. at "\"request_streaming\":")");
  EXPECT_EQ(std::string(FromJson("{\"name\": ", &m).message()),
            "Unexpected end of string. Expected a value. at the end");
  absl::Status type = FromJson(R"({"name": 3})", &m);
  EXPECT_NE(type.message().find("(name): invalid value 3 for type TYPE_STRING"), absl::string_view::npos) << type;
  EXPECT_EQ(std::string(FromJson("[1]", &m).message()), "Root element must be a message.");
  google::protobuf::Value v;
  EXPECT_TRUE(FromJson("[1, \"a\", null]", &v).ok());  // a Value takes any JSON
  EXPECT_EQ(v.list_value().values_size(), 3);
}

}  // namespace
}  // namespace kestrel
