#include "worker/trainer.h"

#include <algorithm>
#include <future>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/held_reads.h"
#include "common/fault_injection.h"
#include "common/logging.h"
#include "common/status.h"
#include "worker/batch_pipeline.h"
#include "worker/batch_reader.h"
#include "worker/data/schema.h"
#include "worker/early_stopping.h"
#include "worker/embedding_tables.h"
#include "common/evaluation.h"
#include "worker/model.h"
#include "worker/phase_clock.h"
#include "worker/line_log.h"
#include "worker/records.h"
#include "worker/pull_split.h"
#include "worker/scoring.h"
#include "worker/step_exchange.h"
#include "worker/trainer_records.h"
#include "worker/training_feed.h"

namespace kestrel {

class Trainer::Impl {
 public:
  Impl(TrainerOptions options, PsClient* client, ClockGate* gate, Backend* backend)
      : options_(std::move(options)), client_(client), gate_(gate), backend_(backend),
        records_(options_.metrics_path),
        line_log_(options_.line_log),
        grads_{std::make_unique<GradBuffers>(backend), std::make_unique<GradBuffers>(backend)},
        early_stopping_(options_.job.train().early_stopping_patience(), options_.keep_best) {
    options_.job = JobWithDefaults(options_.job);
  }
  absl::Status Init() {
    if (model_ != nullptr) return absl::OkStatus();
    const JobConfig& job = options_.job;
    schema_ = options_.schema;
    if (schema_ == nullptr) {
      KESTREL_ASSIGN_OR_RETURN(schema_, Schema::Resolve(job.data(), job.model()));
    }
    KESTREL_ASSIGN_OR_RETURN(model_, Model::Create(job.model(), schema_->fields(), schema_->dense_dim(), backend_));
    tables_ = EmbeddingTables::ForSchema(client_, *schema_, model_->embedding_dim());
    exchange_ = std::make_unique<StepExchange>(client_, tables_.get(), model_.get());
    if (options_.create_tables) {
      std::vector<TableConfig> tables = model_->Tables();
      if (model_->has_embedding()) {
        for (TableConfig& extra : schema_->ExtraTableConfigs(job.model())) tables.push_back(std::move(extra));
      }
      for (const TableConfig& table : tables) {
        if (table.kind() == TableConfig::SPARSE && table.name() != kWideTable && !tables_->used(table.name())) continue;
        KESTREL_RETURN_IF_ERROR(client_->CreateTable(table));
      }
    }
    return absl::OkStatus();
  }

  // Pushes iteration `clock`'s gradients, then tells the gate it is done.
  absl::Status PushAndAdvance(const StepData& step, const GradBuffers& g, int64_t clock, bool last,
                              const PullSplit::Part* part = nullptr) {
    CrashPoint("worker.push.before");  // crash tests: dies with nothing of this clock pushed
    {
      PhaseClock::Scope pushing(&phases_, PhaseClock::kPush);
      // With `part` (split pushes), its keys' gradients and the dense ones; the rest follows (SplitPushAndPull).
      absl::Status pushed = part == nullptr
                                ? exchange_->Push(step, g, clock)
                                : exchange_->PushPart(*part, step, g, clock, /*dense=*/true, &push_rows_);
      if (!pushed.ok()) return Annotate(pushed, clock, "pushing");
    }
    // Logged once pushed, before it is reported: a reported clock is in the log; an unreported one reruns.
    if (line_log_.on()) line_log_.Append(clock, feed_->EpochAt(clock).index, step.lines);
    CrashPoint("worker.push.after");  // crash tests: dies with this clock pushed, not reported
    PhaseClock::Scope waiting(&phases_, PhaseClock::kWait);
    KESTREL_RETURN_IF_ERROR(gate_->Advance(clock + 1, last, feed_->StateOf(clock + 1, step.after)));
    return absl::OkStatus();
  }

  // Whether iteration `clock`'s push and clock + 1's pull may travel as one Step (see the class comment). The
  // read of clock + 1 need not be permitted yet: it only reads, and nothing but a rollback (which restarts the
  // worker) changes those rows before this worker runs clock + 1. So lease ends fuse too.
  bool CanFuse(const StepData& step, int64_t clock) const {
    return !options_.prefetch_pulls && step.batch.tables.empty() && gate_->WaitClock(clock + 1).has_value() &&
           gate_->Leased();
  }

  // Pushes iteration `clock`'s gradients (of `step`) and pulls the rows of the next batch for iteration
  // `read_clock` in one Step (clock + 1; under SSP, fused ahead, clock + 2), then tells the gate `clock` is done
  // and waits for read_clock's permission. The next batch comes back (or null with an error).
  absl::StatusOr<std::unique_ptr<StepData>> PushAndFetch(const StepData& step, const GradBuffers& g, int64_t clock,
                                                         int64_t read_clock) {
    std::unique_ptr<StepData> next;
    {
      PhaseClock::Scope waiting(&phases_, PhaseClock::kWait);
      KESTREL_ASSIGN_OR_RETURN(next, NextBatch());
    }
    if (!next->batch.tables.empty()) return absl::InternalError("a fused step of several embedding tables");
    const std::optional<int64_t> wait = gate_->WaitClock(read_clock);
    const int64_t fresh = std::max(options_.row_cache_own_clock ? read_clock : gate_->KnownMinClock(), *wait);
    // Ahead of this worker's own later pushes (SSP), the read carries the clock pushed with it, as prefetched
    // pulls do (PullClock).
    next->read = CallClock{options_.prefetch_pulls ? clock : read_clock, CacheRead{read_clock, fresh}, wait};
    KESTREL_RETURN_IF_ERROR(exchange_->ReserveRows(next.get()));
    CrashPoint("worker.push.before");
    {
      PhaseClock::Scope pushing(&phases_, PhaseClock::kPush);
      if (absl::Status stepped = exchange_->Fused(step, g, clock, next.get()); !stepped.ok()) {
        if (HeldClockOf(stepped).has_value()) {  // every server took the pushes and held the read alone
          unread_ = std::move(next);
          if (line_log_.on()) line_log_.Append(clock, feed_->EpochAt(clock).index, step.lines);
          KESTREL_RETURN_IF_ERROR(gate_->Advance(clock + 1, false, feed_->StateOf(clock + 1, step.after)));
        }
        return Annotate(stepped, clock, "pushing and pulling the next batch");
      }
    }
    if (line_log_.on()) line_log_.Append(clock, feed_->EpochAt(clock).index, step.lines);  // pushed (see above)
    CrashPoint("worker.push.after");
    {
      PhaseClock::Scope waiting(&phases_, PhaseClock::kWait);
      KESTREL_RETURN_IF_ERROR(gate_->Advance(clock + 1, false, feed_->StateOf(clock + 1, step.after)));
      // Fused ahead, iteration clock + 1 is still to push: TakeNextBatch asks for read_clock's permission.
      if (read_clock == clock + 1) KESTREL_RETURN_IF_ERROR(gate_->WaitToStart(read_clock));  // within the lease
    }
    return next;
  }

  // Waits for permission to run iteration `clock`, takes its batch and pulls its rows, sending `sent` with
  // the pulls (see sent_clock_).
  absl::StatusOr<std::unique_ptr<StepData>> Fetch(int64_t clock, int64_t sent) {
    absl::StatusOr<std::unique_ptr<StepData>> step;
    {
      PhaseClock::Scope waiting(&phases_, PhaseClock::kWait);
      KESTREL_ASSIGN_OR_RETURN(const CallClock read, StartReading(clock, sent));
      step = NextBatch();
      if (!step.ok()) return step.status();
      (*step)->read = read;
    }
    PhaseClock::Scope pulling(&phases_, PhaseClock::kPull);
    if (absl::Status pulled = exchange_->Pull(step->get()); !pulled.ok()) {
      if (HeldClockOf(pulled).has_value()) unread_ = *std::move(step);
      return pulled;
    }
    return step;
  }

  // The next batch of the feed: the one whose read the servers held (unread_), else the pipeline's next.
  absl::StatusOr<std::unique_ptr<StepData>> NextBatch() {
    if (unread_ != nullptr) return std::move(unread_);
    return pipeline_->Pop();
  }

  // Waits for permission to run iteration `clock`; what its pulls carry, sending `sent`.
  absl::StatusOr<CallClock> StartReading(int64_t clock, int64_t sent) {
    KESTREL_RETURN_IF_ERROR(gate_->WaitToStart(clock));
    // Read after the permission: every update below it is in the rows pulled from now on.
    int64_t fresh = options_.row_cache_own_clock ? clock : gate_->KnownMinClock();
    // Server-enforced clocks: the servers answer once the updates this read must see are in, so its rows hold
    // every update below the clock it waits for.
    const std::optional<int64_t> wait = gate_->WaitClock(clock);
    if (wait.has_value()) fresh = std::max(fresh, *wait);
    return CallClock{sent, CacheRead{clock, fresh}, wait};
  }

  // split_pulls, while `current` computes: takes iteration `clock`'s batch and pulls the rows of its keys that
  // `current` does not push (their rows read the same before and after that push). A batch of several embedding
  // tables waits for PullLate whole.
  absl::StatusOr<std::unique_ptr<StepData>> PullEarly(int64_t clock, const StepData* current) {
    KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<StepData> next, pipeline_->Pop());
    next->read = CallClock{clock};
    KESTREL_RETURN_IF_ERROR(exchange_->ReserveRows(next.get()));
    if (!next->batch.tables.empty()) return next;
    split_.Build(current->batch.keys, next->batch.keys, options_.partition);
    KESTREL_RETURN_IF_ERROR(exchange_->PullPart(split_.early(), next.get(), &split_rows_));
    return next;
  }

  // split_pulls, once the push before it is in: the permission to run iteration `clock` and the rest of `step`'s
  // rows (those that push changed) and the dense tensor.
  absl::Status PullLate(int64_t clock, int64_t sent, StepData* step) {
    {
      PhaseClock::Scope waiting(&phases_, PhaseClock::kWait);
      KESTREL_ASSIGN_OR_RETURN(step->read, StartReading(clock, sent));
    }
    PhaseClock::Scope pulling(&phases_, PhaseClock::kPull);
    if (!step->batch.tables.empty()) return exchange_->Pull(step);
    KESTREL_RETURN_IF_ERROR(exchange_->PullPart(split_.late(), step, &split_rows_));
    return exchange_->PullDense(step);
  }

  // The clock iteration `clock`'s pulls carry. Without prefetching (BSP), their iteration: a server that already
  // applied it (this worker replaces one that died after pushing) answers the weights from before it. Prefetched
  // pulls run ahead of the pushes before them and carry sent_clock_.
  int64_t PullClock(int64_t clock) {
    if (!options_.prefetch_pulls) sent_clock_ = clock;
    return sent_clock_;
  }

  // One Run()'s training loop: the batches in flight and the progress so far. Its members go in reverse order:
  // the overlapped push and the fused-ahead Step (which use `pushed`, `held` and the pipeline) are waited for
  // first, then the pipeline is stopped, then `next` is waited for.
  struct Loop {
    // split_pulls: the batch whose rest is still being pushed (`rest`), kept until that push is in. First, so it
    // outlives every future below that may still use it.
    std::unique_ptr<StepData> resting;
    // The prefetched next batch (prefetch_pulls). Before `stop`, so on an early return the pipeline is stopped
    // (ending a pending Fetch) before this future's destructor waits for it.
    std::future<absl::StatusOr<std::unique_ptr<StepData>>> next;
    // The next batch with its early rows (split_pulls), pulled while the current batch computes. Before `stop`,
    // as `next`.
    std::future<absl::StatusOr<std::unique_ptr<StepData>>> early;
    // split_pulls: the rest of the last iteration's push (the rows of its keys the next batch lacks), in flight
    // while the next batch computes; the next early pull waits for it first.
    std::future<absl::Status> rest;
    PipelineStop stop;
    int64_t start = 0;  // the first iteration and the end
    int64_t total = 0;
    TrainResult result;
    absl::Duration training;  // excludes evaluations
    absl::Time t0;            // when the current stretch of training began
    absl::Time window_start;  // the log window: since the last train record
    int64_t window_examples = 0;
    double window_loss = 0;
    std::unique_ptr<StepData> current;
    std::unique_ptr<StepData> fused;  // the next batch, pulled by a fused Step with this iteration's push
    // With overlap_pushes (ASP) the push of iteration c (and its Advance) runs while c + 1 computes, into the
    // other gradient buffers; `pushed` holds c's batch until then.
    bool overlap_push = false;
    std::unique_ptr<StepData> pushed;
    std::future<absl::Status> pushing;
    // Fused ahead (SSP under leases, see the class comment): iteration c - 1's push and c + 1's pull travel in
    // one Step while c computes; `held` keeps c - 1's batch (its gradients in the other buffers) until then.
    bool fuse_ahead = false;
    // Split pulls and pushes (TrainerOptions::split_pulls): `early`, `rest`, and the next batch with all its rows,
    // for TakeNextBatch.
    bool split = false;
    std::unique_ptr<StepData> split_next;
    std::unique_ptr<StepData> held;
    bool unpushed = false;  // fused ahead: `current`'s push waits for the next Step (it becomes `held`)
    std::future<absl::StatusOr<std::unique_ptr<StepData>>> ahead;  // after `held`: waited for before it goes
  };

  absl::StatusOr<TrainResult> Run() {
    KESTREL_RETURN_IF_ERROR(Init());
    KESTREL_RETURN_IF_ERROR(OpenFeed());
    Loop loop;
    pipeline_ = std::make_unique<BatchPipeline>(feed_.get(), options_.partition, schema_,
                                                !options_.line_log.empty(), backend_, &phases_);
    loop.stop.pipeline = pipeline_.get();
    KESTREL_RETURN_IF_ERROR(StartLoop(&loop));
    for (int64_t clock = loop.start; clock < loop.total && !loop.result.stopped_early; ++clock) {
      absl::Status ran = RunIteration(clock, &loop);
      if (const std::optional<int64_t> held = HeldClockOf(ran); held.has_value()) {
        ran = StopHeld(clock, *held, ran, &loop);
      }
      KESTREL_RETURN_IF_ERROR(ran);
    }
    return FinishRun(&loop);
  }

  // The servers hold reads at `held` (common/held_reads.h: a rescale) and iteration `clock` ran into it: its push
  // goes in (fused ahead, it waited for the next Step), its state is reported at clock + 1 (`held`; past it, a
  // race with the hold that makes the scheduler give the rescale up), and the worker waits there. The answer ends
  // the pass (Aborted: rejoin), or, the hold lifted, the loop goes on with the batch whose read was held.
  absl::Status StopHeld(int64_t clock, int64_t held, const absl::Status& why, Loop* loop) {
    if (held > clock + 1 || loop->split || loop->overlap_push || loop->current == nullptr) return why;
    if (loop->held != nullptr) pipeline_->Recycle(std::move(loop->held));  // pushed by the held Step
    if (loop->unpushed) {  // fused ahead: its push waited for the next Step
      KESTREL_RETURN_IF_ERROR(PushAndAdvance(*loop->current, *grads_[clock % 2], clock, /*last=*/false));
      loop->unpushed = false;
    }
    ++loop->result.steps;
    loop->result.examples += loop->current->batch.batch.size;
    KLOG(Info) << "worker " << options_.rank << ": the servers hold reads at clock " << held
               << " for a rescale: reporting there";
    KESTREL_RETURN_IF_ERROR(gate_->StopAt(clock + 1, feed_->StateOf(clock + 1, loop->current->after)));
    loop->fused.reset();
    pipeline_->Recycle(std::move(loop->current));
    KESTREL_ASSIGN_OR_RETURN(loop->current, Fetch(clock + 1, PullClock(clock + 1)));
    return absl::OkStatus();
  }

  // Opens this worker's TrainingFeed (feed_) at start_clock and resets the phase clock.
  absl::Status OpenFeed() {
    const JobConfig& job = options_.job;
    TrainingFeedOptions feed_options;
    feed_options.job = job;
    feed_options.schema = schema_;
    feed_options.rank = options_.rank;
    feed_options.num_workers = options_.num_workers;
    feed_options.start_clock = options_.start_clock;
    feed_options.start_state = options_.start_state;
    KESTREL_ASSIGN_OR_RETURN(feed_, TrainingFeed::Open(std::move(feed_options)));
    phases_.Reset();
    KLOG(Info) << "worker " << options_.rank << " of " << options_.num_workers << ": training "
               << ModelConfig::Type_Name(job.model().type()) << " on " << backend_->name() << " for "
               << StepsText(feed_->total()) << " iterations of " << job.train().batch_size() << " examples ("
               << (feed_->streaming() ? "a file" : absl::StrCat(feed_->per_epoch())) << " per epoch), from "
               << options_.start_clock << (options_.prefetch_pulls ? ", prefetching pulls" : "")
               << (options_.prefetch_pulls && options_.overlap_pushes ? ", overlapping pushes" : "");
    return absl::OkStatus();
  }

  // Starts the clocks and resumes at start_clock: a worker with nothing left to run says so at once; otherwise
  // it fetches its first batch and decides whether to fuse ahead.
  absl::Status StartLoop(Loop* loop) {
    loop->start = options_.start_clock;
    loop->total = feed_->total();
    if (loop->start >= loop->total) {
      KESTREL_RETURN_IF_ERROR(gate_->Advance(loop->total, /*done=*/true, options_.start_state));
    }
    loop->window_start = absl::Now();
    loop->overlap_push = options_.prefetch_pulls && options_.overlap_pushes;
    loop->t0 = absl::Now();
    if (loop->start < loop->total) {
      KESTREL_ASSIGN_OR_RETURN(loop->current, Fetch(loop->start, PullClock(loop->start)));
      loop->fuse_ahead = options_.prefetch_pulls && !loop->overlap_push && gate_->Leased() &&
                         gate_->WaitClock(loop->start).has_value() && loop->current->batch.tables.empty();
    }
    loop->split = options_.split_pulls && !options_.prefetch_pulls;
    return absl::OkStatus();
  }

  // Iteration `clock` of the loop: starts fetching the next batch, computes, pushes, takes the next batch, then
  // logs and evaluates when due.
  absl::Status RunIteration(int64_t clock, Loop* loop) {
    loop->total = feed_->total();  // (a stream's, once its end is found)
    const bool last = clock + 1 == loop->total;
    const bool flush = last || feed_->AtKnownEnd(clock + 1);  // a stream's next file not found: push now, alone
    KESTREL_RETURN_IF_ERROR(StartFetchingNext(clock, flush, loop));
    GradBuffers& g = *grads_[loop->overlap_push || loop->fuse_ahead || loop->split ? clock % 2 : 0];
    KESTREL_ASSIGN_OR_RETURN(const double loss, Compute(clock, *loop->current, &g));
    const int64_t examples = loop->current->batch.batch.size;  // (the batch may move to `pushed` below)
    sent_clock_ = clock;  // this iteration's push, below or overlapped with the next
    KESTREL_RETURN_IF_ERROR(PushIteration(clock, flush, last, &g, loop));
    ++loop->result.steps;
    loop->result.examples += examples;
    loop->window_examples += examples;
    loop->window_loss += loss;
    if (!last) {
      const absl::Status taken = TakeNextBatch(clock, loop);
      if (!taken.ok() && feed_->total() == clock + 1) return EndStream(clock, loop);  // the stop file named the last
      KESTREL_RETURN_IF_ERROR(taken);
    }

    const int64_t done = clock + 1;
    const TrainConfig& train = options_.job.train();
    if (done % train.log_every_steps() == 0 || last) ReportProgress(done, loop);
    if (options_.evaluate && !last && train.eval_every_steps() > 0 && done % train.eval_every_steps() == 0) {
      KESTREL_RETURN_IF_ERROR(EvaluateDuringTraining(clock, loop));
    }
    if (options_.evaluate && !last && ValidatesAfter(options_.job, done, feed_->EpochAt(clock).end)) {
      KESTREL_RETURN_IF_ERROR(EvaluateDuringTraining(clock, loop, /*validation=*/true));
    }
    return absl::OkStatus();
  }

  // Before iteration `clock` computes: the fused-ahead Step of the held batch, or the prefetch of the next batch;
  // the last iteration pushes the held batch instead.
  absl::Status StartFetchingNext(int64_t clock, bool last, Loop* loop) {  // `last`: or a stream's flush
    if (loop->fuse_ahead && loop->held != nullptr && !last) {
      loop->ahead = std::async(std::launch::async,
                               [this, step = loop->held.get(), &g = *grads_[(clock - 1) % 2], clock] {
                                 return PushAndFetch(*step, g, clock - 1, clock + 1);
                               });
    } else if (options_.prefetch_pulls && !last && (!loop->fuse_ahead || gate_->PermittedNow(clock + 1))) {
      // (Fused ahead, this iteration's push waits for it: only a read that cannot wait for a permission.)
      loop->next = std::async(std::launch::async,
                              [this, clock, sent = PullClock(clock + 1)] { return Fetch(clock + 1, sent); });
    } else if (loop->split && !last) {
      loop->early = std::async(
          std::launch::async,
          [this, clock, current = loop->current.get(),
           rest = std::move(loop->rest)]() mutable -> absl::StatusOr<std::unique_ptr<StepData>> {
            // The rows the last push's rest still writes may be among those pulled now: that rest first.
            if (rest.valid()) KESTREL_RETURN_IF_ERROR(rest.get());
            return PullEarly(clock + 1, current);
          });
    } else if (last) {
      KESTREL_RETURN_IF_ERROR(PushHeld(clock - 1, loop));
    }
    return absl::OkStatus();
  }

  // TrainerOptions::stand_in_compute: waits `duration` (the host idle, as while a GPU computes) and writes zero
  // gradients of the batch's shapes; the loss is 0.
  absl::StatusOr<double> StandInStep(const PreparedBatch& batch, absl::Duration duration, GradBuffers* g) {
    if (duration > absl::ZeroDuration()) absl::SleepFor(duration);
    const size_t unique = batch.keys.num_unique();
    std::fill_n(g->wide.data(), unique, 0.0f);
    if (model_->has_embedding()) std::fill_n(g->emb.data(), unique * model_->embedding_dim(), 0.0f);
    std::fill_n(g->dense.data(), model_->dense_size(), 0.0f);
    return 0.0;
  }

  // Iteration `clock`'s forward and backward pass on `step` into `g`; its loss. An empty batch (this worker's
  // share of the epoch ran out before the epoch's last iteration) computes nothing; its push is empty.
  absl::StatusOr<double> Compute(int64_t clock, const StepData& step, GradBuffers* g) {
    const PreparedBatch& batch = step.batch;
    KESTREL_RETURN_IF_ERROR(exchange_->ReserveGrads(batch, g));
    ModelGrads grads{g->wide.data(), g->emb.data(), g->dense.data()};
    absl::StatusOr<double> loss = 0.0;
    if (batch.batch.size > 0) {
      PhaseClock::Scope computing(&phases_, PhaseClock::kCompute);
      if (options_.stand_in_compute.has_value()) {
        loss = StandInStep(batch, *options_.stand_in_compute, g);
      } else {
        loss = model_->Step(batch, {step.wide.data(), step.emb.data(), step.dense.data()}, &grads, nullptr);
      }
    }
    if (!loss.ok()) return Annotate(loss.status(), clock, "computing");
    return loss;
  }

  // split_pulls, iteration `clock` but the last: takes the next batch with its early rows, pushes the gradients of
  // the keys both batches hold and the dense ones, pulls the next batch's other rows, then leaves the rest of the
  // push (the keys the next batch lacks) in flight while the next batch computes (`rest`); the next batch waits in
  // loop->split_next for TakeNextBatch.
  absl::Status SplitPushAndPull(int64_t clock, const GradBuffers& g, Loop* loop) {
    absl::StatusOr<std::unique_ptr<StepData>> next;
    {
      PhaseClock::Scope waiting(&phases_, PhaseClock::kWait);
      next = loop->early.get();  // after the last rest: its batch can go back
    }
    if (!next.ok()) return Annotate(next.status(), clock + 1, "starting");
    if (loop->resting != nullptr) pipeline_->Recycle(std::move(loop->resting));
    StepData& current = *loop->current;
    const bool split = current.batch.tables.empty() && (*next)->batch.tables.empty();
    if (split) {
      push_split_.Build((*next)->batch.keys, current.batch.keys, options_.partition);  // early: the rest
      KESTREL_RETURN_IF_ERROR(PushAndAdvance(current, g, clock, /*last=*/false, &push_split_.late()));
    } else {
      KESTREL_RETURN_IF_ERROR(PushAndAdvance(current, g, clock, /*last=*/false));
    }
    if (absl::Status late = PullLate(clock + 1, PullClock(clock + 1), next->get()); !late.ok()) {
      return Annotate(late, clock + 1, "starting");
    }
    loop->split_next = *std::move(next);
    if (split) {  // after the pull: the rest's exclusive stripe locks would hold it up
      loop->resting = std::move(loop->current);
      loop->rest = std::async(std::launch::async, [this, step = loop->resting.get(), &g, clock] {
        absl::Status pushed = exchange_->PushPart(push_split_.early(), *step, g, clock, /*dense=*/false, &push_rows_);
        return pushed.ok() ? pushed : Annotate(pushed, clock, "pushing");
      });
    }
    return absl::OkStatus();
  }

  // Iteration `clock`'s push of `g`: overlapped with the next compute (ASP), left to the next iteration's Step
  // (fused ahead), fused with the next batch's pull, or on its own.
  absl::Status PushIteration(int64_t clock, bool flush, bool last, GradBuffers* g, Loop* loop) {
    if (loop->overlap_push) {
      KESTREL_RETURN_IF_ERROR(FinishPush(loop));  // c - 1's, whose buffers c + 1 will fill
      loop->pushed = std::move(loop->current);
      loop->pushing = std::async(std::launch::async, [this, step = loop->pushed.get(), g, clock, last] {
        return PushAndAdvance(*step, *g, clock, last);
      });
    } else if (loop->fuse_ahead && !flush && (loop->ahead.valid() || loop->next.valid())) {
      loop->unpushed = true;  // pushed with the next iteration's Step (`held`, see TakeNextBatch)
    } else if (loop->split && !flush) {
      KESTREL_RETURN_IF_ERROR(SplitPushAndPull(clock, *g, loop));
    } else if (!flush && CanFuse(*loop->current, clock)) {
      // Taken by TakeNextBatch, not fetched.
      KESTREL_ASSIGN_OR_RETURN(loop->fused, PushAndFetch(*loop->current, *g, clock, clock + 1));
    } else {
      KESTREL_RETURN_IF_ERROR(PushAndAdvance(*loop->current, *g, clock, last));
    }
    return absl::OkStatus();
  }

  // After iteration `clock`: the next batch becomes current, from the fused Step, the fused-ahead one, the
  // prefetch or a fetch now; the trained batch goes back to the pipeline (fused ahead: it waits in `held` for
  // its push in the next Step).
  absl::Status TakeNextBatch(int64_t clock, Loop* loop) {
    absl::StatusOr<std::unique_ptr<StepData>> fetched;
    if (loop->split_next != nullptr) {
      fetched = std::move(loop->split_next);
    } else if (loop->fused != nullptr) {
      fetched = std::move(loop->fused);
    } else if (loop->ahead.valid()) {
      PhaseClock::Scope waiting(&phases_, PhaseClock::kWait);
      fetched = loop->ahead.get();
    } else if (loop->next.valid()) {
      PhaseClock::Scope waiting(&phases_, PhaseClock::kWait);
      fetched = loop->next.get();
    } else {
      fetched = Fetch(clock + 1, PullClock(clock + 1));
    }
    if (!fetched.ok()) return Annotate(fetched.status(), clock + 1, "starting");
    if (loop->unpushed && !gate_->PermittedNow(clock + 1)) {
      // A lease ends (or a hold stops the job): this iteration's push goes alone, so that this worker reaches
      // clock + 1 before it asks to run it. The next iteration reads on its own, then fuses ahead again.
      KESTREL_RETURN_IF_ERROR(PushAndAdvance(*loop->current, *grads_[clock % 2], clock, /*last=*/false));
      loop->unpushed = false;
      KESTREL_RETURN_IF_ERROR(gate_->WaitToStart(clock + 1));
    }
    if (loop->held != nullptr) pipeline_->Recycle(std::move(loop->held));
    if (loop->unpushed) {
      loop->held = std::move(loop->current);
      loop->unpushed = false;
    } else if (loop->current != nullptr) {
      pipeline_->Recycle(std::move(loop->current));  // (pushing: moved to `pushed`)
    }
    loop->current = std::move(fetched).value();
    return absl::OkStatus();
  }

  // A stream ended after iteration `clock` (pushed, on its own): the loop ends there, this worker done.
  absl::Status EndStream(int64_t clock, Loop* loop) {
    loop->total = clock + 1;
    KESTREL_RETURN_IF_ERROR(FinishPush(loop));
    ReportProgress(clock + 1, loop);
    return gate_->Advance(clock + 1, /*done=*/true, feed_->StateOf(clock + 1, loop->current->after));
  }

  // The train record of the log window ending after `done` iterations: logged, written and observed.
  void ReportProgress(int64_t done, Loop* loop) {
    TrainResult& result = loop->result;
    const absl::Time now = absl::Now();
    const double seconds = absl::ToDoubleSeconds(now - loop->window_start);
    const double rate = seconds > 0 ? loop->window_examples / seconds : 0;
    result.train_logloss = loop->window_loss / std::max<int64_t>(loop->window_examples, 1);
    KLOG(Info) << absl::StrFormat("worker %d step %d/%s  train logloss %.5f  %.0f examples/s", options_.rank,
                                  done, StepsText(loop->total), result.train_logloss, rate);
    records_.Write(TrainRecord(options_.rank, done, loop->total, result.train_logloss, rate));
    Notify({TrainerEvent::Kind::kTrain, done, loop->window_examples, result.train_logloss, 0, rate, phases_.Get()});
    loop->window_start = now;
    loop->window_examples = 0;
    loop->window_loss = 0;
  }

  // An evaluation after iteration `clock` (of the test split, or `validation`), with this worker's pushes in;
  // its time is not training time.
  absl::Status EvaluateDuringTraining(int64_t clock, Loop* loop, bool validation = false) {
    KESTREL_RETURN_IF_ERROR(FinishPush(loop));  // evaluate the model with this worker's pushes in
    KESTREL_RETURN_IF_ERROR(PushHeld(clock, loop));
    loop->training += absl::Now() - loop->t0;
    KESTREL_ASSIGN_OR_RETURN(EvalResult r, Evaluate(clock + 1, validation));
    if (validation) KESTREL_RETURN_IF_ERROR(early_stopping_.Validated(r, &loop->result));
    loop->t0 = absl::Now();
    loop->window_start = loop->t0;
    return absl::OkStatus();
  }

  // Pushes `held` (iteration `clock`) on its own, if any.
  absl::Status PushHeld(int64_t clock, Loop* loop) {
    if (loop->held == nullptr) return absl::OkStatus();
    absl::Status status = PushAndAdvance(*loop->held, *grads_[clock % 2], clock, /*last=*/false);
    pipeline_->Recycle(std::move(loop->held));
    return status;
  }

  // Waits for the overlapped push, if any.
  absl::Status FinishPush(Loop* loop) {
    if (loop->rest.valid()) {  // split pushes
      absl::Status rest;
      {
        PhaseClock::Scope waiting(&phases_, PhaseClock::kWait);
        rest = loop->rest.get();
      }
      if (loop->resting != nullptr) pipeline_->Recycle(std::move(loop->resting));
      KESTREL_RETURN_IF_ERROR(rest);
    }
    if (!loop->pushing.valid()) return absl::OkStatus();
    absl::Status status;
    {
      PhaseClock::Scope waiting(&phases_, PhaseClock::kWait);
      status = loop->pushing.get();
    }
    pipeline_->Recycle(std::move(loop->pushed));
    return status;
  }

  // After the last iteration: the last push, the done record, the barrier of every worker's last push, and the
  // final evaluation.
  absl::StatusOr<TrainResult> FinishRun(Loop* loop) {
    KESTREL_RETURN_IF_ERROR(FinishPush(loop));
    loop->training += absl::Now() - loop->t0;
    TrainResult& result = loop->result;
    result.seconds = absl::ToDoubleSeconds(loop->training);
    result.examples_per_second = result.seconds > 0 ? result.examples / result.seconds : 0;
    result.phases = phases_.Get();  // training only, like `seconds`
    ReportDone(result);
    // The final model: every worker's last push is in (and no rollback can undo it any more).
    KESTREL_RETURN_IF_ERROR(gate_->WaitAllFinished(loop->total));
    int64_t step = loop->total;
    if (options_.evaluate && Validates() && !result.stopped_early) {  // the last epoch's end
      KESTREL_ASSIGN_OR_RETURN(EvalResult validated, Evaluate(loop->total, /*validation=*/true));
      KESTREL_RETURN_IF_ERROR(early_stopping_.Validated(validated, &result));
    }
    if (result.best_step >= 0 && result.best_step != result.validations.back().step) {
      if (loop->rest.valid()) KESTREL_RETURN_IF_ERROR(loop->rest.get());  // (split pulls) nothing in flight
      KESTREL_RETURN_IF_ERROR(options_.restore_best());
      step = result.best_step;
      KLOG(Info) << "the model is the best validation's, after step " << step;
    }
    if (options_.evaluate) {
      KESTREL_ASSIGN_OR_RETURN(result.eval, Evaluate(step));
    }
    return result;
  }

  // The done record of `result`: written and observed.
  void ReportDone(const TrainResult& result) {
    records_.Write(DoneRecord(options_.rank, result, options_.row_cache));
    Notify({TrainerEvent::Kind::kDone, result.steps, result.examples, result.train_logloss, 0,
            result.examples_per_second, result.phases});
  }

  absl::Status Annotate(const absl::Status& status, int64_t clock, const char* what) {
    return absl::Status(status.code(), absl::StrFormat("worker %d, iteration %d, %s: %s", options_.rank, clock,
                                                       what, status.message()));
  }
  // One probability per example of `files` (at most `limit`; 0: all), in file order, and the labels.
  absl::Status Score(const std::vector<std::string>& files, int64_t limit, std::vector<float>* probs,
                     std::vector<float>* labels, const ReaderOptions::Holdout& holdout = {}) {
    KESTREL_RETURN_IF_ERROR(Init());
    const Scorer scorer{&options_.job, schema_, &options_.partition, model_.get(), exchange_.get(), backend_,
                        sent_clock_};
    return ScoreFiles(scorer, files, limit, probs, labels, holdout);
  }

  // The model after `step` iterations on the test split (or, `validation`, on data.validation_files).
  absl::StatusOr<EvalResult> Evaluate(int64_t step, bool validation = false) {
    KESTREL_RETURN_IF_ERROR(Init());
    sent_clock_ = step;  // iterations done: reads the current weights
    KESTREL_ASSIGN_OR_RETURN(const EvalSplit eval, EvalSplitOf(options_.job.data(), validation));
    const char* split = validation ? "validation" : "test";
    const absl::Time start = absl::Now();
    std::vector<float> probs, labels;
    KESTREL_RETURN_IF_ERROR(Score(eval.files, options_.job.train().eval_max_examples(), &probs, &labels, eval.holdout));
    if (probs.empty()) return absl::FailedPreconditionError(absl::StrCat("the ", split, " files hold no examples"));
    const EvalResult r = MetricsOf(step, probs, labels, absl::Now() - start);
    KLOG(Info) << absl::StrFormat("%s at step %d: %d examples  logloss %.5f  AUC %.5f  %.0f examples/s",
                                  validation ? "validation" : "eval", step, r.examples, r.logloss, r.auc,
                                  r.examples_per_second);
    records_.Write(EvalRecord(options_.rank, r, validation ? "validation" : "eval"));
    Notify({validation ? TrainerEvent::Kind::kValidation : TrainerEvent::Kind::kEval, step, r.examples, r.logloss,
            r.auc, r.examples_per_second});
    return r;
  }

  bool Validates() const { return HasValidationSplit(options_.job); }

  void Notify(const TrainerEvent& event) {
    if (options_.observer) options_.observer(event);
  }

  TrainerOptions options_;
  PsClient* client_;
  ClockGate* gate_;
  Backend* backend_;
  RecordWriter records_;
  LineLog line_log_;  // TrainerOptions::line_log
  std::shared_ptr<const Schema> schema_;     // the job's data format (Init)
  std::unique_ptr<Model> model_;
  std::unique_ptr<EmbeddingTables> tables_;  // the embedding tables the model's fields look up (Init)
  std::unique_ptr<StepExchange> exchange_;   // the pulls and pushes of an iteration (Init)
  std::unique_ptr<TrainingFeed> feed_;  // the batches of this worker's iterations (Run); read by the reader thread
  // The clock of the last pull or push that named its iteration (a push's, a pull's without prefetching) or of
  // the last evaluation; 0 before any. Prefetched pulls and Score's carry it. Used only by the thread running
  // Run(), Evaluate() or Score().
  int64_t sent_clock_ = 0;
  // [1] only when a push (or its rest, split_pulls) overlaps the next compute.
  std::unique_ptr<GradBuffers> grads_[2];
  // split_pulls: the next batch's split and its rows on their way; used by PullEarly, then (after it is waited
  // for) by PullLate.
  PullSplit split_;
  std::vector<float> split_rows_;
  // split_pulls: the current batch's keys split by the next batch's (its push: the shared keys now, the rest while
  // the next batch computes) and the gradient rows on their way; used by the training loop, then by the rest of
  // the push, which the next split waits for.
  PullSplit push_split_;
  std::vector<float> push_rows_;
  PhaseClock phases_;
  // The batches of this Run() (its feed_'s), read and prepared on their own threads; stopped when Run() returns.
  std::unique_ptr<BatchPipeline> pipeline_;
  EarlyStopping early_stopping_;  // TrainConfig.early_stopping_patience with TrainerOptions::keep_best
  // The batch whose read the servers held (StopHeld): the next one to train. Set by the call that pulled it and
  // taken after that call was waited for.
  std::unique_ptr<StepData> unread_;
};

Trainer::Trainer(TrainerOptions options, PsClient* client, ClockGate* gate, Backend* backend)
    : impl_(std::make_unique<Impl>(std::move(options), client, gate, backend)) {}
Trainer::~Trainer() = default;
absl::StatusOr<TrainResult> Trainer::Run() { return impl_->Run(); }
absl::StatusOr<EvalResult> Trainer::Evaluate(int64_t step) { return impl_->Evaluate(step); }
absl::Status Trainer::Score(const std::vector<std::string>& files, int64_t limit, std::vector<float>* probs,
                            std::vector<float>* labels) {
  return impl_->Score(files, limit, probs, labels);
}

}  // namespace kestrel
