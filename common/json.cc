#include "common/json.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"

namespace kestrel {
namespace {

// protobuf's parser error on one line. A syntax error reads "<reason>\n<the text around it>\n<spaces>^"; it
// becomes "<reason> at "<the text from the error on>"". A type error at the root reads ": <reason>".
std::string OneLine(absl::string_view message) {
  if (absl::ConsumePrefix(&message, ": ")) return std::string(message);
  const size_t first = message.find('\n');
  const size_t last = message.rfind('\n');
  if (first == absl::string_view::npos || first == last) return std::string(message);
  const absl::string_view around = message.substr(first + 1, last - first - 1);
  const size_t caret = message.size() - last - 2;  // the spaces before '^'
  const absl::string_view rest = around.substr(std::min(caret, around.size()));
  if (rest.empty()) return absl::StrCat(message.substr(0, first), " at the end");
  return absl::StrCat(message.substr(0, first), " at \"", absl::CHexEscape(rest), "\"");
}

}  // namespace

std::string ToJson(const google::protobuf::Message& message, const ToJsonOptions& options) {
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  print.add_whitespace = options.multiline;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(message, &json, print);
  (void)status;  // ignored: printing fails only for an Any of a type unknown to this binary; we print none
  if (options.multiline && !json.empty() && json.back() == '\n') json.pop_back();
  return json;
}

absl::Status FromJson(absl::string_view json, google::protobuf::Message* message, const FromJsonOptions& options) {
  google::protobuf::util::JsonParseOptions parse;
  parse.ignore_unknown_fields = options.ignore_unknown_fields;
  message->Clear();
  const google::protobuf::StringPiece text(json.data(), json.size());
  const auto status = google::protobuf::util::JsonStringToMessage(text, message, parse);
  if (status.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(OneLine(std::string(status.message())));
}

}  // namespace kestrel
