#include "common/cluster_env.h"

#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

using ::testing::HasSubstr;
using Vars = std::map<std::string, std::string>;

EnvLookup FakeEnv(Vars vars) {
  return [vars = std::move(vars)](absl::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

absl::StatusOr<ClusterIdentity> Resolve(ClusterRole expected, const Vars& vars, const ExplicitSettings& flags = {},
                                        absl::string_view hostname = "node17") {
  return ResolveClusterIdentity(expected, flags, FakeEnv(vars), hostname);
}

ClusterIdentity MustResolve(ClusterRole expected, const Vars& vars, const ExplicitSettings& flags = {},
                            absl::string_view hostname = "node17") {
  absl::StatusOr<ClusterIdentity> identity = Resolve(expected, vars, flags, hostname);
  EXPECT_TRUE(identity.ok()) << identity.status();
  return identity.ok() ? *std::move(identity) : ClusterIdentity{};
}

// Expects an error of `code` whose message contains every one of `parts`.
void ExpectError(const absl::StatusOr<ClusterIdentity>& result, absl::StatusCode code,
                 const std::vector<std::string>& parts) {
  ASSERT_FALSE(result.ok()) << result->DebugString();
  EXPECT_EQ(result.status().code(), code) << result.status();
  for (const std::string& part : parts) EXPECT_THAT(std::string(result.status().message()), HasSubstr(part));
}

constexpr char kTfCluster[] =
    R"("cluster": {"chief": ["chief-0:2222"], "ps": ["ps-0:2222", "ps-1:2222"],
                   "worker": ["w-0:2222", "w-1:2222", "w-2:2222"]})";

std::string TfConfig(absl::string_view type, int index) {
  return absl::StrCat("{", kTfCluster, R"(, "task": {"type": ")", type, R"(", "index": )", index, "}}");
}

// ---------------------------------------------------------------------------------------------------------
// Basics.

TEST(ClusterRoleTest, NamesRoundTrip) {
  for (ClusterRole role : {ClusterRole::kScheduler, ClusterRole::kServer, ClusterRole::kWorker}) {
    absl::StatusOr<ClusterRole> parsed = ParseClusterRole(ClusterRoleName(role));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, role);
  }
  EXPECT_EQ(*ParseClusterRole(" Worker "), ClusterRole::kWorker);
  EXPECT_EQ(ClusterRoleName(ClusterRole::kUnknown), "unknown");
  EXPECT_EQ(ParseClusterRole("ps").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ClusterEnvTest, NothingKnownIsNotAnError) {
  ClusterIdentity id = MustResolve(ClusterRole::kWorker, {});
  EXPECT_EQ(id.role, ClusterRole::kWorker);
  EXPECT_EQ(id.rank, -1);
  EXPECT_EQ(id.num_servers, -1);
  EXPECT_EQ(id.num_workers, -1);
  EXPECT_EQ(id.scheduler, "");
  EXPECT_EQ(id.world_size, -1);
  EXPECT_EQ(id.source, "");
  EXPECT_EQ(id.rank_source, "");
  EXPECT_EQ(id.DebugString(), "worker rank unknown, ? servers, ? workers, scheduler unknown, from nothing");
}

TEST(ClusterEnvTest, ProcessEnvironmentReadsGetenv) {
  EnvLookup env = ProcessEnvironment();
  const char* tmpdir = std::getenv("TEST_TMPDIR");
  EXPECT_EQ(env("TEST_TMPDIR"), tmpdir == nullptr ? std::nullopt : std::optional<std::string>(tmpdir));
  EXPECT_EQ(env("KESTREL_CLUSTER_ENV_TEST_NEVER_SET_0x5eed"), std::nullopt);
  EXPECT_FALSE(ProcessHostname().empty());
}

TEST(ClusterEnvTest, EmptyVariablesCountAsUnset) {
  ClusterIdentity id = MustResolve(ClusterRole::kWorker, {{"KESTREL_RANK", ""}, {"SLURM_PROCID", "2"}});
  EXPECT_EQ(id.rank, 2);
  EXPECT_EQ(id.source, "slurm");
}

// ---------------------------------------------------------------------------------------------------------
// Flags.

TEST(ClusterEnvTest, FlagsAlone) {
  ExplicitSettings flags;
  flags.rank = 1;
  flags.num_servers = 2;
  flags.num_workers = 4;
  flags.scheduler = "sched:7000";
  ClusterIdentity id = MustResolve(ClusterRole::kWorker, {}, flags);
  EXPECT_EQ(id.role, ClusterRole::kWorker);
  EXPECT_EQ(id.rank, 1);
  EXPECT_EQ(id.num_servers, 2);
  EXPECT_EQ(id.num_workers, 4);
  EXPECT_EQ(id.scheduler, "sched:7000");
  EXPECT_EQ(id.source, "flags");
  EXPECT_EQ(id.rank_source, "--rank=1");
}

TEST(ClusterEnvTest, FlagsBeatEveryEnvironmentFieldByField) {
  ExplicitSettings flags;
  flags.rank = 1;
  flags.scheduler = "flag-sched:7000";
  ClusterIdentity id = MustResolve(ClusterRole::kWorker,
                                   {{"KESTREL_RANK", "3"},
                                    {"KESTREL_SCHEDULER", "kestrel-sched:7000"},
                                    {"KESTREL_NUM_WORKERS", "6"},
                                    {"TF_CONFIG", TfConfig("worker", 2)},
                                    {"SLURM_PROCID", "5"}},
                                   flags);
  EXPECT_EQ(id.rank, 1);
  EXPECT_EQ(id.scheduler, "flag-sched:7000");
  EXPECT_EQ(id.num_workers, 6);   // KESTREL_NUM_WORKERS beats TF_CONFIG's 3
  EXPECT_EQ(id.num_servers, 2);   // nobody above TF_CONFIG gave it
  EXPECT_EQ(id.source, "flags+KESTREL+TF_CONFIG");
}

TEST(ClusterEnvTest, CompleteFlagsDoNotReadBrokenEnvironments) {
  ExplicitSettings flags;
  flags.rank = 0;
  flags.num_servers = 1;
  flags.num_workers = 1;
  flags.scheduler = "s:1";
  ClusterIdentity id = MustResolve(ClusterRole::kServer, {{"TF_CONFIG", "{broken"}, {"DMLC_ROLE", "worker"}}, flags);
  EXPECT_EQ(id.rank, 0);
  EXPECT_EQ(id.source, "flags");
}

TEST(ClusterEnvTest, InvalidFlags) {
  ExplicitSettings flags;
  flags.rank = -2;
  ExpectError(Resolve(ClusterRole::kWorker, {}, flags), absl::StatusCode::kInvalidArgument, {"--rank=-2"});
  flags = {};
  flags.num_workers = -5;
  ExpectError(Resolve(ClusterRole::kWorker, {}, flags), absl::StatusCode::kInvalidArgument, {"--num_workers=-5"});
  flags = {};
  flags.rank_offset = -1;
  ExpectError(Resolve(ClusterRole::kWorker, {}, flags), absl::StatusCode::kInvalidArgument, {"--rank_offset=-1"});
  flags = {};
  flags.rank = 4;
  flags.num_workers = 4;
  ExpectError(Resolve(ClusterRole::kWorker, {}, flags), absl::StatusCode::kInvalidArgument,
              {"--rank=4", "--num_workers=4"});
}

// ---------------------------------------------------------------------------------------------------------
// Each environment alone.

TEST(ClusterEnvTest, KestrelVariables) {
  ClusterIdentity id = MustResolve(ClusterRole::kUnknown, {{"KESTREL_ROLE", "server"},
                                                           {"KESTREL_RANK", "1"},
                                                           {"KESTREL_NUM_SERVERS", "2"},
                                                           {"KESTREL_NUM_WORKERS", "8"},
                                                           {"KESTREL_SCHEDULER", "sched:7000"}});
  EXPECT_EQ(id.role, ClusterRole::kServer);
  EXPECT_EQ(id.rank, 1);
  EXPECT_EQ(id.num_servers, 2);
  EXPECT_EQ(id.num_workers, 8);
  EXPECT_EQ(id.scheduler, "sched:7000");
  EXPECT_EQ(id.source, "KESTREL");
  EXPECT_EQ(id.rank_source, "KESTREL_RANK=1");
}

TEST(ClusterEnvTest, TfConfigPs) {
  ClusterIdentity id = MustResolve(ClusterRole::kServer, {{"TF_CONFIG", TfConfig("ps", 1)}});
  EXPECT_EQ(id.role, ClusterRole::kServer);
  EXPECT_EQ(id.rank, 1);
  EXPECT_EQ(id.num_servers, 2);
  EXPECT_EQ(id.num_workers, 3);
  EXPECT_EQ(id.scheduler, "chief-0:2222");
  EXPECT_EQ(id.source, "TF_CONFIG");
  EXPECT_EQ(id.rank_source, "TF_CONFIG task.index=1");
}

TEST(ClusterEnvTest, TfConfigWorker) {
  ClusterIdentity id = MustResolve(ClusterRole::kWorker, {{"TF_CONFIG", TfConfig("worker", 2)}});
  EXPECT_EQ(id.role, ClusterRole::kWorker);
  EXPECT_EQ(id.rank, 2);
  EXPECT_EQ(id.num_workers, 3);
}

TEST(ClusterEnvTest, TfConfigChiefIsTheScheduler) {
  ClusterIdentity id = MustResolve(ClusterRole::kUnknown, {{"TF_CONFIG", TfConfig("chief", 0)}});
  EXPECT_EQ(id.role, ClusterRole::kScheduler);
  EXPECT_EQ(id.rank, 0);
  EXPECT_EQ(id.scheduler, "chief-0:2222");
}

TEST(ClusterEnvTest, TfConfigMasterAndDefaults) {
  // Pretty-printed, "master" instead of "chief", task.index absent (TensorFlow's default 0), escapes.
  const std::string tf_config = R"({
      "cluster": {"master": ["m\u0061ster-0:2222"], "ps": ["p:1"], "evaluator": ["e:1"]},
      "task": {"type": "master"},
      "environment": "cloud", "extra": [1.5e3, true, false, null, {"nested": "\"\\\/\ud83d\ude00"}]
  })";
  ClusterIdentity id = MustResolve(ClusterRole::kScheduler, {{"TF_CONFIG", tf_config}});
  EXPECT_EQ(id.role, ClusterRole::kScheduler);
  EXPECT_EQ(id.rank, 0);
  EXPECT_EQ(id.scheduler, "master-0:2222");
  EXPECT_EQ(id.num_servers, 1);
  EXPECT_EQ(id.num_workers, -1);  // no worker list: unknown
}

TEST(ClusterEnvTest, TfConfigWithoutTaskGivesCountsOnly) {
  ClusterIdentity id = MustResolve(ClusterRole::kWorker, {{"TF_CONFIG", absl::StrCat("{", kTfCluster, "}")}});
  EXPECT_EQ(id.rank, -1);
  EXPECT_EQ(id.num_servers, 2);
  EXPECT_EQ(id.num_workers, 3);
  EXPECT_EQ(id.source, "TF_CONFIG");
}

TEST(ClusterEnvTest, DmlcServerWithId) {
  ClusterIdentity id = MustResolve(ClusterRole::kServer, {{"DMLC_ROLE", "server"},
                                                          {"DMLC_PS_ROOT_URI", "10.0.0.1"},
                                                          {"DMLC_PS_ROOT_PORT", "9000"},
                                                          {"DMLC_NUM_SERVER", "2"},
                                                          {"DMLC_NUM_WORKER", "4"},
                                                          {"DMLC_SERVER_ID", "1"},
                                                          {"DMLC_WORKER_ID", "3"}});
  EXPECT_EQ(id.role, ClusterRole::kServer);
  EXPECT_EQ(id.rank, 1);
  EXPECT_EQ(id.rank_source, "DMLC_SERVER_ID=1");
  EXPECT_EQ(id.num_servers, 2);
  EXPECT_EQ(id.num_workers, 4);
  EXPECT_EQ(id.scheduler, "10.0.0.1:9000");
  EXPECT_EQ(id.source, "DMLC");
}

TEST(ClusterEnvTest, DmlcWorkerWithId) {
  ClusterIdentity id = MustResolve(ClusterRole::kWorker, {{"DMLC_ROLE", "worker"},
                                                          {"DMLC_PS_ROOT_URI", "fd00::1"},
                                                          {"DMLC_PS_ROOT_PORT", "9000"},
                                                          {"DMLC_NUM_WORKER", "4"},
                                                          {"DMLC_SERVER_ID", "1"},
                                                          {"DMLC_WORKER_ID", "3"}});
  EXPECT_EQ(id.rank, 3);
  EXPECT_EQ(id.scheduler, "[fd00::1]:9000");
}

TEST(ClusterEnvTest, DmlcWithoutIdLeavesRankUnknownAndShadowsLaterSources) {
  ClusterIdentity id =
      MustResolve(ClusterRole::kWorker, {{"DMLC_ROLE", "worker"}, {"DMLC_NUM_WORKER", "4"}, {"SLURM_PROCID", "2"}});
  EXPECT_EQ(id.rank, -1);
  EXPECT_EQ(id.num_workers, 4);
  EXPECT_EQ(id.source, "DMLC");
}

TEST(ClusterEnvTest, DmlcIdPickedByExpectedRoleWhenDmlcRoleUnset) {
  ClusterIdentity id = MustResolve(ClusterRole::kServer, {{"DMLC_SERVER_ID", "1"}, {"DMLC_WORKER_ID", "3"}});
  EXPECT_EQ(id.rank, 1);
}

TEST(ClusterEnvTest, DmlcErrors) {
  ExpectError(Resolve(ClusterRole::kWorker, {{"DMLC_PS_ROOT_URI", "h"}}), absl::StatusCode::kInvalidArgument,
              {"DMLC_PS_ROOT_PORT"});
  ExpectError(Resolve(ClusterRole::kWorker, {{"DMLC_PS_ROOT_URI", "h"}, {"DMLC_PS_ROOT_PORT", "70000"}}),
              absl::StatusCode::kInvalidArgument, {"DMLC_PS_ROOT_PORT"});
  ExpectError(Resolve(ClusterRole::kWorker, {{"DMLC_ROLE", "joint"}}), absl::StatusCode::kInvalidArgument,
              {"DMLC_ROLE", "joint"});
  ExpectError(Resolve(ClusterRole::kWorker, {{"DMLC_ROLE", "worker"}, {"DMLC_WORKER_ID", "two"}}),
              absl::StatusCode::kInvalidArgument, {"DMLC_WORKER_ID", "two"});
}

TEST(ClusterEnvTest, KubernetesStatefulSet) {
  const Vars k8s = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}};
  ClusterIdentity id = MustResolve(ClusterRole::kServer, k8s, {}, "kestrel-server-3");
  EXPECT_EQ(id.rank, 3);
  EXPECT_EQ(id.source, "kubernetes-statefulset");
  EXPECT_EQ(id.rank_source, "StatefulSet ordinal of hostname kestrel-server-3");
  // A fully qualified name keeps the first label.
  EXPECT_EQ(MustResolve(ClusterRole::kServer, k8s, {}, "kestrel-server-12.kestrel.default.svc").rank, 12);
  // Outside Kubernetes the hostname means nothing.
  id = MustResolve(ClusterRole::kServer, {}, {}, "kestrel-server-3");
  EXPECT_EQ(id.rank, -1);
  EXPECT_EQ(id.source, "");
  // Not "<name>-<ordinal>": no rank, not an error.
  for (absl::string_view hostname : {"kestrel-server", "-3", "kestrel-server-", "kestrel-server-3a", "node17"}) {
    EXPECT_EQ(MustResolve(ClusterRole::kServer, k8s, {}, hostname).rank, -1) << hostname;
  }
  ExpectError(Resolve(ClusterRole::kServer, k8s, {}, "kestrel-server-99999999999"),
              absl::StatusCode::kInvalidArgument, {"hostname kestrel-server-99999999999"});
}

TEST(ClusterEnvTest, KubernetesIndexedJob) {
  ClusterIdentity id = MustResolve(ClusterRole::kWorker, {{"JOB_COMPLETION_INDEX", "4"}});
  EXPECT_EQ(id.rank, 4);
  EXPECT_EQ(id.source, "kubernetes-indexed-job");
  // An Indexed Job pod is named "<job>-<index>" too; JOB_COMPLETION_INDEX says what it is.
  id = MustResolve(ClusterRole::kWorker, {{"JOB_COMPLETION_INDEX", "4"}, {"KUBERNETES_SERVICE_HOST", "10.96.0.1"}},
                   {}, "train-4");
  EXPECT_EQ(id.source, "kubernetes-indexed-job");
}

TEST(ClusterEnvTest, Slurm) {
  ClusterIdentity id = MustResolve(ClusterRole::kWorker, {{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}});
  EXPECT_EQ(id.rank, 3);
  EXPECT_EQ(id.world_size, 8);
  EXPECT_EQ(id.num_workers, -1);  // the world size is not a role's count
  EXPECT_EQ(id.source, "slurm");
  EXPECT_EQ(id.rank_source, "SLURM_PROCID=3");
  EXPECT_EQ(id.DebugString(), "worker rank 3 (SLURM_PROCID=3), ? servers, ? workers, scheduler unknown, "
                              "world size 8, from slurm");
}

TEST(ClusterEnvTest, OpenMpi) {
  ClusterIdentity id =
      MustResolve(ClusterRole::kWorker, {{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "6"}});
  EXPECT_EQ(id.rank, 5);
  EXPECT_EQ(id.world_size, 6);
  EXPECT_EQ(id.source, "openmpi");
}

TEST(ClusterEnvTest, Pmi) {
  ClusterIdentity id = MustResolve(ClusterRole::kServer, {{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}});
  EXPECT_EQ(id.rank, 0);
  EXPECT_EQ(id.world_size, 2);
  EXPECT_EQ(id.source, "pmi");
}

// ---------------------------------------------------------------------------------------------------------
// Precedence between environments.

TEST(ClusterEnvTest, PrecedenceOrder) {
  // Each source gives a different worker rank; with sources [i, end) all set, source i must win.
  struct Source {
    std::string name;
    Vars vars;
    int rank;
    std::string rank_source;
  };
  const std::string tf_config =
      R"({"cluster": {"worker": ["a:1","b:1","c:1","d:1","e:1","f:1","g:1","h:1","i:1","j:1"]},
          "task": {"type": "worker", "index": 2}})";
  const std::vector<Source> sources = {
      {"KESTREL", {{"KESTREL_RANK", "1"}}, 1, "KESTREL_RANK=1"},
      {"TF_CONFIG", {{"TF_CONFIG", tf_config}}, 2, "TF_CONFIG task.index=2"},
      {"DMLC", {{"DMLC_ROLE", "worker"}, {"DMLC_WORKER_ID", "3"}}, 3, "DMLC_WORKER_ID=3"},
      {"openmpi", {{"OMPI_COMM_WORLD_RANK", "4"}}, 4, "OMPI_COMM_WORLD_RANK=4"},
      {"pmi", {{"PMI_RANK", "5"}}, 5, "PMI_RANK=5"},
      {"kubernetes-statefulset", {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}}, 6,  // hostname "w-6"
       "StatefulSet ordinal of hostname w-6"},
      {"slurm", {{"SLURM_PROCID", "8"}}, 8, "SLURM_PROCID=8"},
  };
  for (size_t first = 0; first < sources.size(); ++first) {
    Vars vars;
    for (size_t i = first; i < sources.size(); ++i) vars.insert(sources[i].vars.begin(), sources[i].vars.end());
    ClusterIdentity id = MustResolve(ClusterRole::kWorker, vars, {}, "w-6");
    EXPECT_EQ(id.rank, sources[first].rank) << sources[first].name;
    EXPECT_EQ(id.rank_source, sources[first].rank_source);
    if (first > 0) {
      EXPECT_EQ(id.source, sources[first].name);
    }
  }
  // The Indexed Job sits between the StatefulSet (which it disables) and Slurm.
  EXPECT_EQ(MustResolve(ClusterRole::kWorker, {{"JOB_COMPLETION_INDEX", "7"}, {"SLURM_PROCID", "8"}}).rank, 7);
}

TEST(ClusterEnvTest, KestrelVariablesCombineWithALauncher) {
  // deploy/ sets the counts; mpirun gives the rank.
  ClusterIdentity id = MustResolve(ClusterRole::kWorker, {{"KESTREL_NUM_SERVERS", "2"},
                                                          {"KESTREL_NUM_WORKERS", "8"},
                                                          {"KESTREL_SCHEDULER", "s:7000"},
                                                          {"OMPI_COMM_WORLD_RANK", "5"},
                                                          {"OMPI_COMM_WORLD_SIZE", "8"}});
  EXPECT_EQ(id.rank, 5);
  EXPECT_EQ(id.num_servers, 2);
  EXPECT_EQ(id.num_workers, 8);
  EXPECT_EQ(id.source, "KESTREL+openmpi");
}

TEST(ClusterEnvTest, LaunchersAreNotMixed) {
  // OMPI is present without a size; SLURM_NTASKS below it must not be used.
  ClusterIdentity id =
      MustResolve(ClusterRole::kWorker, {{"OMPI_COMM_WORLD_RANK", "5"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}});
  EXPECT_EQ(id.rank, 5);
  EXPECT_EQ(id.world_size, -1);
  EXPECT_EQ(id.source, "openmpi");
}

// ---------------------------------------------------------------------------------------------------------
// rank_offset.

TEST(ClusterEnvTest, RankOffsetForMpmdLaunches) {
  // srun --multi-prog: ranks 0-1 servers, 2-9 workers.
  ExplicitSettings flags;
  flags.rank_offset = 2;
  ClusterIdentity id = MustResolve(
      ClusterRole::kWorker, {{"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "10"}, {"KESTREL_NUM_WORKERS", "8"}}, flags);
  EXPECT_EQ(id.rank, 5);
  EXPECT_EQ(id.world_size, 10);
  EXPECT_EQ(id.rank_source, "SLURM_PROCID=7 - --rank_offset=2");

  ExpectError(Resolve(ClusterRole::kWorker, {{"SLURM_PROCID", "1"}}, flags), absl::StatusCode::kInvalidArgument,
              {"SLURM_PROCID=1", "--rank_offset=2"});
  // After the offset the rank must still fit the role's count.
  ExpectError(Resolve(ClusterRole::kWorker, {{"OMPI_COMM_WORLD_RANK", "9"}, {"KESTREL_NUM_WORKERS", "4"}}, flags),
              absl::StatusCode::kInvalidArgument, {"OMPI_COMM_WORLD_RANK=9", "KESTREL_NUM_WORKERS=4"});
}

TEST(ClusterEnvTest, RankOffsetLeavesPerRoleRanksAlone) {
  ExplicitSettings flags;
  flags.rank_offset = 2;
  EXPECT_EQ(MustResolve(ClusterRole::kWorker, {{"KESTREL_RANK", "1"}}, flags).rank, 1);
  EXPECT_EQ(MustResolve(ClusterRole::kWorker, {{"TF_CONFIG", TfConfig("worker", 1)}}, flags).rank, 1);
  EXPECT_EQ(MustResolve(ClusterRole::kWorker, {{"DMLC_WORKER_ID", "1"}}, flags).rank, 1);
  flags.rank = 0;
  EXPECT_EQ(MustResolve(ClusterRole::kWorker, {{"SLURM_PROCID", "7"}}, flags).rank, 0);
}

// ---------------------------------------------------------------------------------------------------------
// Errors.

TEST(ClusterEnvTest, MalformedTfConfig) {
  // TF_CONFIG is read by protobuf's JSON parser (3.21), which is more lenient than RFC 8259 in four ways the
  // former hand-written parser refused; these are now accepted: a trailing comma ({"index": 1,}), an integer
  // written with an exponent ("index": 1e2 is 100), an unknown escape ("a\x:1" reads "ax:1") and a
  // duplicate key (the last one wins).
  const std::vector<std::string> inputs = {
      "{",
      "[]",
      "\"worker\"",
      "{} trailing",
      "{'task': {}}",
      R"({"task": {"type": "worker" "index": 1}})",
      R"({"task": {"type": "worker", "index": -1}})",
      R"({"task": {"type": "worker", "index": 1.5}})",
      R"({"task": {"type": "worker", "index": "1"}})",
      R"({"task": {"type": "worker", "index": null}})",
      R"({"task": {"type": "worker", "index": 01}})",
      R"({"task": {"type": "worker", "index": 99999999999}})",
      R"({"task": {"type": "evaluator", "index": 0}})",
      R"({"task": {"index": 0}})",
      R"({"task": {"type": 3}})",
      R"({"task": ["worker", 0]})",
      R"({"cluster": [], "task": {"type": "worker"}})",
      R"({"cluster": {"ps": "p:1"}})",
      R"({"cluster": {"ps": [1, 2]}})",
      R"({"cluster": {"ps": ["p:1", ""]}})",
      R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}})",
      R"({"cluster": {"worker": ["a:1)",
      R"({"cluster": {"worker": ["\ud800"]}})",
      R"({"cluster": {"worker": ["\u12"]}})",
      "{\"cluster\": {\"worker\": [\"a\n:1\"]}}",
      R"({"task": {"type": tru}})",
      R"({"task": {"type": nul}})",
      std::string(100, '[') + std::string(100, ']'),
  };
  for (const std::string& input : inputs) {
    SCOPED_TRACE(input);
    ExpectError(Resolve(ClusterRole::kWorker, {{"TF_CONFIG", input}}), absl::StatusCode::kInvalidArgument,
                {"TF_CONFIG"});
  }
  // Blank counts as unset, like an empty variable.
  EXPECT_EQ(MustResolve(ClusterRole::kWorker, {{"TF_CONFIG", "  \n"}}).source, "");
}

TEST(ClusterEnvTest, MalformedTfConfigMessagesSayWhatIsWrong) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      // Syntax: the parser's reason and the text where it stopped, on one line.
      {R"({"task": {"type": "worker" "index": 1}})",
       {"TF_CONFIG is not valid JSON", "Expected , or }", R"(at "\"index\": 1}})"}},
      {"{\n  \"task\": {\"type\": \"worker\",\n  \"index\": 1 2}\n}", {"TF_CONFIG is not valid JSON", R"(at "2}\n}")"}},
      {"{", {"TF_CONFIG is not valid JSON", "at the end"}},
      // Shape: the field and the expected form.
      {"[]", {"TF_CONFIG is not valid JSON of the form {\"cluster\"", "Root element must be a message"}},
      {R"({"task": {"type": 3}})", {"task.type", "TYPE_STRING"}},
      {R"({"cluster": {"ps": "p:1"}})", {"TF_CONFIG cluster.ps must be an array of \"host:port\" strings"}},
      {R"({"cluster": {"ps": ["p:1", 2]}})", {"TF_CONFIG cluster.ps[1] is not a \"host:port\" string"}},
      {R"({"task": {"index": 0}})", {"TF_CONFIG task.type must be a non-empty string"}},
      {R"({"task": {"type": "worker", "index": "1"}})", {"TF_CONFIG task.index must be a non-negative integer"}},
      {R"({"task": {"type": "worker", "index": 99999999999}})", {"TF_CONFIG task.index=99999999999 is out of range"}},
      {R"({"task": {"type": "evaluator"}})", {R"(TF_CONFIG task.type="evaluator" is not a Kestrel role)"}},
  };
  for (const auto& [input, parts] : cases) {
    SCOPED_TRACE(input);
    ExpectError(Resolve(ClusterRole::kWorker, {{"TF_CONFIG", input}}), absl::StatusCode::kInvalidArgument, parts);
  }
  // A null list or task says nothing, like an absent one.
  const std::string tf_config = R"({"cluster": {"ps": null, "worker": ["a:1", "b:1"]}, "task": null})";
  ClusterIdentity id = MustResolve(ClusterRole::kWorker, {{"TF_CONFIG", tf_config}});
  EXPECT_EQ(id.num_servers, -1);
  EXPECT_EQ(id.num_workers, 2);
  EXPECT_EQ(id.rank, -1);
}

TEST(ClusterEnvTest, NonNumericRanksAndCounts) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"KESTREL_RANK", "abc"},           {"KESTREL_RANK", "-1"},         {"KESTREL_NUM_WORKERS", "four"},
      {"KESTREL_NUM_SERVERS", "2.0"},    {"SLURM_PROCID", "1x"},         {"OMPI_COMM_WORLD_RANK", "-1"},
      {"PMI_RANK", "zero"},              {"JOB_COMPLETION_INDEX", "9999999999999"},
  };
  for (const auto& [name, value] : cases) {
    SCOPED_TRACE(name);
    ExpectError(Resolve(ClusterRole::kWorker, {{name, value}}), absl::StatusCode::kInvalidArgument, {name, value});
  }
  ExpectError(Resolve(ClusterRole::kWorker, {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "x"}}),
              absl::StatusCode::kInvalidArgument, {"SLURM_NTASKS"});
  ExpectError(Resolve(ClusterRole::kWorker, {{"KESTREL_ROLE", "ps"}}), absl::StatusCode::kInvalidArgument,
              {"KESTREL_ROLE", "ps"});
  // Surrounding whitespace is tolerated.
  EXPECT_EQ(MustResolve(ClusterRole::kWorker, {{"KESTREL_RANK", " 2\n"}}).rank, 2);
}

TEST(ClusterEnvTest, OutOfRangeRanks) {
  ExpectError(Resolve(ClusterRole::kWorker, {{"KESTREL_RANK", "4"}, {"KESTREL_NUM_WORKERS", "4"}}),
              absl::StatusCode::kInvalidArgument, {"KESTREL_RANK=4", "KESTREL_NUM_WORKERS=4"});
  ExpectError(Resolve(ClusterRole::kServer, {{"DMLC_SERVER_ID", "2"}, {"DMLC_NUM_SERVER", "2"}}),
              absl::StatusCode::kInvalidArgument, {"DMLC_SERVER_ID=2", "DMLC_NUM_SERVER=2"});
  ExpectError(Resolve(ClusterRole::kWorker, {{"SLURM_PROCID", "8"}, {"SLURM_NTASKS", "8"}}),
              absl::StatusCode::kInvalidArgument, {"SLURM_PROCID=8", "SLURM_NTASKS=8"});
  ExpectError(Resolve(ClusterRole::kWorker, {{"PMI_RANK", "2"}, {"PMI_SIZE", "2"}}),
              absl::StatusCode::kInvalidArgument, {"PMI_RANK=2", "PMI_SIZE=2"});
  ExpectError(Resolve(ClusterRole::kServer, {{"TF_CONFIG", TfConfig("ps", 2)}}), absl::StatusCode::kInvalidArgument,
              {"TF_CONFIG", "task.index=2"});
  // A flag rank checked against a count from the environment names both.
  ExplicitSettings flags;
  flags.rank = 3;
  ExpectError(Resolve(ClusterRole::kWorker, {{"DMLC_NUM_WORKER", "2"}}, flags), absl::StatusCode::kInvalidArgument,
              {"--rank=3", "DMLC_NUM_WORKER=2"});
}

TEST(ClusterEnvTest, RoleMismatch) {
  ExpectError(Resolve(ClusterRole::kWorker, {{"DMLC_ROLE", "server"}}), absl::StatusCode::kFailedPrecondition,
              {"DMLC_ROLE=server", "worker"});
  ExpectError(Resolve(ClusterRole::kWorker, {{"TF_CONFIG", TfConfig("ps", 0)}}), absl::StatusCode::kFailedPrecondition,
              {"TF_CONFIG task.type=ps", "worker"});
  ExpectError(Resolve(ClusterRole::kServer, {{"KESTREL_ROLE", "scheduler"}}), absl::StatusCode::kFailedPrecondition,
              {"KESTREL_ROLE=scheduler", "server"});
  // Two environments disagreeing when the caller does not know its role.
  ExpectError(Resolve(ClusterRole::kUnknown, {{"KESTREL_ROLE", "worker"}, {"DMLC_ROLE", "server"}}),
              absl::StatusCode::kFailedPrecondition, {"DMLC_ROLE=server", "KESTREL_ROLE=worker"});
  // The environment contradicting --role.
  ExplicitSettings flags;
  flags.role = ClusterRole::kServer;
  ExpectError(Resolve(ClusterRole::kUnknown, {{"DMLC_ROLE", "worker"}}, flags), absl::StatusCode::kFailedPrecondition,
              {"DMLC_ROLE=worker", "--role=server"});
  // --role contradicting the binary is a bad flag.
  ExpectError(Resolve(ClusterRole::kWorker, {}, flags), absl::StatusCode::kInvalidArgument,
              {"--role=server", "worker"});
  // Agreement is fine, and an unknown expected role is filled in.
  EXPECT_EQ(MustResolve(ClusterRole::kUnknown, {{"DMLC_ROLE", "server"}}).role, ClusterRole::kServer);
  EXPECT_EQ(MustResolve(ClusterRole::kServer, {{"DMLC_ROLE", "server"}}, flags).source, "flags+DMLC");
}

}  // namespace
}  // namespace kestrel
