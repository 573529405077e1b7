// kestrel_ctl: asks a running job's scheduler about it.
//
//   kestrel_ctl status --scheduler=host:port [--job_id=ctr]      job state, members, clocks, checkpoints
//   kestrel_ctl checkpoint --scheduler=host:port                 cut a checkpoint at the next clock boundary
//
// `status` prints one JSON object (for scripts, e.g. `kestrel status`). Exit codes: 0 answered, 1 the
// scheduler could not be reached or refused, 2 bad usage.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "scheduler/scheduler_client.h"

ABSL_FLAG(std::string, scheduler, "localhost:7000", "host:port of kestrel_scheduler.");
ABSL_FLAG(std::string, job_id, "kestrel", "The job's id.");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(10), "Deadline of the call.");

namespace kestrel {
namespace {

int Status(SchedulerClient& client) {
  absl::StatusOr<DescribeResponse> d = client.Describe();
  if (!d.ok()) {
    std::fprintf(stderr, "kestrel_ctl: %s\n", d.status().ToString().c_str());
    return 1;
  }
  std::vector<std::string> members;
  for (const MemberStatus& m : d->members()) {
    members.push_back(absl::StrFormat(R"({"role":"%s","rank":%d,"address":"%s","alive":%s,"clock":%d})",
                                      m.role() == ROLE_SERVER ? "server" : "worker", m.rank(), m.address(),
                                      m.alive() ? "true" : "false", m.clock()));
  }
  const ClusterView& v = d->view();
  std::printf("%s\n",
              absl::StrFormat(
                  R"({"job_state":"%s","generation":%d,"servers":%d,"workers":%d,"consistency":"%s","staleness":%d,)"
                  R"("min_clock":%d,"latest_checkpoint":"%s","latest_checkpoint_clock":%d,"checkpoints_committed":%d,)"
                  R"("rollbacks":%d,"members":[%s]})",
                  v.job_state(), v.generation(), v.num_servers(), v.num_workers(), v.consistency(), v.staleness(),
                  d->min_clock(), d->latest_checkpoint(), d->latest_checkpoint_clock(), d->checkpoints_committed(),
                  d->rollbacks(), absl::StrJoin(members, ","))
                  .c_str());
  return 0;
}

int Checkpoint(SchedulerClient& client) {
  absl::StatusOr<int64_t> clock = client.RequestCheckpoint();
  if (!clock.ok()) {
    std::fprintf(stderr, "kestrel_ctl: %s\n", clock.status().ToString().c_str());
    return 1;
  }
  std::printf("{\"checkpoint_at_clock\":%lld}\n", static_cast<long long>(*clock));
  return 0;
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("kestrel_ctl status|checkpoint --scheduler=host:port: ask a running job's scheduler.");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    std::fprintf(stderr, "usage: kestrel_ctl status|checkpoint --scheduler=host:port [--job_id=ID]\n");
    return 2;
  }
  kestrel::SchedulerClientOptions options;
  options.job_id = absl::GetFlag(FLAGS_job_id);
  options.rpc_deadline = absl::GetFlag(FLAGS_timeout);
  std::unique_ptr<kestrel::SchedulerClient> client =
      kestrel::NewGrpcSchedulerClient(absl::GetFlag(FLAGS_scheduler), options);
  const std::string command = args[1];
  if (command == "status") return kestrel::Status(*client);
  if (command == "checkpoint") return kestrel::Checkpoint(*client);
  std::fprintf(stderr, "kestrel_ctl: unknown command '%s' (status, checkpoint)\n", command.c_str());
  return 2;
}
