#include "common/cluster_env.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace kestrel {
namespace {

// ----------------------------------------------------------------------------------------------------------
// Small helpers.

// `name`'s value; nullopt when unset or set to "".
std::optional<std::string> Get(const EnvLookup& env, absl::string_view name) {
  std::optional<std::string> value = env(name);
  if (value.has_value() && value->empty()) return std::nullopt;
  return value;
}

// `text` quoted and escaped for an error message, cut to 80 characters.
std::string Quote(absl::string_view text) {
  constexpr size_t kMax = 80;
  std::string quoted = absl::StrCat("\"", absl::CHexEscape(text.substr(0, kMax)), "\"");
  if (text.size() > kMax) quoted += "...";
  return quoted;
}

// A non-negative decimal integer (surrounding whitespace allowed). `what` names the value in errors,
// e.g. "SLURM_PROCID".
absl::StatusOr<int> ParseNonNegative(absl::string_view what, absl::string_view text) {
  absl::string_view digits = absl::StripAsciiWhitespace(text);
  bool ok = !digits.empty();
  for (char c : digits) ok = ok && absl::ascii_isdigit(static_cast<unsigned char>(c));
  if (!ok) return absl::InvalidArgumentError(absl::StrCat(what, "=", Quote(text), " is not a non-negative integer"));
  int value = 0;
  if (!absl::SimpleAtoi(digits, &value)) {
    return absl::InvalidArgumentError(absl::StrCat(what, "=", Quote(text), " is out of range"));
  }
  return value;
}

// The variable `name` as a non-negative integer; -1 when unset.
absl::StatusOr<int> GetNonNegative(const EnvLookup& env, absl::string_view name) {
  std::optional<std::string> value = Get(env, name);
  if (!value.has_value()) return -1;
  return ParseNonNegative(name, *value);
}

// "host:port", bracketing an IPv6 literal host.
std::string JoinHostPort(absl::string_view host, int port) {
  if (host.find(':') != absl::string_view::npos && !host.empty() && host.front() != '[') {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

// What one source says. -1 / "" / kUnknown = says nothing. Each *_origin names the flag or variable, with its
// value, for messages and logs ("SLURM_PROCID=7").
struct Layer {
  std::string source;
  ClusterRole role = ClusterRole::kUnknown;
  std::string role_origin;
  int rank = -1;
  std::string rank_origin;
  bool global_rank = false;  // a role-less launcher's rank: rank_offset applies, world_size bounds it
  int num_servers = -1;
  std::string num_servers_origin;
  int num_workers = -1;
  std::string num_workers_origin;
  std::string scheduler;
  std::string scheduler_origin;
  int world_size = -1;
  std::string world_size_origin;
};

// ----------------------------------------------------------------------------------------------------------
// A minimal JSON reader for TF_CONFIG: the full grammar (RFC 8259), no extensions, bounded nesting.

struct Json {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  std::string text;               // kString: the decoded string; kNumber: the literal as written
  std::vector<Json> items;        // kArray: the elements; kObject: the values, parallel to `keys`
  std::vector<std::string> keys;  // kObject: the keys, in order, unique

  // The member `key` of an object, nullptr when absent.
  const Json* Find(absl::string_view key) const {
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] == key) return &items[i];
    }
    return nullptr;
  }
};

class JsonParser {
 public:
  explicit JsonParser(absl::string_view text) : text_(text) {}

  absl::Status Parse(Json* out) {
    KESTREL_RETURN_IF_ERROR(ParseValue(0, out));
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text after the JSON value");
    return absl::OkStatus();
  }

 private:
  static constexpr int kMaxDepth = 32;

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG is not valid JSON: ", what, " at offset ", pos_));
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  void SkipSpace() {
    while (!AtEnd() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Consume(char c) {
    if (AtEnd() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  bool AtDigit() const { return !AtEnd() && absl::ascii_isdigit(static_cast<unsigned char>(text_[pos_])); }

  absl::Status ParseValue(int depth, Json* out) {
    if (depth > kMaxDepth) return Error("nesting deeper than 32 levels");
    SkipSpace();
    if (AtEnd()) return Error("unexpected end of input");
    const char c = text_[pos_];
    if (c == '{') return ParseObject(depth, out);
    if (c == '[') return ParseArray(depth, out);
    if (c == '"') {
      out->type = Json::Type::kString;
      return ParseString(&out->text);
    }
    if (c == '-' || absl::ascii_isdigit(static_cast<unsigned char>(c))) return ParseNumber(out);
    if (ParseLiteral("true")) {
      out->type = Json::Type::kBool;
      out->boolean = true;
      return absl::OkStatus();
    }
    if (ParseLiteral("false")) {
      out->type = Json::Type::kBool;
      return absl::OkStatus();
    }
    if (ParseLiteral("null")) {
      out->type = Json::Type::kNull;
      return absl::OkStatus();
    }
    return Error(absl::StrCat("unexpected character ", Quote(text_.substr(pos_, 1))));
  }

  bool ParseLiteral(absl::string_view literal) {
    if (text_.substr(pos_, literal.size()) != literal) return false;
    pos_ += literal.size();
    return true;
  }

  absl::Status ParseObject(int depth, Json* out) {
    ++pos_;  // '{'
    out->type = Json::Type::kObject;
    SkipSpace();
    if (Consume('}')) return absl::OkStatus();
    while (true) {
      SkipSpace();
      if (AtEnd() || text_[pos_] != '"') return Error("expected a string key");
      std::string key;
      KESTREL_RETURN_IF_ERROR(ParseString(&key));
      if (out->Find(key) != nullptr) return Error(absl::StrCat("duplicate key ", Quote(key)));
      SkipSpace();
      if (!Consume(':')) return Error("expected ':'");
      Json value;
      KESTREL_RETURN_IF_ERROR(ParseValue(depth + 1, &value));
      out->keys.push_back(std::move(key));
      out->items.push_back(std::move(value));
      SkipSpace();
      if (Consume(',')) continue;
      if (Consume('}')) return absl::OkStatus();
      return Error("expected ',' or '}'");
    }
  }

  absl::Status ParseArray(int depth, Json* out) {
    ++pos_;  // '['
    out->type = Json::Type::kArray;
    SkipSpace();
    if (Consume(']')) return absl::OkStatus();
    while (true) {
      Json value;
      KESTREL_RETURN_IF_ERROR(ParseValue(depth + 1, &value));
      out->items.push_back(std::move(value));
      SkipSpace();
      if (Consume(',')) continue;
      if (Consume(']')) return absl::OkStatus();
      return Error("expected ',' or ']'");
    }
  }

  absl::Status ParseHex4(uint32_t* out) {
    if (text_.size() - pos_ < 4) return Error("truncated \\u escape");
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      value <<= 4;
      if (c >= '0' && c <= '9') {
        value |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        value |= c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        value |= c - 'A' + 10;
      } else {
        return Error("invalid \\u escape");
      }
    }
    *out = value;
    return absl::OkStatus();
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  absl::Status ParseString(std::string* out) {
    ++pos_;  // '"'
    while (true) {
      if (AtEnd()) return Error("unterminated string");
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return absl::OkStatus();
      }
      if (static_cast<unsigned char>(c) < 0x20) return Error("control character in a string");
      ++pos_;
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (AtEnd()) return Error("unterminated string");
      const char escape = text_[pos_++];
      switch (escape) {
        case '"':
        case '\\':
        case '/':
          out->push_back(escape);
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t cp = 0;
          KESTREL_RETURN_IF_ERROR(ParseHex4(&cp));
          if (cp >= 0xDC00 && cp <= 0xDFFF) return Error("unpaired surrogate in \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (!ParseLiteral("\\u")) return Error("unpaired surrogate in \\u escape");
            uint32_t low = 0;
            KESTREL_RETURN_IF_ERROR(ParseHex4(&low));
            if (low < 0xDC00 || low > 0xDFFF) return Error("unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          --pos_;
          return Error(absl::StrCat("invalid escape \\", Quote(absl::string_view(&escape, 1))));
      }
    }
  }

  absl::Status ParseNumber(Json* out) {
    const size_t start = pos_;
    Consume('-');
    if (Consume('0')) {
      // JSON forbids leading zeros.
    } else if (AtDigit()) {
      while (AtDigit()) ++pos_;
    } else {
      return Error("invalid number");
    }
    if (Consume('.')) {
      if (!AtDigit()) return Error("invalid number");
      while (AtDigit()) ++pos_;
    }
    if (Consume('e') || Consume('E')) {
      if (!Consume('+')) Consume('-');
      if (!AtDigit()) return Error("invalid number");
      while (AtDigit()) ++pos_;
    }
    out->type = Json::Type::kNumber;
    out->text = std::string(text_.substr(start, pos_ - start));
    return absl::OkStatus();
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

// ----------------------------------------------------------------------------------------------------------
// The sources.

absl::Status InvalidTfConfig(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG ", what));
}

// cluster.<key> as a list of addresses; nullopt when `cluster` or the key is absent (or null).
absl::StatusOr<std::optional<std::vector<std::string>>> TfConfigAddresses(const Json* cluster,
                                                                          absl::string_view key) {
  if (cluster == nullptr) return std::nullopt;
  const Json* list = cluster->Find(key);
  if (list == nullptr || list->type == Json::Type::kNull) return std::nullopt;
  if (list->type != Json::Type::kArray) {
    return InvalidTfConfig(absl::StrCat("cluster.", key, " must be an array of \"host:port\" strings"));
  }
  std::vector<std::string> addresses;
  for (const Json& item : list->items) {
    if (item.type != Json::Type::kString || item.text.empty()) {
      return InvalidTfConfig(absl::StrCat("cluster.", key, " must be an array of non-empty \"host:port\" strings"));
    }
    addresses.push_back(item.text);
  }
  return addresses;
}

// Kubeflow TFJob's TF_CONFIG: {"cluster": {"chief": [...], "ps": [...], "worker": [...]},
//                              "task": {"type": "ps", "index": 0}}.
absl::StatusOr<std::optional<Layer>> FromTfConfig(const EnvLookup& env) {
  std::optional<std::string> raw = Get(env, "TF_CONFIG");
  if (!raw.has_value() || absl::StripAsciiWhitespace(*raw).empty()) return std::nullopt;
  Json root;
  KESTREL_RETURN_IF_ERROR(JsonParser(*raw).Parse(&root));
  if (root.type != Json::Type::kObject) return InvalidTfConfig("must be a JSON object");

  Layer layer;
  layer.source = "TF_CONFIG";
  const Json* cluster = root.Find("cluster");
  if (cluster != nullptr && cluster->type == Json::Type::kNull) cluster = nullptr;
  if (cluster != nullptr && cluster->type != Json::Type::kObject) return InvalidTfConfig("cluster must be an object");
  KESTREL_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> ps, TfConfigAddresses(cluster, "ps"));
  KESTREL_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> workers, TfConfigAddresses(cluster, "worker"));
  KESTREL_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> chief, TfConfigAddresses(cluster, "chief"));
  KESTREL_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> master, TfConfigAddresses(cluster, "master"));
  if (ps.has_value()) {
    layer.num_servers = static_cast<int>(ps->size());
    layer.num_servers_origin = absl::StrCat("TF_CONFIG cluster.ps (", ps->size(), " entries)");
  }
  if (workers.has_value()) {
    layer.num_workers = static_cast<int>(workers->size());
    layer.num_workers_origin = absl::StrCat("TF_CONFIG cluster.worker (", workers->size(), " entries)");
  }
  if (chief.has_value() && !chief->empty()) {
    layer.scheduler = chief->front();
    layer.scheduler_origin = "TF_CONFIG cluster.chief[0]";
  } else if (master.has_value() && !master->empty()) {
    layer.scheduler = master->front();
    layer.scheduler_origin = "TF_CONFIG cluster.master[0]";
  }

  const Json* task = root.Find("task");
  if (task == nullptr || task->type == Json::Type::kNull) return layer;
  if (task->type != Json::Type::kObject) return InvalidTfConfig("task must be an object");
  const Json* type = task->Find("type");
  if (type == nullptr || type->type != Json::Type::kString) return InvalidTfConfig("task.type must be a string");
  const std::optional<std::vector<std::string>>* peers = nullptr;
  if (type->text == "ps") {
    layer.role = ClusterRole::kServer;
    peers = &ps;
  } else if (type->text == "worker") {
    layer.role = ClusterRole::kWorker;
    peers = &workers;
  } else if (type->text == "chief") {
    layer.role = ClusterRole::kScheduler;
    peers = &chief;
  } else if (type->text == "master") {
    layer.role = ClusterRole::kScheduler;
    peers = &master;
  } else {
    return InvalidTfConfig(absl::StrCat("task.type=", Quote(type->text),
                                        " is not a Kestrel role (expected ps, worker, chief or master)"));
  }
  layer.role_origin = absl::StrCat("TF_CONFIG task.type=", type->text);

  int index = 0;  // TensorFlow's default when task.index is absent
  const Json* index_json = task->Find("index");
  if (index_json != nullptr) {
    const bool integer = index_json->type == Json::Type::kNumber &&
                         index_json->text.find_first_not_of("0123456789") == std::string::npos;
    if (!integer) return InvalidTfConfig("task.index must be a non-negative integer");
    KESTREL_ASSIGN_OR_RETURN(index, ParseNonNegative("TF_CONFIG task.index", index_json->text));
  }
  if (peers->has_value() && index >= static_cast<int>((*peers)->size())) {
    return InvalidTfConfig(absl::StrCat("task.index=", index, " is not below the ", (*peers)->size(),
                                        " entries of cluster.", type->text));
  }
  layer.rank = index;
  layer.rank_origin = absl::StrCat("TF_CONFIG task.index=", index);
  return layer;
}

absl::StatusOr<ClusterRole> ParseRoleVariable(absl::string_view name, absl::string_view value) {
  absl::StatusOr<ClusterRole> role = ParseClusterRole(value);
  if (!role.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "=", Quote(value), " is not a Kestrel role (expected scheduler, server or worker)"));
  }
  return role;
}

// ps-lite / BytePS variables. `role_hint`: the role known from the caller, flags or KESTREL_ROLE, used to pick
// DMLC_SERVER_ID or DMLC_WORKER_ID when DMLC_ROLE is unset.
absl::StatusOr<std::optional<Layer>> FromDmlc(const EnvLookup& env, ClusterRole role_hint) {
  static constexpr absl::string_view kVariables[] = {"DMLC_ROLE",       "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT",
                                                     "DMLC_NUM_SERVER", "DMLC_NUM_WORKER",  "DMLC_SERVER_ID",
                                                     "DMLC_WORKER_ID"};
  bool present = false;
  for (absl::string_view name : kVariables) present = present || Get(env, name).has_value();
  if (!present) return std::nullopt;

  Layer layer;
  layer.source = "DMLC";
  if (std::optional<std::string> role = Get(env, "DMLC_ROLE"); role.has_value()) {
    KESTREL_ASSIGN_OR_RETURN(layer.role, ParseRoleVariable("DMLC_ROLE", *role));
    layer.role_origin = absl::StrCat("DMLC_ROLE=", *role);
  }

  std::optional<std::string> uri = Get(env, "DMLC_PS_ROOT_URI");
  std::optional<std::string> port_text = Get(env, "DMLC_PS_ROOT_PORT");
  if (uri.has_value() != port_text.has_value()) {
    return absl::InvalidArgumentError(uri.has_value() ? "DMLC_PS_ROOT_URI is set but DMLC_PS_ROOT_PORT is not"
                                                      : "DMLC_PS_ROOT_PORT is set but DMLC_PS_ROOT_URI is not");
  }
  if (uri.has_value()) {
    KESTREL_ASSIGN_OR_RETURN(int port, ParseNonNegative("DMLC_PS_ROOT_PORT", *port_text));
    if (port < 1 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("DMLC_PS_ROOT_PORT=", Quote(*port_text), " is not a port"));
    }
    layer.scheduler = JoinHostPort(*uri, port);
    layer.scheduler_origin = absl::StrCat("DMLC_PS_ROOT_URI=", *uri, " DMLC_PS_ROOT_PORT=", port);
  }

  KESTREL_ASSIGN_OR_RETURN(layer.num_servers, GetNonNegative(env, "DMLC_NUM_SERVER"));
  if (layer.num_servers >= 0) layer.num_servers_origin = absl::StrCat("DMLC_NUM_SERVER=", layer.num_servers);
  KESTREL_ASSIGN_OR_RETURN(layer.num_workers, GetNonNegative(env, "DMLC_NUM_WORKER"));
  if (layer.num_workers >= 0) layer.num_workers_origin = absl::StrCat("DMLC_NUM_WORKER=", layer.num_workers);

  KESTREL_ASSIGN_OR_RETURN(int server_id, GetNonNegative(env, "DMLC_SERVER_ID"));
  KESTREL_ASSIGN_OR_RETURN(int worker_id, GetNonNegative(env, "DMLC_WORKER_ID"));
  const ClusterRole role = layer.role != ClusterRole::kUnknown ? layer.role : role_hint;
  if (role == ClusterRole::kServer && server_id >= 0) {
    layer.rank = server_id;
    layer.rank_origin = absl::StrCat("DMLC_SERVER_ID=", server_id);
  } else if (role == ClusterRole::kWorker && worker_id >= 0) {
    layer.rank = worker_id;
    layer.rank_origin = absl::StrCat("DMLC_WORKER_ID=", worker_id);
  }
  return layer;
}

// A role-less launcher: `rank_variable` (its presence marks the launcher) and optionally `size_variable`.
absl::StatusOr<std::optional<Layer>> FromRankAndSize(const EnvLookup& env, absl::string_view source,
                                                     absl::string_view rank_variable,
                                                     absl::string_view size_variable) {
  std::optional<std::string> rank = Get(env, rank_variable);
  if (!rank.has_value()) return std::nullopt;
  Layer layer;
  layer.source = std::string(source);
  layer.global_rank = true;
  KESTREL_ASSIGN_OR_RETURN(layer.rank, ParseNonNegative(rank_variable, *rank));
  layer.rank_origin = absl::StrCat(rank_variable, "=", layer.rank);
  if (!size_variable.empty()) {
    KESTREL_ASSIGN_OR_RETURN(layer.world_size, GetNonNegative(env, size_variable));
    if (layer.world_size >= 0) layer.world_size_origin = absl::StrCat(size_variable, "=", layer.world_size);
  }
  return layer;
}

// A StatefulSet pod: hostname "<name>-<ordinal>" inside Kubernetes (and not an Indexed Job, whose pods are
// named "<job>-<index>" too and are recognized by JOB_COMPLETION_INDEX).
absl::StatusOr<std::optional<Layer>> FromStatefulSet(const EnvLookup& env, absl::string_view hostname) {
  if (!Get(env, "KUBERNETES_SERVICE_HOST").has_value() || Get(env, "JOB_COMPLETION_INDEX").has_value()) {
    return std::nullopt;
  }
  const absl::string_view name = hostname.substr(0, hostname.find('.'));
  const size_t dash = name.rfind('-');
  if (dash == absl::string_view::npos || dash == 0 || dash + 1 == name.size()) return std::nullopt;
  const absl::string_view ordinal = name.substr(dash + 1);
  for (char c : ordinal) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  Layer layer;
  layer.source = "kubernetes-statefulset";
  layer.global_rank = true;
  KESTREL_ASSIGN_OR_RETURN(layer.rank, ParseNonNegative(absl::StrCat("StatefulSet ordinal of hostname ", name),
                                                        ordinal));
  layer.rank_origin = absl::StrCat("StatefulSet ordinal of hostname ", name);
  return layer;
}

// The first present launcher environment, nullopt when none is.
absl::StatusOr<std::optional<Layer>> FromLauncher(const EnvLookup& env, absl::string_view hostname,
                                                  ClusterRole role_hint) {
  std::optional<Layer> layer;
  KESTREL_ASSIGN_OR_RETURN(layer, FromTfConfig(env));
  if (layer.has_value()) return layer;
  KESTREL_ASSIGN_OR_RETURN(layer, FromDmlc(env, role_hint));
  if (layer.has_value()) return layer;
  KESTREL_ASSIGN_OR_RETURN(layer, FromRankAndSize(env, "openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"));
  if (layer.has_value()) return layer;
  KESTREL_ASSIGN_OR_RETURN(layer, FromRankAndSize(env, "pmi", "PMI_RANK", "PMI_SIZE"));
  if (layer.has_value()) return layer;
  KESTREL_ASSIGN_OR_RETURN(layer, FromStatefulSet(env, hostname));
  if (layer.has_value()) return layer;
  KESTREL_ASSIGN_OR_RETURN(layer, FromRankAndSize(env, "kubernetes-indexed-job", "JOB_COMPLETION_INDEX", ""));
  if (layer.has_value()) return layer;
  return FromRankAndSize(env, "slurm", "SLURM_PROCID", "SLURM_NTASKS");
}

absl::StatusOr<Layer> FromFlags(const ExplicitSettings& flags) {
  Layer layer;
  layer.source = "flags";
  layer.role = flags.role;
  if (flags.role != ClusterRole::kUnknown) layer.role_origin = absl::StrCat("--role=", ClusterRoleName(flags.role));
  struct IntFlag {
    const char* name;
    int value;
    int* field;
    std::string* origin;
  };
  const IntFlag ints[] = {{"--rank", flags.rank, &layer.rank, &layer.rank_origin},
                          {"--num_servers", flags.num_servers, &layer.num_servers, &layer.num_servers_origin},
                          {"--num_workers", flags.num_workers, &layer.num_workers, &layer.num_workers_origin}};
  for (const IntFlag& flag : ints) {
    if (flag.value < -1) {
      return absl::InvalidArgumentError(absl::StrCat(flag.name, "=", flag.value, " must be >= 0 (or -1: not given)"));
    }
    *flag.field = flag.value;
    if (flag.value >= 0) *flag.origin = absl::StrCat(flag.name, "=", flag.value);
  }
  if (flags.rank_offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--rank_offset=", flags.rank_offset, " must be >= 0"));
  }
  layer.scheduler = flags.scheduler;
  if (!flags.scheduler.empty()) layer.scheduler_origin = absl::StrCat("--scheduler=", flags.scheduler);
  return layer;
}

absl::StatusOr<Layer> FromKestrelVariables(const EnvLookup& env) {
  Layer layer;
  layer.source = "KESTREL";
  if (std::optional<std::string> role = Get(env, "KESTREL_ROLE"); role.has_value()) {
    KESTREL_ASSIGN_OR_RETURN(layer.role, ParseRoleVariable("KESTREL_ROLE", *role));
    layer.role_origin = absl::StrCat("KESTREL_ROLE=", *role);
  }
  struct IntVariable {
    const char* name;
    int* field;
    std::string* origin;
  };
  const IntVariable ints[] = {{"KESTREL_RANK", &layer.rank, &layer.rank_origin},
                              {"KESTREL_NUM_SERVERS", &layer.num_servers, &layer.num_servers_origin},
                              {"KESTREL_NUM_WORKERS", &layer.num_workers, &layer.num_workers_origin}};
  for (const IntVariable& variable : ints) {
    KESTREL_ASSIGN_OR_RETURN(*variable.field, GetNonNegative(env, variable.name));
    if (*variable.field >= 0) *variable.origin = absl::StrCat(variable.name, "=", *variable.field);
  }
  if (std::optional<std::string> scheduler = Get(env, "KESTREL_SCHEDULER"); scheduler.has_value()) {
    layer.scheduler = *scheduler;
    layer.scheduler_origin = absl::StrCat("KESTREL_SCHEDULER=", *scheduler);
  }
  return layer;
}

// Sets *value / *origin from the first layer giving an integer field (>= 0); marks that layer used.
void TakeFirstInt(const std::vector<const Layer*>& layers, int Layer::*field, std::string Layer::*origin_field,
                  std::vector<bool>* used, int* value, std::string* origin) {
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i]->*field >= 0) {
      *value = layers[i]->*field;
      *origin = layers[i]->*origin_field;
      (*used)[i] = true;
      return;
    }
  }
}

}  // namespace

absl::string_view ClusterRoleName(ClusterRole role) {
  switch (role) {
    case ClusterRole::kScheduler:
      return "scheduler";
    case ClusterRole::kServer:
      return "server";
    case ClusterRole::kWorker:
      return "worker";
    case ClusterRole::kUnknown:
      break;
  }
  return "unknown";
}

absl::StatusOr<ClusterRole> ParseClusterRole(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(name));
  if (lower == "scheduler") return ClusterRole::kScheduler;
  if (lower == "server") return ClusterRole::kServer;
  if (lower == "worker") return ClusterRole::kWorker;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown role ", Quote(name), " (expected scheduler, server or worker)"));
}

EnvLookup ProcessEnvironment() {
  return [](absl::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

std::string ProcessHostname() {
  char buffer[256] = {};
  if (gethostname(buffer, sizeof(buffer) - 1) != 0) return "";
  return buffer;
}

std::string ClusterIdentity::DebugString() const {
  std::string out(ClusterRoleName(role));
  if (rank >= 0) {
    absl::StrAppend(&out, " rank ", rank, rank_source.empty() ? "" : absl::StrCat(" (", rank_source, ")"));
  } else {
    absl::StrAppend(&out, " rank unknown");
  }
  absl::StrAppend(&out, ", ", num_servers >= 0 ? absl::StrCat(num_servers) : "?", " servers, ",
                  num_workers >= 0 ? absl::StrCat(num_workers) : "?", " workers, scheduler ",
                  scheduler.empty() ? "unknown" : scheduler);
  if (world_size >= 0) absl::StrAppend(&out, ", world size ", world_size);
  absl::StrAppend(&out, ", from ", source.empty() ? "nothing" : source);
  return out;
}

absl::StatusOr<ClusterIdentity> ResolveClusterIdentity(ClusterRole expected_role, const ExplicitSettings& flags,
                                                       const EnvLookup& env, absl::string_view hostname) {
  KESTREL_ASSIGN_OR_RETURN(Layer flag_layer, FromFlags(flags));
  KESTREL_ASSIGN_OR_RETURN(Layer kestrel_layer, FromKestrelVariables(env));
  std::vector<const Layer*> layers = {&flag_layer, &kestrel_layer};

  ClusterRole role_hint = expected_role;
  for (const Layer* layer : layers) {
    if (role_hint == ClusterRole::kUnknown) role_hint = layer->role;
  }
  auto known = [&](int Layer::*field) {
    return flag_layer.*field >= 0 || kestrel_layer.*field >= 0;
  };
  const bool complete = role_hint != ClusterRole::kUnknown && known(&Layer::rank) && known(&Layer::num_servers) &&
                        known(&Layer::num_workers) &&
                        (!flag_layer.scheduler.empty() || !kestrel_layer.scheduler.empty());
  std::optional<Layer> launcher;
  if (!complete) {
    KESTREL_ASSIGN_OR_RETURN(launcher, FromLauncher(env, hostname, role_hint));
  }
  if (launcher.has_value()) layers.push_back(&*launcher);
  std::vector<bool> used(layers.size(), false);

  ClusterIdentity identity;

  // Role: every statement must agree with the first one.
  ClusterRole role = expected_role;
  std::string role_origin = absl::StrCat("the expected role ", ClusterRoleName(expected_role));
  bool role_from_caller = expected_role != ClusterRole::kUnknown;
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& layer = *layers[i];
    if (layer.role == ClusterRole::kUnknown) continue;
    if (role == ClusterRole::kUnknown) {
      role = layer.role;
      role_origin = layer.role_origin;
      role_from_caller = false;
      used[i] = true;
    } else if (layer.role != role) {
      const std::string message = absl::StrCat(layer.role_origin, " contradicts ", role_origin);
      if (role_from_caller && &layer == &flag_layer) return absl::InvalidArgumentError(message);
      return absl::FailedPreconditionError(message);
    } else {
      used[i] = true;  // it agrees; it still told us something worth logging
    }
  }
  identity.role = role;

  // Counts and scheduler.
  std::string num_servers_origin, num_workers_origin;
  TakeFirstInt(layers, &Layer::num_servers, &Layer::num_servers_origin, &used, &identity.num_servers,
               &num_servers_origin);
  TakeFirstInt(layers, &Layer::num_workers, &Layer::num_workers_origin, &used, &identity.num_workers,
               &num_workers_origin);
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!layers[i]->scheduler.empty()) {
      identity.scheduler = layers[i]->scheduler;
      used[i] = true;
      break;
    }
  }
  if (launcher.has_value() && launcher->world_size >= 0) {
    identity.world_size = launcher->world_size;
    used.back() = true;
  }

  // Rank.
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& layer = *layers[i];
    if (layer.rank < 0) continue;
    used[i] = true;
    identity.rank = layer.rank;
    identity.rank_source = layer.rank_origin;
    if (layer.global_rank) {
      if (layer.world_size >= 0 && layer.rank >= layer.world_size) {
        return absl::InvalidArgumentError(absl::StrCat(layer.rank_origin, " is not below ", layer.world_size_origin));
      }
      if (flags.rank_offset > 0) {
        if (layer.rank < flags.rank_offset) {
          return absl::InvalidArgumentError(absl::StrCat(layer.rank_origin, " is below --rank_offset=",
                                                         flags.rank_offset, ": this process is not a ",
                                                         ClusterRoleName(role), " of the launch"));
        }
        identity.rank = layer.rank - flags.rank_offset;
        absl::StrAppend(&identity.rank_source, " - --rank_offset=", flags.rank_offset);
      }
    }
    break;
  }
  const int count = role == ClusterRole::kServer   ? identity.num_servers
                    : role == ClusterRole::kWorker ? identity.num_workers
                                                   : -1;
  const std::string& count_origin = role == ClusterRole::kServer ? num_servers_origin : num_workers_origin;
  if (identity.rank >= 0 && count >= 0 && identity.rank >= count) {
    return absl::InvalidArgumentError(absl::StrCat(ClusterRoleName(role), " rank ", identity.rank, " from ",
                                                   identity.rank_source, " is not below ", count_origin));
  }

  std::vector<absl::string_view> sources;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (used[i]) sources.push_back(layers[i]->source);
  }
  identity.source = absl::StrJoin(sources, "+");
  return identity;
}

}  // namespace kestrel
