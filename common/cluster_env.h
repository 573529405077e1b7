// ClusterIdentity: who this process is in a Kestrel job (role, rank within the role, job size, scheduler
// address), taken from explicit flags first and then from the environment the launcher already provides, so
// that `kestrel_worker` started by Kubeflow, BytePS/ps-lite scripts, Kubernetes, Slurm or mpirun needs no
// per-process flags.
//
// Each field is taken from the first of these that gives it:
//
//   1. ExplicitSettings       what the command line said (--role, --rank, --num_servers, --num_workers,
//                             --scheduler); -1 / "" = not given.
//   2. KESTREL_*              our own variables, set by deploy/: KESTREL_ROLE, KESTREL_RANK,
//                             KESTREL_NUM_SERVERS, KESTREL_NUM_WORKERS, KESTREL_SCHEDULER. Each one counts on
//                             its own, like a flag (e.g. KESTREL_NUM_SERVERS plus a rank from mpirun).
//   3. the first present of these launcher environments (only that one is read; they are never mixed, since
//      a rank from one numbering means nothing next to a count from another):
//        source                   present when                       gives
//        TF_CONFIG                TF_CONFIG is set                   role (task.type ps/worker/chief/master),
//                                                                    rank (task.index), counts (len(cluster.ps),
//                                                                    len(cluster.worker)), scheduler
//                                                                    (cluster.chief[0], else master[0])
//        DMLC                     any DMLC_ROLE, DMLC_PS_ROOT_URI,   role, scheduler (URI:PORT), counts
//                                 DMLC_PS_ROOT_PORT, DMLC_NUM_SERVER (DMLC_NUM_SERVER/_WORKER), rank
//                                 DMLC_NUM_WORKER, DMLC_SERVER_ID,   (DMLC_SERVER_ID / DMLC_WORKER_ID for the
//                                 DMLC_WORKER_ID is set              role; else unknown)
//        openmpi                  OMPI_COMM_WORLD_RANK is set        global rank, world size
//                                                                    (OMPI_COMM_WORLD_SIZE)
//        pmi                      PMI_RANK is set (MPICH, Intel MPI) global rank, world size (PMI_SIZE)
//        kubernetes-statefulset   KUBERNETES_SERVICE_HOST is set,    global rank = the ordinal
//                                 JOB_COMPLETION_INDEX is not, and
//                                 the hostname is "<name>-<ordinal>"
//        kubernetes-indexed-job   JOB_COMPLETION_INDEX is set        global rank = the index
//        slurm                    SLURM_PROCID is set                global rank, world size (SLURM_NTASKS)
//
// The MPI launchers come before Kubernetes and Slurm on purpose: mpirun run inside a Slurm allocation (or in
// a pod through `kubectl exec`) starts its ranks with the allocation's SLURM_PROCID (or the pod's hostname)
// inherited, which then names the node or pod, not the process; OMPI_COMM_WORLD_RANK / PMI_RANK are set per
// process. Where both are right (srun --mpi=pmi2) they agree.
//
// A variable set to the empty string counts as unset. The launcher sources below DMLC know no roles: their
// rank numbers all processes of the launch. If one launch starts every role (srun --multi-prog, mpirun MPMD
// "-np 2 kestrel_server : -np 8 kestrel_worker"), pass the first global rank of this process's role as
// ExplicitSettings::rank_offset (--rank_offset=2 for the workers above); it is subtracted from such a rank. A
// launch per role needs no offset. Their world size is reported as ClusterIdentity::world_size and is never
// taken as a role's count. Caveat: under a Kubernetes Deployment a pod's hostname can end in "-<digits>" too
// (the random suffix); set KESTREL_RANK or --rank there, or leave the rank unknown with KESTREL_RANK unset
// and no StatefulSet-like hostname.
//
// Errors: a malformed value (non-numeric rank, bad TF_CONFIG JSON, unknown role name, rank >= its count or
// world size, rank below rank_offset) is InvalidArgument naming the variable or flag. A role stated by the
// environment that contradicts the expected role, the --role flag or another stated role is
// FailedPrecondition naming both. Nothing giving a rank is not an error: the rank stays -1 and the caller
// takes any free rank from the scheduler. A launcher environment is read only when flags and KESTREL_*
// leave some field unknown, so fully explicit flags work around a broken environment.
//
// Thread-safety: ResolveClusterIdentity is a pure function of its arguments (thread-safe if `env` is).
// ProcessEnvironment()'s lookup calls getenv, which must not race with setenv/putenv in other threads.
#ifndef KESTREL_COMMON_CLUSTER_ENV_H_
#define KESTREL_COMMON_CLUSTER_ENV_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kestrel {

enum class ClusterRole { kUnknown, kScheduler, kServer, kWorker };

// "unknown", "scheduler", "server", "worker".
absl::string_view ClusterRoleName(ClusterRole role);
// Parses "scheduler", "server" or "worker" (case-insensitive); InvalidArgument otherwise.
[[nodiscard]] absl::StatusOr<ClusterRole> ParseClusterRole(absl::string_view name);

// Looks up one environment variable: its value, or nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(absl::string_view name)>;

// The real process environment (getenv).
EnvLookup ProcessEnvironment();
// This machine's host name (gethostname), "" on failure.
std::string ProcessHostname();

// What the command line said. Every field defaults to "not given".
struct ExplicitSettings {
  // --role. Default kUnknown: not given.
  ClusterRole role = ClusterRole::kUnknown;
  // --rank, within the role. Default -1: not given. Never offset.
  int rank = -1;
  // --num_servers / --num_workers. Default -1: not given.
  int num_servers = -1;
  int num_workers = -1;
  // --scheduler, host:port. Default "": not given.
  std::string scheduler;
  // --rank_offset: subtracted from a rank that comes from a role-less launcher (openmpi, pmi,
  // kubernetes-statefulset, kubernetes-indexed-job, slurm) in an MPMD launch of several roles. Default 0. No
  // effect on ranks from flags, KESTREL_RANK, TF_CONFIG or DMLC, which are already per role.
  int rank_offset = 0;
};

// The resolved identity. Unknown fields keep their defaults.
struct ClusterIdentity {
  // Default kUnknown: neither the caller, the flags nor the environment said.
  ClusterRole role = ClusterRole::kUnknown;
  // Rank within the role, after rank_offset. Default -1: unknown, take any free rank from the scheduler.
  int rank = -1;
  // Job size per role. Default -1: unknown.
  int num_servers = -1;
  int num_workers = -1;
  // Scheduler address, host:port. Default "": unknown.
  std::string scheduler;
  // Size of a role-less launcher's rank space (OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS): all processes
  // of the launch, of every role in an MPMD launch. Default -1: unknown or not such a launcher.
  int world_size = -1;
  // Which sources supplied at least one field, in precedence order joined by '+', for logs: "flags",
  // "KESTREL", "TF_CONFIG", "DMLC", "openmpi", "pmi", "kubernetes-statefulset", "kubernetes-indexed-job",
  // "slurm"; e.g. "flags+slurm". Default "": none did.
  std::string source;
  // Where the rank came from, for logs: e.g. "--rank=3", "SLURM_PROCID=7 - --rank_offset=2",
  // "TF_CONFIG task.index=1". Default "": rank unknown.
  std::string rank_source;

  // One line for logs, e.g. "worker rank 5 (SLURM_PROCID=7 - --rank_offset=2), 2 servers, 8 workers,
  // scheduler node0:7000, world size 10, from flags+KESTREL+slurm".
  std::string DebugString() const;
};

// Resolves this process's identity; see the file comment for the precedence and the errors.
// `expected_role`: the role of the calling binary (kWorker in kestrel_worker), kUnknown if it can be any.
// `hostname`: this machine's host name (ProcessHostname() in production), used for StatefulSet ordinals.
[[nodiscard]] absl::StatusOr<ClusterIdentity> ResolveClusterIdentity(ClusterRole expected_role, const ExplicitSettings& flags,
                                                       const EnvLookup& env, absl::string_view hostname);

}  // namespace kestrel

#endif  // KESTREL_COMMON_CLUSTER_ENV_H_
