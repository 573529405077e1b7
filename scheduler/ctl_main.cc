// kestrel_ctl: asks a running job's scheduler about it.
//
//   kestrel_ctl status --scheduler=host:port [--job_id=ctr]      job state, members, clocks, checkpoints
//   kestrel_ctl checkpoint --scheduler=host:port                 cut a checkpoint at the next clock boundary
//   kestrel_ctl scale --scheduler=host:port --servers=N --workers=M
//       resize the running job at the next clock boundary (docs/elasticity.md): start the new ranks first; the
//       answer comes once the rows have moved and every member uses the new layout
//   kestrel_ctl scale --scheduler=host:port --remove_workers=1 [--remove_servers=...]
//       drop ranks that died and will not come back (what the scheduler's --elastic does by itself)
//
// Each prints one JSON object (proto/ctl.proto: CtlStatus, CtlCheckpoint, CtlScale), for scripts, e.g. `kestrel status`.
// Exit codes: 0 answered, 1 the scheduler could not be reached or refused, 2 bad usage.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/command_line.h"
#include "common/job_id_flag.h"
#include "common/scheduler_flag.h"
#include "common/consistency.h"
#include "common/json.h"
#include "common/partition.h"
#include "common/tls.h"
#include "common/tls_flags.h"
#include "common/partition.h"
#include "proto/ctl.pb.h"
#include "client/grpc_scheduler_client.h"
#include "client/scheduler_client.h"

ABSL_FLAG(absl::Duration, timeout, absl::Seconds(10), "Deadline of the call.");
ABSL_FLAG(int, servers, 0, "scale: the server count to move to (0: unchanged).");
ABSL_FLAG(int, workers, 0, "scale: the worker count to move to (0: unchanged).");
ABSL_FLAG(absl::Duration, join_timeout, absl::Minutes(5),
          "scale: how long the new ranks may take to register before the rescale is given up (the job unchanged).");
ABSL_FLAG(int64_t, at_clock, 0,
          "scale: rescale at the boundary of this clock instead of the earliest one (a repeatable schedule); the "
          "call fails if the job is past it by the time the new ranks registered. 0 (default): the earliest.");
ABSL_FLAG(bool, verify, false,
          "scale: read the full table's fingerprint before and after the move (reads every row: a longer hold).");
ABSL_FLAG(std::vector<std::string>, remove_servers, {},
          "scale: server ranks to drop, each dead (comma-separated); the ranks above are renumbered. Default: none.");
ABSL_FLAG(std::vector<std::string>, remove_workers, {},
          "scale: worker ranks to drop, each dead (comma-separated); the ranks above are renumbered. Default: none.");

namespace kestrel {
namespace {

int Status(SchedulerClient& client) {
  absl::StatusOr<DescribeResponse> d = client.Describe();
  if (!d.ok()) {
    std::fprintf(stderr, "kestrel_ctl: %s\n", d.status().ToString().c_str());
    return 1;
  }
  const ClusterView& v = d->view();
  CtlStatus status;
  status.set_job_state(v.job_state());
  status.set_generation(v.generation());
  status.set_servers(v.num_servers());
  status.set_workers(v.num_workers());
  status.set_consistency(std::string(ConsistencyPolicy{v.consistency(), v.staleness()}.name()));
  status.set_staleness(v.staleness());
  status.set_min_clock(d->min_clock());
  status.set_latest_checkpoint(d->latest_checkpoint());
  status.set_latest_checkpoint_clock(d->latest_checkpoint_clock());
  status.set_checkpoints_committed(d->checkpoints_committed());
  status.set_rollbacks(d->rollbacks());
  if (d->checkpoints_failed() > 0) {
    status.set_checkpoints_failed(d->checkpoints_failed());
    status.set_last_checkpoint_failure(d->last_checkpoint_failure());
  }
  if (d->final_checkpoint_failed()) status.set_final_checkpoint_failed(true);
  status.set_layout_generation(v.layout_generation());
  if (absl::StatusOr<Partition> partition = Partition::Parse(v.partition());
      partition.ok() && partition->replicas() > 1) {
    status.set_replicas(partition->replicas());
    status.set_failovers(d->failovers());
    status.set_rereplications(d->rereplications());
    status.set_under_replicated_ranges(d->under_replicated_ranges());
    for (int s : v.out_of_service()) status.add_out_of_service(s);
  }
  for (const MemberStatus& m : d->members()) {
    CtlStatus::Member* member = status.add_members();
    member->set_role(m.role() == ROLE_SERVER ? "server" : "worker");
    member->set_rank(m.rank());
    member->set_address(m.address());
    member->set_alive(m.alive());
    member->set_clock(static_cast<double>(std::max(m.clock(), m.progress())));
    member->set_id(m.id());
  }
  status.set_elastic_removals(d->elastic_removals());
  std::printf("%s\n", ToJson(status).c_str());
  return 0;
}

int Checkpoint(SchedulerClient& client) {
  absl::StatusOr<int64_t> clock = client.RequestCheckpoint();
  if (!clock.ok()) {
    std::fprintf(stderr, "kestrel_ctl: %s\n", clock.status().ToString().c_str());
    return 1;
  }
  CtlCheckpoint answer;
  answer.set_checkpoint_at_clock(*clock);
  std::printf("%s\n", ToJson(answer).c_str());
  return 0;
}

int Scale(SchedulerClient& client) {
  absl::StatusOr<DescribeResponse> d = client.Describe();
  if (!d.ok()) {
    std::fprintf(stderr, "kestrel_ctl: %s\n", d.status().ToString().c_str());
    return 1;
  }
  ScaleRequest request;
  for (auto [flag, list] : {std::make_pair(absl::GetFlag(FLAGS_remove_servers), request.mutable_remove_servers()),
                            std::make_pair(absl::GetFlag(FLAGS_remove_workers), request.mutable_remove_workers())}) {
    for (const std::string& rank : flag) {
      int r = -1;
      if (!absl::SimpleAtoi(rank, &r) || r < 0) {
        std::fprintf(stderr, "kestrel_ctl: --remove_servers and --remove_workers take ranks, got '%s'\n",
                     rank.c_str());
        return 2;
      }
      list->Add(r);
    }
  }
  const int servers = absl::GetFlag(FLAGS_servers) > 0 ? absl::GetFlag(FLAGS_servers)
                                                        : d->view().num_servers() - request.remove_servers_size();
  const int workers = absl::GetFlag(FLAGS_workers) > 0 ? absl::GetFlag(FLAGS_workers)
                                                        : d->view().num_workers() - request.remove_workers_size();
  request.set_servers(servers);
  request.set_workers(workers);
  request.set_verify(absl::GetFlag(FLAGS_verify));
  request.set_at_clock(absl::GetFlag(FLAGS_at_clock));
  request.set_join_timeout_ms(absl::ToInt64Milliseconds(absl::GetFlag(FLAGS_join_timeout)));
  // The new ranks may take join_timeout to start, then rows move: a generous deadline.
  absl::StatusOr<ScaleResponse> scaled =
      client.Scale(request, absl::GetFlag(FLAGS_join_timeout) + absl::Minutes(10));
  if (!scaled.ok()) {
    std::fprintf(stderr, "kestrel_ctl: %s\n", scaled.status().ToString().c_str());
    return 1;
  }
  CtlScale answer;
  answer.set_clock(scaled->clock());
  answer.set_layout_generation(scaled->layout_generation());
  answer.set_servers(servers);
  answer.set_workers(workers);
  answer.set_held_seconds(scaled->held_seconds());
  answer.set_rows_moved(scaled->rows_moved());
  answer.set_bytes_moved(scaled->bytes_moved());
  if (absl::GetFlag(FLAGS_verify)) {
    answer.set_fingerprint_before(absl::StrFormat("%016x", scaled->fingerprint_before()));
    answer.set_fingerprint_after(absl::StrFormat("%016x", scaled->fingerprint_after()));
  }
  std::printf("%s\n", ToJson(answer).c_str());
  return 0;
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  std::vector<char*> args = kestrel::ParseCommandLine(argc, argv, "kestrel_ctl status|checkpoint|scale --scheduler=host:port: ask a running job's scheduler.");
  if (args.size() != 2) {
    std::fprintf(stderr,
                 "usage: kestrel_ctl status|checkpoint|scale --scheduler=host:port [--job_id=ID] "
                 "[--servers=N --workers=M]\n");
    return 2;
  }
  kestrel::SchedulerClientOptions options;
  options.job_id = absl::GetFlag(FLAGS_job_id);
  options.rpc_deadline = absl::GetFlag(FLAGS_timeout);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      kestrel::MakeChannelCredentials(kestrel::TlsConfigFromFlags());
  if (!credentials.ok()) {
    std::fprintf(stderr, "kestrel_ctl: %s\n", credentials.status().ToString().c_str());
    return 2;
  }
  std::unique_ptr<kestrel::SchedulerClient> client = kestrel::NewGrpcSchedulerClient(
      absl::GetFlag(FLAGS_scheduler).empty() ? "localhost:7000" : absl::GetFlag(FLAGS_scheduler), options,
      *credentials);
  const std::string command = args[1];
  if (command == "status") return kestrel::Status(*client);
  if (command == "checkpoint") return kestrel::Checkpoint(*client);
  if (command == "scale") return kestrel::Scale(*client);
  std::fprintf(stderr, "kestrel_ctl: unknown command '%s' (status, checkpoint, scale)\n", command.c_str());
  return 2;
}
