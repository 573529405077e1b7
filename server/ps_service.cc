#include "server/ps_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/pull_wire.h"
#include "common/step_wire.h"
#include "common/usable_cores.h"
#include "common/status.h"
#include "server/checkpoint_restore.h"
#include "server/group_transfer.h"
#include "server/ps_handlers.h"
#include "server/replication.h"
#include "server/rescale_participant.h"
#include "server/server_metrics.h"

namespace kestrel {
namespace {

// Who may call what (common/peer_identity.h): workers move rows and create their tables; the scheduler
// checkpoints and restores; an admin (kestrel_ctl, tools) reads descriptions and statistics.
constexpr PeerRoles kDataRoles = RolesOf({PeerRole::kWorker});
constexpr PeerRoles kReadRoles = RolesOf({PeerRole::kWorker, PeerRole::kScheduler, PeerRole::kAdmin});
constexpr PeerRoles kAdminRoles = RolesOf({PeerRole::kScheduler});
// Replicate: only another server of the job (a primary forwarding an update it applied).
constexpr PeerRoles kServerRoles = RolesOf({PeerRole::kServer});

// How often reads waiting for their clocks are checked against their deadlines, and how long before its
// deadline such a read is answered (so the worker hears UNAVAILABLE, not DEADLINE_EXCEEDED, and asks again).
constexpr absl::Duration kExpirePeriod = absl::Milliseconds(200);
constexpr absl::Duration kWaitMargin = absl::Seconds(1);

std::optional<int> OwnerOf(const RequestHeader& header) {
  return header.has_owner() ? std::optional<int>(header.owner()) : std::nullopt;
}

// Two halves of one call that finish it together: `done` runs once both ran, with the first failure or OK.
std::pair<std::function<void(absl::Status)>, std::function<void(absl::Status)>> BothDone(
    std::function<void(absl::Status)> done) {
  struct Join {
    absl::Mutex mu;
    int left ABSL_GUARDED_BY(mu) = 2;
    absl::Status first ABSL_GUARDED_BY(mu);
    std::function<void(absl::Status)> done;
  };
  auto join = std::make_shared<Join>();
  join->done = std::move(done);
  auto half = [join](absl::Status status) {
    absl::Status result;
    {
      absl::MutexLock lock(&join->mu);
      if (join->first.ok()) join->first = std::move(status);
      if (--join->left > 0) return;
      result = join->first;
    }
    join->done(std::move(result));  // the last half: nobody else touches `done`
  };
  return {half, half};
}

// Most threads a Step's tables are applied on besides its handler's.
constexpr int kMaxStepTableThreads = 3;

// The threads a Step's tables are applied on besides its handler's: one fewer than the usable cores, at most
// kMaxStepTableThreads, none with one usable core.
std::unique_ptr<ThreadPool> StepTablePool() {
  const int extra = std::min(UsableCores() - 1, kMaxStepTableThreads);
  return extra > 0 ? std::make_unique<ThreadPool>(extra) : nullptr;
}

}  // namespace

PsServiceImpl::PsServiceImpl(std::shared_ptr<HostedShards> hosted, ThreadPool* pool, ShardStore* store,
                             PeerServers* peers)
    : job_id_(hosted->own().job_id()),
      pool_(pool),
      pull_rpc_(ServerMetrics::Get().rpc().method("Pull")),
      push_rpc_(ServerMetrics::Get().rpc().method("Push")),
      pull_dense_rpc_(ServerMetrics::Get().rpc().method("PullDense")),
      push_dense_rpc_(ServerMetrics::Get().rpc().method("PushDense")),
      create_table_rpc_(ServerMetrics::Get().rpc().method("CreateTable")),
      describe_tables_rpc_(ServerMetrics::Get().rpc().method("DescribeTables")),
      stats_rpc_(ServerMetrics::Get().rpc().method("Stats")),
      step_rpc_(ServerMetrics::Get().rpc().method("Step")),
      checkpoint_rpc_(ServerMetrics::Get().rpc().method("Checkpoint")),
      await_checkpoint_rpc_(ServerMetrics::Get().rpc().method("AwaitCheckpoint")),
      restore_rpc_(ServerMetrics::Get().rpc().method("Restore")),
      replicate_rpc_(ServerMetrics::Get().rpc().method("Replicate")),
      copy_group_rpc_(ServerMetrics::Get().rpc().method("CopyGroup")),
      rescale_rpc_(ServerMetrics::Get().rpc().method("RescaleShard")),
      layout_(std::move(hosted), peers),
      peers_(peers),
      transfer_(std::make_unique<GroupTransfer>(job_id_, peers)),
      checkpoints_(std::make_unique<CheckpointRestore>(&layout_, store)),
      rescale_(std::make_unique<RescaleParticipant>(job_id_, &layout_, store, peers)),
      step_tables_(StepTablePool()),
      admin_(1, kMaxQueuedAdminCalls),
      stats_hook_([this] { ServerMetrics::Get().Refresh(this->hosted()->own()); }),
      expirer_([this] {
        absl::MutexLock lock(&expire_mu_);
        while (!expire_mu_.AwaitWithTimeout(absl::Condition(&stopping_), kExpirePeriod)) {
          const Hosted groups = this->hosted();
          const absl::Time now = absl::Now();
          for (Shard* group : groups->shards()) group->ExpireWaits(now);
        }
      }) {}

PsServiceImpl::~PsServiceImpl() {
  {
    absl::MutexLock lock(&expire_mu_);
    stopping_ = true;
  }
  expirer_.join();
}

void PsServiceImpl::set_max_copy_bytes(uint64_t bytes) {
  transfer_->set_max_staged_bytes(bytes);
  rescale_->set_max_bytes(bytes);
}

// Runs `work` on the handler pool (or inline on gRPC's callback thread without one); the call finishes with the
// status `work` hands its `done`, counted and timed in `rpc`. Handlers do CPU work only; nothing in them waits
// on other calls.
grpc::ServerUnaryReactor* PsServiceImpl::RunAsync(grpc::CallbackServerContext* context, RpcMetrics::Method& rpc,
                                                  PeerRoles allowed, const char* method,
                                                  std::function<void(const Hosted&, const Caller&, Done done)> work,
                                                  bool primary) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const RpcMetrics::Call call = rpc.Begin();
  // Workers' calls are answered by a primary: checked again as the answer leaves (a read is as of a moment the
  // lease held; a write was forwarded to the backups first), so a pause mid-call cannot let a stale answer out.
  Done finish = [this, reactor, call, primary](const absl::Status& status) {
    absl::Status answer = status;
    if (primary && answer.ok()) answer = CheckLease();
    call.End(answer);
    reactor->Finish(ToGrpcStatus(answer));
  };
  absl::StatusOr<Caller> caller = AuthorizePeer(context->auth_context().get(), job_id_, allowed, method);
  if (!caller.ok()) {
    finish(hosted()->own().Count(caller.status()));
  } else if (pool_ == nullptr) {
    work(hosted(), *caller, std::move(finish));
  } else if (!pool_->TrySchedule([this, finish, work = std::move(work), caller = *std::move(caller)]() mutable {
               work(hosted(), caller, std::move(finish));
             })) {
    finish(hosted()->own().Count(absl::UnavailableError(absl::StrCat(
        "the server is busy: ", kMaxQueuedCalls, " calls are waiting for a handler thread; retry"))));
  }
  return reactor;
}

grpc::ServerUnaryReactor* PsServiceImpl::Run(grpc::CallbackServerContext* context, RpcMetrics::Method& rpc,
                                             PeerRoles allowed, const char* method,
                                             std::function<absl::Status(const Hosted&, const Caller&)> work) {
  return RunAsync(context, rpc, allowed, method,
                  [work = std::move(work)](const Hosted& hosted, const Caller& caller, Done done) {
                    done(work(hosted, caller));
                  });
}

grpc::ServerUnaryReactor* PsServiceImpl::RunAdmin(grpc::CallbackServerContext* context, RpcMetrics::Method& rpc,
                                                  const char* method, const RequestHeader& header,
                                                  std::function<absl::Status(const Hosted&)> work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const RpcMetrics::Call call = rpc.Begin();
  const absl::Status allowed = AuthorizePeer(context->auth_context().get(), job_id_, kAdminRoles, method).status();
  const bool queued = admin_.TrySchedule([this, reactor, &header, call, allowed, method, work = std::move(work)] {
    const Hosted hosted = this->hosted();
    Shard& own = hosted->own();
    absl::Status status = allowed.ok() ? own.CheckJob(ContextOf(header)) : own.Count(allowed);
    if (status.ok()) status = work(hosted);
    if (!status.ok()) KLOG(Warning) << method << " failed: " << status;
    call.End(status);
    reactor->Finish(ToGrpcStatus(status));
  });
  if (!queued) {  // a flood of admin calls: refused, not queued without bound
    const absl::Status busy = hosted()->own().Count(
        absl::UnavailableError("too many checkpoint, restore, copy and rescale calls are waiting; retry"));
    call.End(busy);
    reactor->Finish(ToGrpcStatus(busy));
  }
  return reactor;
}

absl::StatusOr<Shard*> PsServiceImpl::PrimaryGroup(const HostedShards& hosted, const RequestHeader& header) const {
  const Shard& own = hosted.own();
  if (layout_.left()) {
    return own.Count(absl::UnavailableError(absl::StrFormat(
        "server %d left the job in a rescale and serves nothing: ask the scheduler for the new layout and retry",
        hosted.server())));
  }
  absl::StatusOr<Shard*> group = hosted.Group(OwnerOf(header));
  if (!group.ok()) return own.Count(group.status());
  KESTREL_RETURN_IF_ERROR(own.Count(hosted.CheckPrimary((*group)->owner())));
  KESTREL_RETURN_IF_ERROR(own.Count(CheckLease(&hosted)));
  return group;
}

void PsServiceImpl::Forward(const HostedShards& hosted, const char* method, int owner,
                            const grpc::ByteBuffer& request, Done done) const {
  ForwardToBackups(
      hosted, owner,
      [this, method, &request](int backup, ReplicationDone answered) {
        if (peers_ == nullptr) return answered(absl::UnavailableError("this server has no links to other servers"));
        peers_->Forward(backup, method, request, std::move(answered));
      },
      std::move(done));
}

absl::Status PsServiceImpl::CheckLease(const HostedShards* hosted) const {
  if (!lease_.Enforced() || lease_.Held()) return absl::OkStatus();
  const Hosted current = hosted == nullptr ? this->hosted() : nullptr;  // only once the lease lapsed
  const HostedShards& groups = hosted != nullptr ? *hosted : *current;
  if (!groups.replicated()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrFormat(
      "server %d serves no range as primary: its lease from the scheduler lapsed %s ago (it may be cut off or "
      "paused, and a backup may have taken over): re-route and retry",
      groups.server(), absl::FormatDuration(lease_.LapsedFor())));
}

void PsServiceImpl::ServeWhenClocksAllow(grpc::CallbackServerContext* context, const Hosted& hosted, Shard& group,
                                         const RequestHeader& header, std::vector<ReadTable> tables,
                                         std::function<absl::Status()> serve, Done done) {
  if (!header.has_wait_clock() || tables.empty()) {
    done(serve());
    return;
  }
  const absl::Time now = absl::Now();
  const absl::Time deadline = absl::FromChrono(context->deadline());
  auto wait = std::make_shared<ClockWait>();
  wait->hosted = hosted;
  wait->group = &group;
  wait->header = &header;
  wait->tables = std::move(tables);
  wait->until = deadline - std::min(kWaitMargin, (deadline - now) / 2);
  wait->serve = std::move(serve);
  wait->done = std::move(done);
  AwaitTables(std::move(wait), 0, /*resumed=*/false);
}

void PsServiceImpl::AwaitTables(std::shared_ptr<ClockWait> wait, size_t next, bool resumed) {
  for (; next < wait->tables.size(); ++next) {
    const ReadTable& table = wait->tables[next];
    // Runs at most once: from the push (or restore, or expiry) that ends this table's wait.
    auto resume = [this, wait, next](absl::Status waited) {
      if (!waited.ok()) {
        wait->done(wait->hosted->own().Count(waited));
        return;
      }
      AwaitTables(wait, next + 1, /*resumed=*/true);
    };
    absl::StatusOr<bool> ready = wait->group->AwaitClocks(ContextOf(*wait->header), table.name, table.kind,
                                                          wait->header->wait_clock(), wait->until, resume);
    if (!ready.ok()) {
      wait->done(wait->group->Count(ready.status()));
      return;
    }
    if (!*ready) return;  // `resume` goes on
  }
  auto run = [wait] { wait->done(wait->serve()); };
  // Resumed on the releasing push's thread: serve on the pool (inline when it is full: bounded anyway).
  if (!resumed || pool_ == nullptr || !pool_->TrySchedule(run)) run();
}

grpc::ServerUnaryReactor* PsServiceImpl::Pull(grpc::CallbackServerContext* context,
                                               const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  return RunAsync(
      context, pull_rpc_, kDataRoles, "Pull",
      [this, context, request, response](const Hosted& hosted, const Caller& caller, Done done) {
        const Shard& own = hosted->own();
        auto parsed = std::make_shared<PullRequest>();
        grpc::ByteBuffer copy(*request);  // shares the slices; Deserialize consumes its argument
        grpc::Status status = grpc::SerializationTraits<PullRequest>::Deserialize(&copy, parsed.get());
        if (!status.ok()) {
          done(own.Count(absl::InvalidArgumentError("malformed PullRequest: " + status.error_message())));
          return;
        }
        if (absl::Status allowed = layout_.CheckWorkerCaller(caller, parsed->header().worker_rank(), "the Pull");
            !allowed.ok()) {
          done(own.Count(allowed));
          return;
        }
        absl::StatusOr<Shard*> group = PrimaryGroup(*hosted, parsed->header());
        if (!group.ok()) {
          done(group.status());
          return;
        }
        auto serve = [group = *group, parsed, response]() -> absl::Status {
          PullResponseWriter writer;
          absl::Status handled = HandlePullInto(*group, *parsed, [&writer](size_t values, int dim, ValueType type) {
            return writer.Allocate(values, dim, type);
          });
          if (handled.ok()) *response = writer.Finish();
          return handled;
        };
        ServeWhenClocksAllow(context, hosted, **group, parsed->header(), {{parsed->table(), TableConfig::SPARSE}},
                             std::move(serve), std::move(done));
      }, /*primary=*/true);
}

namespace {

// Serializes a push's answer into the raw response.
[[nodiscard]] absl::Status WritePushResponse(const PushResponse& answer, grpc::ByteBuffer* response) {
  bool own_buffer;
  grpc::Status serialized = grpc::SerializationTraits<PushResponse>::Serialize(answer, response, &own_buffer);
  return serialized.ok() ? absl::OkStatus() : absl::InternalError(serialized.error_message());
}

}  // namespace

grpc::ServerUnaryReactor* PsServiceImpl::Push(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                              grpc::ByteBuffer* response) {
  return RunAsync(context, push_rpc_, kDataRoles, "Push",
                  [this, request, response](const Hosted& hosted, const Caller& caller, Done done) {
                    const Shard& own = hosted->own();
                    PushRequestView view;
                    absl::StatusOr<Shard*> group = [&]() -> absl::StatusOr<Shard*> {
                      KESTREL_RETURN_IF_ERROR(own.Count(ReadPushRequest(*request, &view)));
                      KESTREL_RETURN_IF_ERROR(
                          own.Count(layout_.CheckWorkerCaller(caller, view.header->worker_rank(), "the Push")));
                      return PrimaryGroup(*hosted, *view.header);
                    }();
                    if (!group.ok()) return done(group.status());
                    // Replicated: checked here, the push goes to the backups, which apply it beside this primary;
                    // the worker hears OK once every copy has it.
                    Done answer = std::move(done);
                    PushResponse pushed;
                    absl::Status status;
                    if (hosted->BackupsOf((*group)->owner()).empty()) {
                      status = HandlePushFields(**group, /*dense=*/false, view, &pushed);
                    } else {
                      status = HandlePushFields(**group, /*dense=*/false, view, &pushed, [&] {
                        auto [forwarded, applied] = BothDone(std::move(answer));
                        Forward(*hosted, "Replicate", (*group)->owner(), *request, std::move(forwarded));
                        answer = std::move(applied);
                      });
                    }
                    if (status.ok()) status = WritePushResponse(pushed, response);
                    answer(std::move(status));
                  }, /*primary=*/true);
}

grpc::ServerUnaryReactor* PsServiceImpl::Replicate(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  return Run(context, replicate_rpc_, kServerRoles, "Replicate",
             [request, response](const Hosted& hosted, const Caller&) -> absl::Status {
               const Shard& own = hosted->own();
               KESTREL_RETURN_IF_ERROR(CheckReplicated(*hosted));
               PushRequestView view;
               KESTREL_RETURN_IF_ERROR(own.Count(ReadPushRequest(*request, &view)));
               if (!view.header->has_owner()) {
                 return own.Count(absl::InvalidArgumentError("a replicated push must name its range group (owner)"));
               }
               KESTREL_ASSIGN_OR_RETURN(Shard * group, own.Count(hosted->Group(view.header->owner())));
               PushResponse answer;
               KESTREL_RETURN_IF_ERROR(HandlePushFields(*group, /*dense=*/false, view, &answer));
               return WritePushResponse(answer, response);
             });
}

grpc::ServerUnaryReactor* PsServiceImpl::PullDense(grpc::CallbackServerContext* context,
                                                   const PullRequest* request, PullResponse* response) {
  return RunAsync(context, pull_dense_rpc_, kDataRoles, "PullDense",
                  [=](const Hosted& hosted, const Caller& caller, Done done) {
                    if (absl::Status allowed =
                            layout_.CheckWorkerCaller(caller, request->header().worker_rank(), "the PullDense");
                        !allowed.ok()) {
                      done(hosted->own().Count(allowed));
                      return;
                    }
                    absl::StatusOr<Shard*> group = PrimaryGroup(*hosted, request->header());
                    if (!group.ok()) {
                      done(group.status());
                      return;
                    }
                    auto serve = [group = *group, request, response] {
                      return HandlePullDense(*group, *request, response);
                    };
                    ServeWhenClocksAllow(context, hosted, **group, request->header(),
                                         {{request->table(), TableConfig::DENSE}}, std::move(serve), std::move(done));
                  }, /*primary=*/true);
}

grpc::ServerUnaryReactor* PsServiceImpl::PushDense(grpc::CallbackServerContext* context,
                                                   const PushRequest* request, PushResponse* response) {
  return RunAsync(context, push_dense_rpc_, kDataRoles, "PushDense",
                  [=](const Hosted& hosted, const Caller& caller, Done done) {
                    absl::Status status = [&]() -> absl::Status {
                      KESTREL_RETURN_IF_ERROR(hosted->own().Count(
                          layout_.CheckWorkerCaller(caller, request->header().worker_rank(), "the PushDense")));
                      KESTREL_ASSIGN_OR_RETURN(Shard * group, PrimaryGroup(*hosted, request->header()));
                      KESTREL_RETURN_IF_ERROR(HandlePushDense(*group, *request, response));
                      if (hosted->BackupsOf(group->owner()).empty()) {
                        done(absl::OkStatus());
                        return absl::OkStatus();
                      }
                      grpc::ByteBuffer bytes;
                      bool own_buffer;
                      grpc::Status serialized =
                          grpc::SerializationTraits<PushRequest>::Serialize(*request, &bytes, &own_buffer);
                      if (!serialized.ok()) return absl::InternalError(serialized.error_message());
                      Forward(*hosted, "ReplicateDense", group->owner(), bytes, std::move(done));
                      return absl::OkStatus();
                    }();
                    if (!status.ok()) done(std::move(status));
                  }, /*primary=*/true);
}

grpc::ServerUnaryReactor* PsServiceImpl::ReplicateDense(grpc::CallbackServerContext* context,
                                                        const PushRequest* request, PushResponse* response) {
  return Run(context, replicate_rpc_, kServerRoles, "ReplicateDense",
             [=](const Hosted& hosted, const Caller&) -> absl::Status {
               const Shard& own = hosted->own();
               KESTREL_RETURN_IF_ERROR(CheckReplicated(*hosted));
               if (!request->header().has_owner()) {
                 return own.Count(absl::InvalidArgumentError("a replicated push must name its range group (owner)"));
               }
               KESTREL_ASSIGN_OR_RETURN(Shard * group, own.Count(hosted->Group(request->header().owner())));
               return HandlePushDense(*group, *request, response);
             });
}

grpc::ServerUnaryReactor* PsServiceImpl::CreateTable(grpc::CallbackServerContext* context,
                                                     const CreateTableRequest* request,
                                                     CreateTableResponse* response) {
  // Every copy of every group this server holds gets the table (a backup must be able to take over).
  return Run(context, create_table_rpc_, kDataRoles, "CreateTable",
             [=](const Hosted& hosted, const Caller&) -> absl::Status {
               bool created = false;
               for (Shard* group : hosted->shards()) {
                 KESTREL_RETURN_IF_ERROR(HandleCreateTable(*group, *request, response));
                 created |= response->created();
               }
               response->set_created(created);
               return absl::OkStatus();
             });
}

grpc::ServerUnaryReactor* PsServiceImpl::DescribeTables(grpc::CallbackServerContext* context,
                                                        const DescribeTablesRequest* request,
                                                        DescribeTablesResponse* response) {
  return Run(context, describe_tables_rpc_, kReadRoles, "DescribeTables",
             [=](const Hosted& hosted, const Caller&) -> absl::Status {
               KESTREL_ASSIGN_OR_RETURN(Shard * group,
                                        hosted->own().Count(hosted->Group(OwnerOf(request->header()))));
               return HandleDescribeTables(*group, *request, response);
             });
}

grpc::ServerUnaryReactor* PsServiceImpl::Step(grpc::CallbackServerContext* context,
                                              const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  return RunAsync(context, step_rpc_, kDataRoles, "Step", [=](const Hosted& hosted, const Caller& caller, Done done) {
    const Shard& own = hosted->own();
    auto step = std::make_shared<StepRequestView>();  // outlives a wait: the serve callback holds it
    absl::StatusOr<Shard*> group = [&]() -> absl::StatusOr<Shard*> {
      KESTREL_RETURN_IF_ERROR(own.Count(ReadStepRequest(*request, step.get())));
      KESTREL_RETURN_IF_ERROR(own.Count(layout_.CheckWorkerCaller(caller, step->header->worker_rank(), "the Step")));
      return PrimaryGroup(*hosted, *step->header);
    }();
    if (!group.ok()) return done(group.status());
    // Replicated: once every push passed its checks, the received request (whose reads the backups skip) goes to
    // the backups, which apply it beside this primary; the worker hears OK once they have it and the reads are
    // answered.
    Done answer = std::move(done);
    const bool replicated = !hosted->BackupsOf((*group)->owner()).empty();
    absl::Status pushed = HandleStepPushes(**group, *step, step_tables_.get(), [&] {
      if (!replicated) return;
      auto [forwarded, served] = BothDone(std::move(answer));
      Forward(*hosted, "ReplicateStep", (*group)->owner(), *request, std::move(forwarded));
      answer = std::move(served);
    });
    if (!pushed.ok()) return answer(std::move(pushed));
    std::vector<ReadTable> reads;
    for (const StepTableFields& t : step->tables) {
      if (t.pull) reads.push_back({std::string(t.table), t.dense ? TableConfig::DENSE : TableConfig::SPARSE});
    }
    auto serve = [group = *group, step, response]() -> absl::Status {
      StepResponseWriter writer;
      KESTREL_RETURN_IF_ERROR(HandleStepPulls(*group, *step, &writer));
      *response = writer.Finish();
      return absl::OkStatus();
    };
    ServeWhenClocksAllow(context, hosted, **group, *step->header, std::move(reads), std::move(serve),
                         std::move(answer));
  }, /*primary=*/true);
}

grpc::ServerUnaryReactor* PsServiceImpl::ReplicateStep(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  return Run(context, replicate_rpc_, kServerRoles, "ReplicateStep",
             [this, request, response](const Hosted& hosted, const Caller&) -> absl::Status {
               const Shard& own = hosted->own();
               KESTREL_RETURN_IF_ERROR(CheckReplicated(*hosted));
               StepRequestView step;
               KESTREL_RETURN_IF_ERROR(own.Count(ReadStepRequest(*request, &step)));
               if (!step.header->has_owner()) {
                 return own.Count(absl::InvalidArgumentError("a replicated step must name its range group (owner)"));
               }
               KESTREL_ASSIGN_OR_RETURN(Shard * group, own.Count(hosted->Group(step.header->owner())));
               KESTREL_RETURN_IF_ERROR(HandleStepPushes(*group, step, step_tables_.get()));
               *response = StepResponseWriter().Finish();
               return absl::OkStatus();
             });
}

grpc::ServerUnaryReactor* PsServiceImpl::Stats(grpc::CallbackServerContext* context, const StatsRequest* request,
                                               StatsResponse* response) {
  return Run(context, stats_rpc_, kReadRoles, "Stats", [=](const Hosted& hosted, const Caller& caller) -> absl::Status {
    const Shard& own = hosted->own();
    // Fingerprints read every row of every table: an admin's (or the scheduler's) request, not a worker's.
    if (request->fingerprints() && caller.has_value() && caller->role == PeerRole::kWorker) {
      return own.Count(absl::PermissionDeniedError("a worker may not ask for fingerprints (admins only)"));
    }
    if (layout_.left()) {
      return own.Count(absl::UnavailableError(
          absl::StrFormat("server %d left the job in a rescale and holds no rows of it", hosted->server())));
    }
    KESTREL_ASSIGN_OR_RETURN(Shard * group, own.Count(hosted->Group(OwnerOf(request->header()))));
    return HandleStats(*group, *request, response);
  });
}

grpc::ServerUnaryReactor* PsServiceImpl::Checkpoint(grpc::CallbackServerContext* context,
                                                    const CheckpointShardRequest* request,
                                                    CheckpointShardResponse* response) {
  return RunAdmin(context, checkpoint_rpc_, "Checkpoint", request->header(),
                  [this, request, response](const Hosted& hosted) {
                    KESTREL_RETURN_IF_ERROR(checkpoints_->Checkpoint(*hosted, *request, response));
                    // Copy-on-write: the write is the admin thread's next task (the groups live until it ran), so
                    // a Restore or AwaitCheckpoint queued after this answer runs after it.
                    if (request->copy_on_write() && !admin_.TrySchedule([this, hosted] { checkpoints_->WriteCut(); })) {
                      checkpoints_->WriteCut();  // the queue is full: write now, answering late
                    }
                    return absl::OkStatus();
                  });
}

grpc::ServerUnaryReactor* PsServiceImpl::AwaitCheckpoint(grpc::CallbackServerContext* context,
                                                         const AwaitCheckpointRequest* request,
                                                         CheckpointShardResponse* response) {
  return RunAdmin(context, await_checkpoint_rpc_, "AwaitCheckpoint", request->header(),
                  [this, request, response](const Hosted&) { return checkpoints_->Await(*request, response); });
}

grpc::ServerUnaryReactor* PsServiceImpl::Restore(grpc::CallbackServerContext* context,
                                                 const RestoreShardRequest* request, RestoreShardResponse* response) {
  return RunAdmin(context, restore_rpc_, "Restore", request->header(),
                  [this, request, response](const Hosted& served) {
                    KESTREL_RETURN_IF_ERROR(checkpoints_->Restore(*served, *request, response));
                    // Every copy is restored: the groups' routing puts every server back in service at once.
                    const Hosted now = hosted();  // a restore into a new layout adopted new groups
                    if (request->routing_generation() == 0 || !now->replicated()) return absl::OkStatus();
                    return now->routing().Update(request->routing_generation(), {});
                  });
}

grpc::ServerUnaryReactor* PsServiceImpl::CopyGroup(grpc::CallbackServerContext* context,
                                                   const CopyGroupRequest* request, CopyGroupResponse* response) {
  return RunAdmin(context, copy_group_rpc_, "CopyGroup", request->header(),
                  [this, request, response](const Hosted& hosted) {
                    return transfer_->Send(*hosted, *request, response);
                  });
}

grpc::ServerUnaryReactor* PsServiceImpl::ReceiveGroup(grpc::CallbackServerContext* context, const GroupChunk* request,
                                                      GroupChunkResponse* response) {
  return Run(context, copy_group_rpc_, kServerRoles, "ReceiveGroup",
             [=](const Hosted& hosted, const Caller&) -> absl::Status {
               if (request->layout_generation() == 0) KESTREL_RETURN_IF_ERROR(CheckReplicated(*hosted));
               KESTREL_RETURN_IF_ERROR(hosted->own().CheckJob(ContextOf(request->header())));
               // A rescale's rows go to the new layout's groups; a group copy's are installed with its last piece.
               uint64_t installed = 0;
               KESTREL_RETURN_IF_ERROR(hosted->own().Count(request->layout_generation() > 0
                                                               ? rescale_->Receive(*hosted, *request)
                                                               : transfer_->Receive(*hosted, *request, &installed)));
               response->set_rows(installed);
               return absl::OkStatus();
             });
}

grpc::ServerUnaryReactor* PsServiceImpl::RescaleShard(grpc::CallbackServerContext* context,
                                                      const RescaleShardRequest* request,
                                                      RescaleShardResponse* response) {
  return RunAdmin(context, rescale_rpc_, "RescaleShard", request->header(),
                  [this, request, response](const Hosted& hosted) {
                    return rescale_->Handle(*hosted, *request, response);
                  });
}

}  // namespace kestrel
