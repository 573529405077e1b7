#include "common/cluster_env.h"

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/json.h"
#include "common/status.h"
#include "google/protobuf/struct.pb.h"
#include "proto/tf_config.pb.h"

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
[[nodiscard]] absl::StatusOr<int> ParseNonNegative(absl::string_view what, absl::string_view text) {
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
[[nodiscard]] absl::StatusOr<int> GetNonNegative(const EnvLookup& env, absl::string_view name) {
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
// The sources.

[[nodiscard]] absl::Status InvalidTfConfig(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG ", what));
}

// An address from TF_CONFIG's cluster: a non-empty string without spaces or control characters.
bool IsAddress(const google::protobuf::Value& value) {
  if (value.kind_case() != google::protobuf::Value::kStringValue || value.string_value().empty()) return false;
  for (char c : value.string_value()) {
    if (static_cast<unsigned char>(c) <= ' ' || c == '\x7f') return false;
  }
  return true;
}

// cluster.<key> as a list of addresses; nullopt when the key is absent (or null).
[[nodiscard]] absl::StatusOr<std::optional<std::vector<std::string>>> TfConfigAddresses(const TfConfig& config,
                                                                          const std::string& key) {
  const auto it = config.cluster().find(key);
  if (it == config.cluster().end() || it->second.kind_case() == google::protobuf::Value::kNullValue ||
      it->second.kind_case() == google::protobuf::Value::KIND_NOT_SET) {
    return std::nullopt;
  }
  if (it->second.kind_case() != google::protobuf::Value::kListValue) {
    return InvalidTfConfig(absl::StrCat("cluster.", key, " must be an array of \"host:port\" strings"));
  }
  std::vector<std::string> addresses;
  for (const google::protobuf::Value& item : it->second.list_value().values()) {
    if (!IsAddress(item)) {
      return InvalidTfConfig(absl::StrCat("cluster.", key, "[", addresses.size(),
                                          "] is not a \"host:port\" string (non-empty, no spaces or control "
                                          "characters)"));
    }
    addresses.push_back(item.string_value());
  }
  return addresses;
}

// Kubeflow TFJob's TF_CONFIG (proto/tf_config.proto): {"cluster": {"chief": [...], "ps": [...], "worker": [...]},
//                                                     "task": {"type": "ps", "index": 0}}.
[[nodiscard]] absl::StatusOr<std::optional<Layer>> FromTfConfig(const EnvLookup& env) {
  std::optional<std::string> raw = Get(env, "TF_CONFIG");
  if (!raw.has_value() || absl::StripAsciiWhitespace(*raw).empty()) return std::nullopt;
  TfConfig config;
  FromJsonOptions options;
  options.ignore_unknown_fields = true;  // TensorFlow's "environment", "rpc_layer", ...
  if (absl::Status parsed = FromJson(*raw, &config, options); !parsed.ok()) {
    return InvalidTfConfig(absl::StrCat(R"(is not valid JSON of the form {"cluster": {"<type>": ["<host:port>", ...], )"
                                        R"(...}, "task": {"type": "<type>", "index": <n>}}: )",
                                        parsed.message()));
  }

  Layer layer;
  layer.source = "TF_CONFIG";
  KESTREL_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> ps, TfConfigAddresses(config, "ps"));
  KESTREL_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> workers, TfConfigAddresses(config, "worker"));
  KESTREL_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> chief, TfConfigAddresses(config, "chief"));
  KESTREL_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> master, TfConfigAddresses(config, "master"));
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

  if (!config.has_task()) return layer;
  const std::string& type = config.task().type();
  if (type.empty()) return InvalidTfConfig("task.type must be a non-empty string");
  const std::optional<std::vector<std::string>>* peers = nullptr;
  if (type == "ps") {
    layer.role = ClusterRole::kServer;
    peers = &ps;
  } else if (type == "worker") {
    layer.role = ClusterRole::kWorker;
    peers = &workers;
  } else if (type == "chief") {
    layer.role = ClusterRole::kScheduler;
    peers = &chief;
  } else if (type == "master") {
    layer.role = ClusterRole::kScheduler;
    peers = &master;
  } else {
    return InvalidTfConfig(
        absl::StrCat("task.type=", Quote(type), " is not a Kestrel role (expected ps, worker, chief or master)"));
  }
  layer.role_origin = absl::StrCat("TF_CONFIG task.type=", type);

  int index = 0;  // TensorFlow's default when task.index is absent
  if (config.task().has_index()) {
    const google::protobuf::Value& value = config.task().index();
    const double number = value.number_value();
    if (value.kind_case() != google::protobuf::Value::kNumberValue || !(number >= 0) || number != std::floor(number)) {
      return InvalidTfConfig("task.index must be a non-negative integer");
    }
    if (number > std::numeric_limits<int>::max()) {
      return InvalidTfConfig(absl::StrFormat("task.index=%.0f is out of range", number));
    }
    index = static_cast<int>(number);
  }
  if (peers->has_value() && index >= static_cast<int>((*peers)->size())) {
    return InvalidTfConfig(absl::StrCat("task.index=", index, " is not below the ", (*peers)->size(),
                                        " entries of cluster.", type));
  }
  layer.rank = index;
  layer.rank_origin = absl::StrCat("TF_CONFIG task.index=", index);
  return layer;
}

[[nodiscard]] absl::StatusOr<ClusterRole> ParseRoleVariable(absl::string_view name, absl::string_view value) {
  absl::StatusOr<ClusterRole> role = ParseClusterRole(value);
  if (!role.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "=", Quote(value), " is not a Kestrel role (expected scheduler, server or worker)"));
  }
  return role;
}

// ps-lite / BytePS variables. `role_hint`: the role known from the caller, flags or KESTREL_ROLE, used to pick
// DMLC_SERVER_ID or DMLC_WORKER_ID when DMLC_ROLE is unset.
[[nodiscard]] absl::StatusOr<std::optional<Layer>> FromDmlc(const EnvLookup& env, ClusterRole role_hint) {
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
[[nodiscard]] absl::StatusOr<std::optional<Layer>> FromRankAndSize(const EnvLookup& env, absl::string_view source,
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
[[nodiscard]] absl::StatusOr<std::optional<Layer>> FromStatefulSet(const EnvLookup& env, absl::string_view hostname) {
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
[[nodiscard]] absl::StatusOr<std::optional<Layer>> FromLauncher(const EnvLookup& env, absl::string_view hostname,
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

[[nodiscard]] absl::StatusOr<Layer> FromFlags(const ExplicitSettings& flags) {
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

[[nodiscard]] absl::StatusOr<Layer> FromKestrelVariables(const EnvLookup& env) {
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
