#include "worker/trainer.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <future>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/hash.h"
#include "common/fault_injection.h"
#include "common/logging.h"
#include "common/reshard.h"
#include "common/status.h"
#include "worker/batch_reader.h"
#include "worker/data/schema.h"
#include "worker/embedding_tables.h"
#include "worker/epoch_schedule.h"
#include "common/evaluation.h"
#include "worker/model.h"
#include "worker/records.h"
#include "worker/training_feed.h"

namespace kestrel {

JobConfig JobWithDefaults(JobConfig job) {
  *job.mutable_model() = WithDefaults(job.model());
  TrainConfig& t = *job.mutable_train();
  if (t.batch_size() <= 0) t.set_batch_size(512);
  if (t.epochs() <= 0) t.set_epochs(1);
  if (t.log_every_steps() <= 0) t.set_log_every_steps(100);
  return job;
}

absl::StatusOr<int64_t> IterationsOf(const JobConfig& job, int num_workers) {
  return PlainIterations(JobWithDefaults(job), num_workers);
}

namespace {

class SingleWorkerGate final : public ClockGate {
 public:
  absl::Status WaitToStart(int64_t) override { return absl::OkStatus(); }
  absl::Status Advance(int64_t, bool, const WorkerState&) override { return absl::OkStatus(); }
  absl::Status WaitAllFinished(int64_t) override { return absl::OkStatus(); }
};

// One step's gradients, as Model::Step writes them and Push sends them (pinned when the backend is CUDA).
struct GradBuffers {
  explicit GradBuffers(Backend* backend) : wide(backend), emb(backend), dense(backend) {}
  HostArray<float> wide, emb, dense;
  mutable EmbeddingTables::Staging staging;  // the per-table gradient rows of a push
};

// A batch and the parameters pulled for it.
struct StepData {
  explicit StepData(Backend* backend) : wide(backend), emb(backend), dense(backend) {}
  PreparedBatch batch;
  HostArray<float> wide, emb, dense;  // pinned when the backend is CUDA
  EmbeddingTables::Staging staging;   // the per-table rows of a pull
  ReaderPosition after;               // the reader right after this batch
  std::vector<uint64_t> lines;        // the batch's global line indices (with TrainerOptions::line_log)
  CallClock read;                     // what the pulls of these rows carry
};

// A bounded queue of batches between two of the reader, preparer and training threads, and the free list that
// recycles them (with their pinned buffers) once trained.
class BatchQueue {
 public:
  explicit BatchQueue(size_t capacity) : capacity_(capacity) {}
  // False when the queue was closed.
  bool Push(std::unique_ptr<StepData> item) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](BatchQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) { return q->closed_ || q->items_.size() < q->capacity_; },
        this));
    if (closed_) return false;
    items_.push_back(std::move(item));
    return true;
  }
  // The next item, or the error that ended the reader.
  absl::StatusOr<std::unique_ptr<StepData>> Pop() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](BatchQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) { return !q->items_.empty() || !q->status_.ok() || q->closed_; },
        this));
    if (!items_.empty()) {
      std::unique_ptr<StepData> item = std::move(items_.front());
      items_.pop_front();
      return item;
    }
    if (!status_.ok()) return status_;
    return absl::CancelledError("the batch queue was closed");
  }
  void Fail(absl::Status status) {
    absl::MutexLock lock(&mu_);
    status_ = std::move(status);
  }
  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  // A used StepData to fill again (its pinned buffers are reused), or a new one.
  std::unique_ptr<StepData> TakeFree(Backend* backend) {
    absl::MutexLock lock(&mu_);
    if (free_.empty()) return std::make_unique<StepData>(backend);
    std::unique_ptr<StepData> item = std::move(free_.back());
    free_.pop_back();
    return item;
  }
  void Recycle(std::unique_ptr<StepData> item) {
    absl::MutexLock lock(&mu_);
    free_.push_back(std::move(item));
  }

 private:
  const size_t capacity_;
  absl::Mutex mu_;
  std::deque<std::unique_ptr<StepData>> items_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<StepData>> free_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

// PhaseTimes accumulated by the reader, preparer, training and prefetching threads. Thread-safe.
class PhaseClock {
 public:
  enum Phase { kRead, kBatch, kPull, kCompute, kPush, kWait, kPhases };

  // Adds the time from its construction to its destruction to one phase.
  class Scope {
   public:
    Scope(PhaseClock* clock, Phase phase) : clock_(clock), phase_(phase), start_(absl::Now()) {}
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope() { clock_->Add(phase_, absl::Now() - start_); }

   private:
    PhaseClock* const clock_;
    const Phase phase_;
    const absl::Time start_;
  };

  void Add(Phase phase, absl::Duration d) {
    nanos_[phase].fetch_add(absl::ToInt64Nanoseconds(d), std::memory_order_relaxed);
  }
  PhaseTimes Get() const {
    auto seconds = [this](Phase p) { return nanos_[p].load(std::memory_order_relaxed) * 1e-9; };
    PhaseTimes t;
    t.read = seconds(kRead);
    t.batch = seconds(kBatch);
    t.pull = seconds(kPull);
    t.compute = seconds(kCompute);
    t.push = seconds(kPush);
    t.wait = seconds(kWait);
    return t;
  }
  void Reset() {
    for (auto& n : nanos_) n.store(0, std::memory_order_relaxed);
  }

 private:
  std::array<std::atomic<int64_t>, kPhases> nanos_{};
};

std::unique_ptr<ClockGate> NewSingleWorkerGate() { return std::make_unique<SingleWorkerGate>(); }

class Trainer::Impl {
 public:
  Impl(TrainerOptions options, PsClient* client, ClockGate* gate, Backend* backend)
      : options_(std::move(options)), client_(client), gate_(gate), backend_(backend),
        records_(options_.metrics_path),
        grads_{std::make_unique<GradBuffers>(backend), std::make_unique<GradBuffers>(backend)} {
    options_.job = JobWithDefaults(options_.job);
  }
  ~Impl() {
    absl::MutexLock lock(&line_log_mu_);
    if (line_log_ != nullptr) std::fclose(line_log_);
  }

  absl::Status Init() {
    if (model_ != nullptr) return absl::OkStatus();
    const JobConfig& job = options_.job;
    schema_ = options_.schema;
    if (schema_ == nullptr) {
      KESTREL_ASSIGN_OR_RETURN(schema_, Schema::Resolve(job.data(), job.model()));
    }
    KESTREL_ASSIGN_OR_RETURN(model_, Model::Create(job.model(), schema_->fields(), schema_->dense_dim(), backend_));
    // The embedding tables some field looks up (every field looks up "emb" unless the schema says otherwise).
    std::vector<bool> used(schema_->num_tables(), false);
    for (int t : schema_->field_tables()) used[t] = true;
    std::vector<std::string> names;
    for (int t = 0; t < schema_->num_tables(); ++t) names.push_back(schema_->table_name(t));
    tables_ = std::make_unique<EmbeddingTables>(client_, std::move(names), std::move(used), model_->embedding_dim());
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

  // Pulls the rows of `step`'s unique keys and the dense tensor, at step->read; the sparse tables concurrently.
  absl::Status Pull(StepData* step) {
    const KeyBatch& keys = step->batch.keys;
    const CallClock& read = step->read;
    const int dim = model_->embedding_dim();
    KESTREL_RETURN_IF_ERROR(step->wide.Reserve(keys.num_unique()));
    KESTREL_RETURN_IF_ERROR(step->emb.Reserve(keys.num_unique() * dim));
    KESTREL_RETURN_IF_ERROR(step->dense.Reserve(model_->dense_size()));
    std::future<absl::Status> emb;
    if (model_->has_embedding()) {
      emb = std::async(std::launch::async,
                       [&] { return tables_->Pull(step->batch, step->emb.data(), read, &step->staging); });
    }
    absl::Status status = client_->Pull(kWideTable, keys, 1, step->wide.data(), read);
    if (status.ok()) {
      status = client_->PullDense(kDenseTable, absl::MakeSpan(step->dense.data(), model_->dense_size()), read);
    }
    if (emb.valid()) {
      absl::Status e = emb.get();
      if (status.ok()) status = e;
    }
    return status;
  }

  // Pushes iteration `clock`'s gradients; the sparse tables concurrently.
  absl::Status Push(const StepData& step, const GradBuffers& g, int64_t clock) {
    const KeyBatch& keys = step.batch.keys;
    const CallClock at{clock};
    std::future<absl::Status> emb;
    if (model_->has_embedding()) {
      emb = std::async(std::launch::async,
                       [&] { return tables_->Push(step.batch, g.emb.data(), at, &g.staging); });
    }
    absl::Status status = client_->Push(kWideTable, keys, 1, g.wide.data(), at);
    // An empty batch pushes no dense gradient (an empty part: BSP still counts this worker's part of the clock,
    // while a zero gradient would move an Adam tensor's moments); its sparse pushes are empty anyway.
    const size_t dense_floats = step.batch.batch.size > 0 ? model_->dense_size() : 0;
    absl::Status dense = client_->PushDense(kDenseTable, absl::MakeConstSpan(g.dense.data(), dense_floats), at);
    if (status.ok()) status = dense;
    if (emb.valid()) {
      absl::Status e = emb.get();
      if (status.ok()) status = e;
    }
    return status;
  }

  // Pushes iteration `clock`'s gradients, then tells the gate it is done.
  absl::Status PushAndAdvance(const StepData& step, const GradBuffers& g, int64_t clock, bool last) {
    CrashPoint("worker.push.before");  // crash tests: dies with nothing of this clock pushed
    {
      PhaseClock::Scope pushing(&phases_, PhaseClock::kPush);
      if (absl::Status pushed = Push(step, g, clock); !pushed.ok()) return Annotate(pushed, clock, "pushing");
    }
    CrashPoint("worker.push.after");  // crash tests: dies with this clock pushed, not reported
    PhaseClock::Scope waiting(&phases_, PhaseClock::kWait);
    KESTREL_RETURN_IF_ERROR(gate_->Advance(clock + 1, last, feed_->StateOf(clock + 1, step.after)));
    if (!options_.line_log.empty()) LogLines(clock, step.lines);
    return absl::OkStatus();
  }

  // Whether iteration `clock`'s push and clock + 1's pull may travel as one Step (see the class comment).
  // The read of clock + 1 need not be permitted yet: it only reads, the servers answer it once the clocks it
  // needs are complete, and nothing can change those rows before this worker runs clock + 1 but a rollback,
  // after which the worker starts again from the checkpoint anyway. So lease ends fuse too; the permission is
  // asked for after the Step.
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
      KESTREL_ASSIGN_OR_RETURN(next, queue_->Pop());
    }
    if (!next->batch.tables.empty()) return absl::InternalError("a fused step of several embedding tables");
    const std::optional<int64_t> wait = gate_->WaitClock(read_clock);
    const int64_t fresh = std::max(options_.row_cache_own_clock ? read_clock : gate_->KnownMinClock(), *wait);
    // Ahead of this worker's own later pushes (SSP), the read carries the clock pushed with it, as prefetched
    // pulls do (PullClock).
    next->read = CallClock{options_.prefetch_pulls ? clock : read_clock, CacheRead{read_clock, fresh}, wait};
    const KeyBatch& keys = next->batch.keys;
    const int dim = model_->embedding_dim();
    KESTREL_RETURN_IF_ERROR(next->wide.Reserve(keys.num_unique()));
    KESTREL_RETURN_IF_ERROR(next->emb.Reserve(keys.num_unique() * dim));
    KESTREL_RETURN_IF_ERROR(next->dense.Reserve(model_->dense_size()));
    std::vector<StepPart> parts;
    StepPart wide{kWideTable};
    wide.dim = 1;
    wide.push = true;
    wide.push_keys = &step.batch.keys;
    wide.grads = g.wide.data();
    wide.pull = true;
    wide.pull_keys = &keys;
    wide.rows = next->wide.data();
    parts.push_back(wide);
    if (model_->has_embedding()) {
      StepPart emb{tables_->name(0)};
      emb.dim = dim;
      emb.push = true;
      emb.push_keys = &step.batch.keys;
      emb.grads = g.emb.data();
      emb.pull = true;
      emb.pull_keys = &keys;
      emb.rows = next->emb.data();
      parts.push_back(emb);
    }
    StepPart dense{kDenseTable};
    dense.dense = true;
    dense.push = true;
    dense.grads = g.dense.data();
    dense.push_floats = step.batch.batch.size > 0 ? model_->dense_size() : 0;  // see Push
    dense.pull = true;
    dense.rows = next->dense.data();
    dense.pull_floats = model_->dense_size();
    parts.push_back(dense);
    CrashPoint("worker.push.before");
    {
      PhaseClock::Scope pushing(&phases_, PhaseClock::kPush);
      if (absl::Status stepped = client_->Step(parts, CallClock{clock}, next->read); !stepped.ok()) {
        return Annotate(stepped, clock, "pushing and pulling the next batch");
      }
    }
    CrashPoint("worker.push.after");
    {
      PhaseClock::Scope waiting(&phases_, PhaseClock::kWait);
      KESTREL_RETURN_IF_ERROR(gate_->Advance(clock + 1, false, feed_->StateOf(clock + 1, step.after)));
      KESTREL_RETURN_IF_ERROR(gate_->WaitToStart(read_clock));  // within the lease: answered at once
    }
    if (!options_.line_log.empty()) LogLines(clock, step.lines);
    return next;
  }

  // Appends iteration `clock`'s lines to the line log (TrainerOptions::line_log); a failure is logged once.
  void LogLines(int64_t clock, const std::vector<uint64_t>& lines) {
    std::string text = absl::StrCat(clock, " ", feed_->EpochAt(clock).index);
    for (uint64_t line : lines) absl::StrAppend(&text, " ", line);
    text.push_back('\n');
    absl::MutexLock lock(&line_log_mu_);
    if (line_log_ == nullptr) {
      line_log_ = std::fopen(options_.line_log.c_str(), "a");
      if (line_log_ == nullptr) {
        KLOG(Error) << "cannot append to --line_log " << options_.line_log;
        options_.line_log.clear();
        return;
      }
    }
    std::fwrite(text.data(), 1, text.size(), line_log_);
    std::fflush(line_log_);
  }

  // The reader thread: reads the batches of iterations [start_clock, total) into filled_ (the preparer thread
  // prepares them), then closes it.
  void ReadBatches() {
    if (absl::Status status = ReadBatchesUntilError(); !status.ok()) {
      filled_->Fail(std::move(status));
    } else {
      filled_->Close();
    }
  }

  // The preparer thread: key-batches (dedup, sort, segments) what the reader filled, into queue_, in order.
  void PrepareBatches() {
    while (true) {
      absl::StatusOr<std::unique_ptr<StepData>> step = filled_->Pop();
      if (!step.ok()) {
        if (!absl::IsCancelled(step.status())) queue_->Fail(step.status());  // Cancelled: all read, or stopped
        return;
      }
      {
        PhaseClock::Scope batching(&phases_, PhaseClock::kBatch);
        (*step)->batch.Prepare(options_.partition, schema_->field_tables(), schema_->num_tables());
      }
      if (!queue_->Push(std::move(step).value())) return;
    }
  }

  // ReadBatches' loop; an error ends it. OK also when filled_ was closed under it.
  absl::Status ReadBatchesUntilError() {
    while (true) {
      std::unique_ptr<StepData> step = queue_->TakeFree(backend_);
      absl::optional<PhaseClock::Scope> reading(absl::in_place, &phases_, PhaseClock::kRead);
      std::vector<uint64_t>* lines = options_.line_log.empty() ? nullptr : &step->lines;
      int64_t clock = 0;
      KESTREL_ASSIGN_OR_RETURN(const bool more, feed_->Next(&step->batch.batch, &clock, &step->after, lines));
      reading.reset();
      if (!more) return absl::OkStatus();
      if (!filled_->Push(std::move(step))) return absl::OkStatus();  // stopped
    }
  }

  // Waits for permission to run iteration `clock`, takes its batch and pulls its rows, sending `sent` with
  // the pulls (see sent_clock_).
  absl::StatusOr<std::unique_ptr<StepData>> Fetch(int64_t clock, int64_t sent) {
    absl::StatusOr<std::unique_ptr<StepData>> step;
    {
      PhaseClock::Scope waiting(&phases_, PhaseClock::kWait);
      KESTREL_RETURN_IF_ERROR(gate_->WaitToStart(clock));
      // Read after the permission: every update below it is in the rows pulled from now on.
      int64_t fresh = options_.row_cache_own_clock ? clock : gate_->KnownMinClock();
      // Server-enforced clocks: the servers answer once the updates this read must see are in, so its rows hold
      // every update below the clock it waits for.
      const std::optional<int64_t> wait = gate_->WaitClock(clock);
      if (wait.has_value()) fresh = std::max(fresh, *wait);
      step = queue_->Pop();
      if (!step.ok()) return step.status();
      (*step)->read = CallClock{sent, CacheRead{clock, fresh}, wait};
    }
    PhaseClock::Scope pulling(&phases_, PhaseClock::kPull);
    KESTREL_RETURN_IF_ERROR(Pull(step->get()));
    return step;
  }

  // The clock iteration `clock`'s pulls carry. Without prefetching (BSP), their iteration: a server that already
  // applied it (this worker replaces one that died after pushing) answers the weights from before it. Prefetched
  // pulls run ahead of the pushes before them and carry sent_clock_.
  int64_t PullClock(int64_t clock) {
    if (!options_.prefetch_pulls) sent_clock_ = clock;
    return sent_clock_;
  }

  absl::StatusOr<TrainResult> Run() {
    KESTREL_RETURN_IF_ERROR(Init());
    const JobConfig& job = options_.job;
    TrainingFeedOptions feed_options;
    feed_options.job = job;
    feed_options.schema = schema_;
    feed_options.rank = options_.rank;
    feed_options.num_workers = options_.num_workers;
    feed_options.start_clock = options_.start_clock;
    feed_options.start_state = options_.start_state;
    KESTREL_ASSIGN_OR_RETURN(feed_, TrainingFeed::Open(std::move(feed_options)));
    const int64_t total = feed_->total();
    phases_.Reset();
    const int64_t batch_size = job.train().batch_size();
    KLOG(Info) << "worker " << options_.rank << " of " << options_.num_workers << ": training "
               << ModelConfig::Type_Name(job.model().type()) << " on " << backend_->name() << " for " << total
               << " iterations of " << batch_size << " examples (" << feed_->per_epoch() << " per epoch), from "
               << options_.start_clock << (options_.prefetch_pulls ? ", prefetching pulls" : "")
               << (options_.prefetch_pulls && options_.overlap_pushes ? ", overlapping pushes" : "");

    // Declared before the reader's guard, so on an early return the queue is closed (ending a pending Fetch)
    // before this future's destructor waits for it.
    std::future<absl::StatusOr<std::unique_ptr<StepData>>> next;
    queue_ = std::make_unique<BatchQueue>(3);
    filled_ = std::make_unique<BatchQueue>(2);
    std::thread reader([this] { ReadBatches(); });
    std::thread preparer([this] { PrepareBatches(); });
    struct JoinReader {
      BatchQueue* filled;
      BatchQueue* queue;
      std::thread* reader;
      std::thread* preparer;
      ~JoinReader() {
        filled->Close();
        queue->Close();
        reader->join();
        preparer->join();
      }
    } join_reader{filled_.get(), queue_.get(), &reader, &preparer};

    TrainResult result;
    const int64_t start = options_.start_clock;
    if (start >= total) {
      KESTREL_RETURN_IF_ERROR(gate_->Advance(total, /*done=*/true, options_.start_state));
    }
    absl::Duration training;  // excludes evaluations
    absl::Time window_start = absl::Now();
    int64_t window_examples = 0;
    double window_loss = 0;
    std::unique_ptr<StepData> current;
    std::unique_ptr<StepData> fused;  // the next batch, pulled by a fused Step with this iteration's push
    // With overlap_pushes (ASP) the push of iteration c (and its Advance) runs while c + 1 computes, into the
    // other gradient buffers; `pushed` holds c's batch until then.
    const bool overlap_push = options_.prefetch_pulls && options_.overlap_pushes;
    std::unique_ptr<StepData> pushed;
    std::future<absl::Status> pushing;
    // Fused ahead (SSP under leases, see the class comment): iteration c - 1's push and c + 1's pull travel in
    // one Step while c computes; `held` keeps c - 1's batch (its gradients in the other buffers) until then.
    bool fuse_ahead = false;
    std::unique_ptr<StepData> held;
    std::future<absl::StatusOr<std::unique_ptr<StepData>>> ahead;  // after `held`: waited for before it goes
    auto push_held = [&](int64_t clock) -> absl::Status {  // `held` (iteration clock) pushed on its own
      if (held == nullptr) return absl::OkStatus();
      absl::Status status = PushAndAdvance(*held, *grads_[clock % 2], clock, /*last=*/false);
      queue_->Recycle(std::move(held));
      return status;
    };
    auto finish_push = [&]() -> absl::Status {
      if (!pushing.valid()) return absl::OkStatus();
      absl::Status status;
      {
        PhaseClock::Scope waiting(&phases_, PhaseClock::kWait);
        status = pushing.get();
      }
      queue_->Recycle(std::move(pushed));
      return status;
    };
    absl::Time t0 = absl::Now();
    if (start < total) {
      KESTREL_ASSIGN_OR_RETURN(current, Fetch(start, PullClock(start)));
      fuse_ahead = options_.prefetch_pulls && !overlap_push && gate_->Leased() &&
                   gate_->WaitClock(start).has_value() && current->batch.tables.empty();
    }
    for (int64_t clock = start; clock < total; ++clock) {
      const bool last = clock + 1 == total;
      if (fuse_ahead && held != nullptr && !last) {
        ahead = std::async(std::launch::async, [this, step = held.get(), &g = *grads_[(clock - 1) % 2], clock] {
          return PushAndFetch(*step, g, clock - 1, clock + 1);
        });
      } else if (options_.prefetch_pulls && !last) {
        next = std::async(std::launch::async,
                          [this, clock, sent = PullClock(clock + 1)] { return Fetch(clock + 1, sent); });
      } else if (last) {
        KESTREL_RETURN_IF_ERROR(push_held(clock - 1));
      }
      const PreparedBatch& batch = current->batch;
      const size_t unique = batch.keys.num_unique();
      GradBuffers& g = *grads_[overlap_push || fuse_ahead ? clock % 2 : 0];
      KESTREL_RETURN_IF_ERROR(g.wide.Reserve(unique));
      KESTREL_RETURN_IF_ERROR(g.emb.Reserve(unique * model_->embedding_dim()));
      KESTREL_RETURN_IF_ERROR(g.dense.Reserve(model_->dense_size()));
      ModelGrads grads{g.wide.data(), g.emb.data(), g.dense.data()};
      // An empty batch (this worker's share of the epoch ran out before the epoch's last iteration) computes
      // nothing; its push is empty (Push).
      absl::StatusOr<double> loss = 0.0;
      if (batch.batch.size > 0) {
        PhaseClock::Scope computing(&phases_, PhaseClock::kCompute);
        loss = model_->Step(batch, {current->wide.data(), current->emb.data(), current->dense.data()}, &grads,
                            nullptr);
      }
      if (!loss.ok()) return Annotate(loss.status(), clock, "computing");
      sent_clock_ = clock;  // this iteration's push, below or overlapped with the next
      if (overlap_push) {
        KESTREL_RETURN_IF_ERROR(finish_push());  // c - 1's, whose buffers c + 1 will fill
        pushed = std::move(current);
        pushing = std::async(std::launch::async, [this, step = pushed.get(), &g, clock, last] {
          return PushAndAdvance(*step, g, clock, last);
        });
      } else if (fuse_ahead && !last) {
        // Pushed with the next iteration's Step (`held`, below).
      } else if (!last && CanFuse(*current, clock)) {
        KESTREL_ASSIGN_OR_RETURN(fused, PushAndFetch(*current, g, clock, clock + 1));  // taken below, not fetched
      } else {
        KESTREL_RETURN_IF_ERROR(PushAndAdvance(*current, g, clock, last));
      }
      ++result.steps;
      result.examples += batch.batch.size;  // (the batch lives on in `pushed` while it is pushed)
      window_examples += batch.batch.size;
      window_loss += *loss;
      if (!last) {
        absl::StatusOr<std::unique_ptr<StepData>> fetched;
        if (fused != nullptr) {
          fetched = std::move(fused);
        } else if (ahead.valid()) {
          PhaseClock::Scope waiting(&phases_, PhaseClock::kWait);
          fetched = ahead.get();
        } else if (options_.prefetch_pulls) {
          PhaseClock::Scope waiting(&phases_, PhaseClock::kWait);
          fetched = next.get();
        } else {
          fetched = Fetch(clock + 1, PullClock(clock + 1));
        }
        if (!fetched.ok()) return Annotate(fetched.status(), clock + 1, "starting");
        if (fuse_ahead) {  // this iteration's batch waits for its push in the next Step
          if (held != nullptr) queue_->Recycle(std::move(held));
          held = std::move(current);
        } else if (current != nullptr) {
          queue_->Recycle(std::move(current));  // (pushing: moved to `pushed`)
        }
        current = std::move(fetched).value();
      }

      const int64_t done = clock + 1;
      if (done % job.train().log_every_steps() == 0 || last) {
        const absl::Time now = absl::Now();
        const double seconds = absl::ToDoubleSeconds(now - window_start);
        const double rate = seconds > 0 ? window_examples / seconds : 0;
        result.train_logloss = window_loss / std::max<int64_t>(window_examples, 1);
        KLOG(Info) << absl::StrFormat("worker %d step %d/%d  train logloss %.5f  %.0f examples/s", options_.rank,
                                      done, total, result.train_logloss, rate);
        Record record;
        record.set_kind("train");
        record.set_worker(options_.rank);
        record.set_step(done);
        record.set_steps(total);
        record.set_logloss(result.train_logloss);
        record.set_examples_per_second(rate);
        records_.Write(record);
        Notify({TrainerEvent::Kind::kTrain, done, window_examples, result.train_logloss, 0, rate, phases_.Get()});
        window_start = now;
        window_examples = 0;
        window_loss = 0;
      }
      if (options_.evaluate && !last && job.train().eval_every_steps() > 0 &&
          done % job.train().eval_every_steps() == 0) {
        KESTREL_RETURN_IF_ERROR(finish_push());  // evaluate the model with this worker's pushes in
        KESTREL_RETURN_IF_ERROR(push_held(clock));
        training += absl::Now() - t0;
        KESTREL_RETURN_IF_ERROR(Evaluate(done).status());
        t0 = absl::Now();
        window_start = t0;
      }
    }
    KESTREL_RETURN_IF_ERROR(finish_push());
    training += absl::Now() - t0;
    result.seconds = absl::ToDoubleSeconds(training);
    result.examples_per_second = result.seconds > 0 ? result.examples / result.seconds : 0;
    result.phases = phases_.Get();  // training only, like `seconds`
    Record record;
    record.set_kind("done");
    record.set_worker(options_.rank);
    record.set_steps(result.steps);
    if (options_.row_cache != nullptr) {
      const RowCacheStats cache = options_.row_cache->stats();
      record.set_row_cache_hit_ratio(cache.hit_ratio());
      record.set_row_cache_rows(static_cast<double>(cache.rows));
    }
    record.set_examples(result.examples);
    record.set_seconds(result.seconds);
    record.set_examples_per_second(result.examples_per_second);
    PhaseSeconds* phases = record.mutable_phases();
    phases->set_read(result.phases.read);
    phases->set_batch(result.phases.batch);
    phases->set_pull(result.phases.pull);
    phases->set_compute(result.phases.compute);
    phases->set_push(result.phases.push);
    phases->set_wait(result.phases.wait);
    records_.Write(record);
    Notify({TrainerEvent::Kind::kDone, result.steps, result.examples, result.train_logloss, 0,
            result.examples_per_second, result.phases});
    // The final model: every worker's last push is in (and no rollback can undo it any more).
    KESTREL_RETURN_IF_ERROR(gate_->WaitAllFinished(total));
    if (options_.evaluate) {
      KESTREL_ASSIGN_OR_RETURN(result.eval, Evaluate(total));
    }
    return result;
  }

  absl::Status Annotate(const absl::Status& status, int64_t clock, const char* what) {
    return absl::Status(status.code(), absl::StrFormat("worker %d, iteration %d, %s: %s", options_.rank, clock,
                                                       what, status.message()));
  }

  // One probability per example of `files` (at most `limit`; 0: all), in file order, and the labels.
  absl::Status Score(const std::vector<std::string>& files, int64_t limit, std::vector<float>* probs,
                     std::vector<float>* labels) {
    KESTREL_RETURN_IF_ERROR(Init());
    const JobConfig& job = options_.job;
    ReaderOptions reader_options;
    reader_options.on_error = job.data().skip_malformed() ? ReaderOptions::OnError::kSkip : ReaderOptions::OnError::kFail;
    KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<BatchReader> reader,
                             BatchReader::Open(schema_, files, reader_options));
    StepData step_data(backend_);
    step_data.read = CallClock{sent_clock_};  // never from a row cache
    std::vector<float> batch_probs;
    probs->clear();
    labels->clear();
    while (limit == 0 || static_cast<int64_t>(probs->size()) < limit) {
      int64_t want = job.train().batch_size();
      if (limit > 0) want = std::min<int64_t>(want, limit - static_cast<int64_t>(probs->size()));
      KESTREL_ASSIGN_OR_RETURN(const int64_t got, reader->Fill(want, &step_data.batch.batch));
      if (got == 0) break;
      step_data.batch.Prepare(options_.partition, schema_->field_tables(), schema_->num_tables());
      KESTREL_RETURN_IF_ERROR(Pull(&step_data));
      batch_probs.resize(got);
      KESTREL_RETURN_IF_ERROR(model_
                                  ->Step(step_data.batch, {step_data.wide.data(), step_data.emb.data(),
                                                           step_data.dense.data()},
                                         nullptr, batch_probs.data())
                                  .status());
      probs->insert(probs->end(), batch_probs.begin(), batch_probs.end());
      labels->insert(labels->end(), step_data.batch.batch.labels.begin(), step_data.batch.batch.labels.end());
    }
    return absl::OkStatus();
  }

  absl::StatusOr<EvalResult> Evaluate(int64_t step) {
    KESTREL_RETURN_IF_ERROR(Init());
    sent_clock_ = step;  // iterations done: reads the current weights
    const JobConfig& job = options_.job;
    const std::vector<std::string> files(job.data().test_files().begin(), job.data().test_files().end());
    const absl::Time start = absl::Now();
    std::vector<float> probs, labels;
    KESTREL_RETURN_IF_ERROR(Score(files, job.train().eval_max_examples(), &probs, &labels));
    if (probs.empty()) return absl::FailedPreconditionError("the test files hold no examples");
    EvalResult r;
    r.step = step;
    r.examples = static_cast<int64_t>(probs.size());
    r.logloss = LogLoss(probs, labels);
    r.auc = ExactAuc(probs, labels);
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    r.examples_per_second = seconds > 0 ? r.examples / seconds : 0;
    r.fingerprint = PredictionFingerprint(probs);
    KLOG(Info) << absl::StrFormat("eval at step %d: %d examples  logloss %.5f  AUC %.5f  %.0f examples/s", step,
                                  r.examples, r.logloss, r.auc, r.examples_per_second);
    Record record;
    record.set_kind("eval");
    record.set_worker(options_.rank);
    record.set_step(step);
    record.set_examples(r.examples);
    record.set_logloss(r.logloss);
    record.set_auc(r.auc);
    record.set_examples_per_second(r.examples_per_second);
    record.set_fingerprint(FingerprintHex(r.fingerprint));
    records_.Write(record);
    Notify({TrainerEvent::Kind::kEval, step, r.examples, r.logloss, r.auc, r.examples_per_second});
    return r;
  }

  void Notify(const TrainerEvent& event) {
    if (options_.observer) options_.observer(event);
  }

  TrainerOptions options_;
  PsClient* client_;
  ClockGate* gate_;
  Backend* backend_;
  RecordWriter records_;
  std::shared_ptr<const Schema> schema_;     // the job's data format (Init)
  std::unique_ptr<Model> model_;
  std::unique_ptr<EmbeddingTables> tables_;  // the embedding tables the model's fields look up (Init)
  std::unique_ptr<BatchQueue> filled_;  // read, not yet prepared: reader thread -> preparer thread
  std::unique_ptr<BatchQueue> queue_;   // prepared: preparer thread -> training loop; holds the free list
  absl::Mutex line_log_mu_;
  std::FILE* line_log_ ABSL_GUARDED_BY(line_log_mu_) = nullptr;  // opened on first use
  std::unique_ptr<TrainingFeed> feed_;  // the batches of this worker's iterations (Run); read by the reader thread
  // The clock of the last pull or push that named its iteration (a push's, a pull's without prefetching) or of
  // the last evaluation; 0 before any. Prefetched pulls and Score's carry it. Used only by the thread running
  // Run(), Evaluate() or Score().
  int64_t sent_clock_ = 0;
  std::unique_ptr<GradBuffers> grads_[2];  // [1] only when pushes overlap the next compute
  PhaseClock phases_;
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
