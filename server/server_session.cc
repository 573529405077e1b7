#include "server/server_session.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/registration.h"
#include "client/routing_announcement.h"
#include "common/consistency.h"
#include "common/logging.h"
#include "common/partition.h"
#include "common/status.h"
#include "server/hosted_shards.h"

namespace kestrel {

ServerSession::ServerSession(ServerSessionOptions options, std::unique_ptr<SchedulerClient> client,
                             ServedServer served)
    : options_(std::move(options)), client_(std::move(client)), served_(served) {}

ServerSession::~ServerSession() {
  served_.layout->SetGenerationListener(nullptr);  // before the heartbeater it points to goes
  heartbeater_.reset();
}

absl::StatusOr<std::unique_ptr<ServerSession>> ServerSession::Join(ServerSessionOptions options,
                                                                   std::unique_ptr<SchedulerClient> client,
                                                                   ServedServer served) {
  if (client == nullptr || served.layout == nullptr || served.lease == nullptr || options.on_refused == nullptr ||
      options.on_removed == nullptr) {
    return absl::InvalidArgumentError("a server session needs a scheduler client, the served layout, the "
                                      "primary lease and both listeners");
  }
  std::unique_ptr<ServerSession> session(new ServerSession(std::move(options), std::move(client), served));
  const ServerSessionOptions& o = session->options_;
  KESTREL_ASSIGN_OR_RETURN(Registered registered, RegisterWithRetry(*session->client_, o.scheduler, ROLE_SERVER,
                                                                    o.address, o.id, o.scheduler_timeout));
  const RegisterResponse& answer = registered.answer;
  const ClusterView& view = answer.view();
  session->lease_length_ = PrimaryLease::LengthFor(absl::Milliseconds(view.heartbeat_interval_ms()));
  served.lease->Renew(registered.sent, session->lease_length_);
  if (o.primary_fence) {
    served.lease->Enforce();
  } else {
    KLOG(Warning) << "--unsafe_no_primary_fence: this server serves as a primary without a lease from the "
                  << "scheduler; cut off, it may answer after a backup took over (split brain). Tests only.";
  }
  KESTREL_RETURN_IF_ERROR(session->TakeLayout(answer));
  session->rank_ = answer.rank();
  SetLogGeneration(view.generation());
  KLOG(Info) << "registered with the scheduler at " << o.scheduler << " as server " << o.id << ", rank "
             << answer.rank() << " (generation " << view.generation() << ")";
  ServerSession* self = session.get();
  session->heartbeater_ = std::make_unique<Heartbeater>(
      self->client_.get(), ROLE_SERVER, answer.id(), answer.incarnation(),
      absl::Milliseconds(view.heartbeat_interval_ms()) / 2,  // twice per interval
      [self](absl::Status status) {
        KLOG(Error) << "the scheduler refused this server: " << status << "; shutting down";
        self->options_.on_refused(std::move(status));
      },
      [self](const HeartbeatResponse& heartbeat) { self->OnAnswer(heartbeat); });
  // A worker generation the groups have not heard of (a worker that just registered or rejoined): ask now.
  Heartbeater* beat = session->heartbeater_.get();
  session->beat_.store(beat);
  beat->SetRoutingGeneration(served.layout->hosted()->routing_generation());
  served.layout->SetGenerationListener([beat] { beat->BeatSoon(); });
  beat->BeatSoon();  // the first view now, not an interval from now
  return session;
}

absl::Status ServerSession::TakeLayout(const RegisterResponse& registration) {
  const ClusterView& view = registration.view();
  absl::StatusOr<ConsistencyPolicy> consistency = ConsistencyPolicy::FromProto(view.consistency(), view.staleness());
  if (!consistency.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("the scheduler at ", options_.scheduler,
                                                      " announced no valid consistency: ",
                                                      consistency.status().message()));
  }
  const std::shared_ptr<HostedShards> hosted = served_.layout->hosted();
  const Shard& own = hosted->own();
  const int job_bsp_workers = consistency->bsp() ? view.num_workers() : 0;
  const int rank = registration.rank();
  const bool matches = view.partition() == own.partition().ToString() && own.bsp_workers() == job_bsp_workers;
  if (registration.joining()) {
    KLOG(Info) << "joining the job in a rescale to " << own.partition().num_servers()
               << " servers: the ranges arrive from the other servers";
    return absl::OkStatus();
  }
  if ((view.layout_generation() > 0 || rank != options_.id) && (!matches || rank != own.owner())) {
    // The job was rescaled since it started: its layout is the scheduler's, not this server's flags.
    if (!hosted->options().has_value()) {
      return absl::InvalidArgumentError("the job was rescaled and this server's groups cannot be made anew");
    }
    ShardOptions options = *hosted->options();
    options.bsp_workers = job_bsp_workers;
    options.owner = rank;
    absl::StatusOr<Partition> adopted = Partition::Parse(view.partition());
    absl::StatusOr<std::unique_ptr<HostedShards>> groups =
        adopted.ok() ? HostedShards::Create(options, *adopted) : adopted.status();
    if (!groups.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot take the rescaled job's layout '", view.partition(),
                                                     "': ", groups.status().message()));
    }
    KLOG(Info) << "the job was rescaled to " << view.num_servers() << " servers and " << view.num_workers()
               << " workers (rescale " << view.layout_generation() << "): serving rank " << rank
               << " of that layout, not the flags'";
    served_.layout->Adopt(*std::move(groups), view.layout_generation(),
                          {view.worker_ids().begin(), view.worker_ids().end()});
    return absl::OkStatus();
  }
  if (!matches) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this server's configuration does not match the job's: scheduler partition '", view.partition(), "', ",
        consistency->ToString(), " with ", view.num_workers(), " workers; this server: partition '",
        own.partition().ToString(), "', --bsp_workers=", own.bsp_workers(),
        " (must be the worker count in BSP, 0 otherwise)"));
  }
  return absl::OkStatus();
}

void ServerSession::OnAnswer(const HeartbeatResponse& answer) {
  Heartbeater* const beat = beat_.load();  // null only for an answer before Join stored it
  // The fence: the scheduler heard this server no earlier than the answered heartbeat was sent.
  if (beat != nullptr) served_.lease->Renew(beat->last_answered_sent(), lease_length_);
  if (answer.removed()) {
    if (!removed_.exchange(true)) {
      KLOG(Info) << "a rescale left server " << options_.id << " out of the job: shutting down";
      options_.on_removed();
    }
    return;
  }
  const std::shared_ptr<HostedShards> hosted = served_.layout->hosted();
  if (answer.generation() != last_generation_) {
    SetLogGeneration(answer.generation());
    KLOG(Info) << "server " << options_.id << " sees job generation " << answer.generation() << " ("
               << answer.job_state() << ")";
    last_generation_ = answer.generation();
  }
  served_.layout->SetJobView(answer.generation(),
                             {answer.worker_generations().begin(), answer.worker_generations().end()},
                             answer.layout_generation(), {answer.worker_ids().begin(), answer.worker_ids().end()});
  // The routing this server acts on, reported with every heartbeat (a switch installs one too).
  if (beat != nullptr) beat->SetRoutingGeneration(hosted->routing_generation());
  // An answer of an older layout (in flight across a switch) names the servers by their old ranks.
  if (hosted->replicated() && answer.layout_generation() >= served_.layout->generation()) {
    if (served_.peers != nullptr) {
      served_.peers->SetAddresses({answer.server_addresses().begin(), answer.server_addresses().end()});
    }
    if (ApplyRouting(hosted->routing(), answer.routing_generation(), answer.out_of_service())) {
      // Tell the scheduler at once: it waits for every server to act on a routing before workers use it.
      if (beat != nullptr) {
        beat->SetRoutingGeneration(hosted->routing_generation());
        beat->BeatSoon();
      }
    }
  }
}

}  // namespace kestrel
