#include "worker/training_feed.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/line_assignment.h"
#include "common/status.h"

namespace kestrel {
namespace {

// The training files' data lines (worker/data/record_reader.h: header and blank lines are not data lines).
[[nodiscard]] absl::StatusOr<uint64_t> TrainingLines(const JobConfig& job) {
  const std::vector<std::string> files(job.data().train_files().begin(), job.data().train_files().end());
  if (files.empty()) return absl::InvalidArgumentError("data.train_files is empty");
  // The header lines of a DELIMITED schema (Schema::header).
  KESTREL_ASSIGN_OR_RETURN(const ReaderOptions::Holdout holdout, TrainingHoldout(job.data()));
  return CountDataLines(files, job.data().format() == DataConfig::DELIMITED && job.data().schema().header(), holdout);
}

// The iterations of an epoch whose workers read `shares` lines each: every line trained once (the largest share in
// batches, the last one short and a shorter share's last ones short or empty), or with drop_last the smallest
// share's whole batches (the rest unread).
int64_t EpochIterations(const TrainConfig& train, absl::Span<const uint64_t> shares) {
  const uint64_t batch = static_cast<uint64_t>(train.batch_size());
  if (train.drop_last()) return static_cast<int64_t>(*std::min_element(shares.begin(), shares.end()) / batch);
  return static_cast<int64_t>((*std::max_element(shares.begin(), shares.end()) + batch - 1) / batch);
}

// Iterations per epoch of `num_workers` workers sharing `lines` training lines.
[[nodiscard]] absl::StatusOr<int64_t> IterationsPerEpoch(const JobConfig& job, int num_workers, uint64_t lines) {
  std::vector<uint64_t> shares;
  for (int w = 0; w < num_workers; ++w) shares.push_back(PlainAssignment(w, num_workers).CountBelow(lines));
  const int64_t per_epoch = EpochIterations(job.train(), shares);
  if (per_epoch == 0 && lines == 0) {
    return absl::FailedPreconditionError("the training files hold no data lines");
  }
  if (per_epoch == 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "a worker's share of the training data (%d lines of %d workers) is smaller than one batch of %d, and "
        "train.drop_last drops it",
        *std::min_element(shares.begin(), shares.end()), num_workers, job.train().batch_size()));
  }
  return per_epoch;
}

WorkerState StateAt(int64_t clock, const ReaderPosition& p) {
  WorkerState state;
  state.set_clock(clock);
  ReaderPositionProto* r = state.mutable_reader();
  r->set_file(p.file);
  r->set_byte_offset(p.byte_offset);
  r->set_file_line(p.file_line);
  r->set_global_line(p.global_line);
  r->set_window_line(p.window_line);
  return state;
}

ReaderPosition PositionOf(const ReaderPositionProto& r) {
  ReaderPosition p;
  p.file = r.file();
  p.byte_offset = r.byte_offset();
  p.file_line = r.file_line();
  p.global_line = r.global_line();
  p.window_line = r.window_line();
  return p;
}

}  // namespace

absl::StatusOr<EpochSchedule> PlainSchedule(const JobConfig& job, int num_workers) {
  KESTREL_ASSIGN_OR_RETURN(const uint64_t lines, TrainingLines(job));
  KESTREL_ASSIGN_OR_RETURN(const int64_t per_epoch, IterationsPerEpoch(job, num_workers, lines));
  return EpochSchedule::Plain(per_epoch, job.train().epochs(), job.train().max_steps());
}

absl::StatusOr<int64_t> PlainIterations(const JobConfig& job, int num_workers) {
  KESTREL_ASSIGN_OR_RETURN(const EpochSchedule schedule, PlainSchedule(job, num_workers));
  return schedule.total();
}

absl::StatusOr<std::unique_ptr<TrainingFeed>> TrainingFeed::Open(TrainingFeedOptions options) {
  if (options.schema == nullptr) return absl::InvalidArgumentError("TrainingFeed needs the job's resolved schema");
  std::unique_ptr<TrainingFeed> feed(new TrainingFeed(std::move(options)));
  KESTREL_RETURN_IF_ERROR(feed->Plan());
  return feed;
}

// The schedule of epochs: plain, or from the plan of the last worker-count change (its epoch lasts as long as
// the largest share has batches, with drop_last the smallest share whole batches; every worker computes the
// same from the same shares). Then where reading starts.
absl::Status TrainingFeed::Plan() {
  const JobConfig& job = options_.job;
  if (!job.data().train_stream().empty()) return PlanStream();
  KESTREL_ASSIGN_OR_RETURN(total_lines_, TrainingLines(job));
  KESTREL_ASSIGN_OR_RETURN(per_epoch_, IterationsPerEpoch(job, options_.num_workers, total_lines_));
  const int64_t epochs = job.train().epochs();
  if (!options_.start_state.has_plan()) {
    schedule_ = EpochSchedule::Plain(per_epoch_, epochs, job.train().max_steps());
  } else {
    plan_ = options_.start_state.plan();
    int64_t first = per_epoch_;
    if (plan_->shares_size() > 0) {
      if (plan_->shares_size() != options_.num_workers) {
        return absl::InvalidArgumentError(absl::StrFormat("the epoch plan has %d shares for %d workers",
                                                          plan_->shares_size(), options_.num_workers));
      }
      std::vector<uint64_t> lines;
      for (const LineShare& share : plan_->shares()) lines.push_back(AssignmentOf(share).CountBelow(total_lines_));
      first = EpochIterations(job.train(), lines);
    }
    schedule_ = EpochSchedule::Planned(plan_->epoch(), plan_->start_clock(), first, per_epoch_, epochs,
                                       job.train().max_steps());
    KLOG(Info) << "worker " << options_.rank << ": epoch " << plan_->epoch() << " continues from clock "
               << plan_->start_clock() << " for " << first << " iterations with " << options_.num_workers
               << " workers" << (plan_->shares_size() > 0 ? " (the rest of its lines dealt anew)" : "");
  }
  const int64_t total = schedule_.total();
  const int64_t start = options_.start_clock;
  // Iterations before start_clock are read (and dropped) from the start of its epoch.
  first_ = start < total ? schedule_.At(start).start : total;
  if (start > 0 && start < total && options_.start_state.clock() == start && options_.start_state.has_reader() &&
      (start != schedule_.At(start).start || Shared(schedule_.At(start)))) {
    // Continue exactly where this rank's reader was at start_clock, without re-reading the epoch (at a
    // worker-count change: where the slowest worker was, every unread line of the epoch lying beyond it).
    KESTREL_RETURN_IF_ERROR(OpenReader(schedule_.At(start), PositionOf(options_.start_state.reader())));
    first_ = start;
    KLOG(Info) << "worker " << options_.rank << " resumes its reader at line "
               << options_.start_state.reader().global_line() << " for iteration " << start;
  }
  next_ = first_;
  return absl::OkStatus();
}

bool TrainingFeed::Shared(const EpochSchedule::Epoch& epoch) const {
  return plan_.has_value() && epoch.index == plan_->epoch() && plan_->shares_size() > 0;
}

LineAssignment TrainingFeed::ShareOf(const EpochSchedule::Epoch& epoch) const {
  return Shared(epoch) ? AssignmentOf(plan_->shares(options_.rank)) : PlainAssignment(options_.rank, options_.num_workers);
}

EpochSchedule::Epoch TrainingFeed::EpochAt(int64_t clock) const {
  if (stream_ == nullptr) return schedule_.At(clock);
  absl::MutexLock lock(&segments_mu_);
  if (segments_.empty()) return EpochSchedule::Epoch{0, 0, 0};
  for (const Segment& s : segments_) {
    if (clock < s.end) return EpochSchedule::Epoch{s.index, s.start, s.end};
  }
  const Segment& last = segments_.back();
  return EpochSchedule::Epoch{last.index, last.start, last.end};
}

WorkerState TrainingFeed::StateOf(int64_t clock, const ReaderPosition& after) const {
  WorkerState state = StateAt(clock, after);
  if (stream_ != nullptr) {  // the epoch of iteration clock - 1: its file, and where it ends
    absl::MutexLock lock(&segments_mu_);
    for (auto s = segments_.rbegin(); s != segments_.rend(); ++s) {
      if (s->start < clock) {
        state.set_epoch(s->index);
        state.set_epoch_start(s->start);
        state.set_epoch_end(s->end);
        state.set_stream_file(std::filesystem::path(s->file).filename().string());
        break;
      }
    }
    *state.mutable_share() = LineShareOf(PlainAssignment(options_.rank, options_.num_workers));
    state.set_batch_lines(options_.job.train().batch_size());
    return state;
  }
  if (plan_.has_value()) *state.mutable_plan() = *plan_;
  const EpochSchedule::Epoch epoch = schedule_.At(clock);
  state.set_epoch(epoch.index);
  state.set_epoch_start(epoch.start);
  state.set_epoch_end(epoch.end);
  *state.mutable_share() = LineShareOf(ShareOf(epoch));
  state.set_batch_lines(options_.job.train().batch_size());
  return state;
}

absl::Status TrainingFeed::OpenReader(const EpochSchedule::Epoch& epoch, const ReaderPosition& at) {
  const JobConfig& job = options_.job;
  const std::vector<std::string> files(job.data().train_files().begin(), job.data().train_files().end());
  ReaderOptions reader_options = ReaderOptionsFor(job.data());
  reader_options.assignment = std::make_shared<LineAssignment>(ShareOf(epoch));
  KESTREL_ASSIGN_OR_RETURN(reader_options.holdout, TrainingHoldout(job.data()));
  if (job.train().shuffle_buffer() > 0) {
    reader_options.shuffle_window = static_cast<uint64_t>(job.train().shuffle_buffer());
    reader_options.shuffle_seed = job.train().shuffle_seed() != 0 ? job.train().shuffle_seed() : job.model().seed();
    reader_options.epoch = epoch.index;
  }
  KESTREL_ASSIGN_OR_RETURN(reader_, BatchReader::Open(options_.schema, files, reader_options, at));
  const uint64_t lines = reader_options.assignment->CountBelow(total_lines_);
  unread_ = lines - std::min(lines, reader_options.assignment->CountBelow(at.global_line));
  return absl::OkStatus();
}

absl::Status TrainingFeed::FillBatch(int64_t it, int64_t epoch, Batch* batch, std::vector<uint64_t>* lines) {
  const int64_t batch_size = options_.job.train().batch_size();
  if (lines != nullptr) lines->clear();
  // A share shorter than the epoch's iterations in batches gives short batches, then empty ones.
  const uint64_t skipped = reader_->skipped();
  KESTREL_ASSIGN_OR_RETURN(const int64_t filled, reader_->Fill(batch_size, batch, /*append=*/false, lines));
  const uint64_t consumed = static_cast<uint64_t>(filled) + (reader_->skipped() - skipped);
  if (consumed > unread_ || (filled < batch_size && consumed < unread_)) {
    return absl::DataLossError(absl::StrFormat(
        "worker %d's share of epoch %d was counted as %d more lines at iteration %d, its reader %s %d (the "
        "files changed while training?)",
        options_.rank, epoch, unread_, it, filled < batch_size ? "ended after" : "read", consumed));
  }
  unread_ -= consumed;
  return absl::OkStatus();
}

absl::StatusOr<bool> TrainingFeed::Next(Batch* batch, int64_t* clock, ReaderPosition* after,
                                        std::vector<uint64_t>* lines) {
  if (stream_ != nullptr) return NextInStream(batch, clock, after, lines);
  for (; next_ < total(); ++next_) {
    const int64_t it = next_;
    const EpochSchedule::Epoch epoch = schedule_.At(it);
    if (reader_ == nullptr || (it == epoch.start && it != first_)) {  // an epoch starts from the data's beginning
      KESTREL_RETURN_IF_ERROR(OpenReader(epoch, ReaderPosition()));
    }
    KESTREL_RETURN_IF_ERROR(FillBatch(it, epoch.index, batch, lines));
    if (it < options_.start_clock) continue;  // done before this worker was replaced
    *after = reader_->position();
    *clock = it;
    ++next_;
    return true;
  }
  return false;
}

// Streams: the first segment, or the one start_clock falls in (exactly where the state says, else found by
// counting the files before it).
absl::Status TrainingFeed::PlanStream() {
  const JobConfig& job = options_.job;
  if (options_.start_state.has_plan()) {
    return absl::UnimplementedError("a job that follows a directory (data.train_stream) keeps its worker count");
  }
  const uint32_t poll_ms = job.data().stream_poll_ms();
  stream_ = std::make_unique<TrainStream>(job.data().train_stream(),
                                          absl::Milliseconds(poll_ms > 0 ? poll_ms : kDefaultStreamPollMs));
  const int64_t start = options_.start_clock;
  next_ = first_ = start;
  if (start == 0) return absl::OkStatus();  // Next opens file 0
  const WorkerState& state = options_.start_state;
  if (state.clock() == start && !state.stream_file().empty() && state.epoch_start() < start &&
      start <= state.epoch_end()) {
    if (start == state.epoch_end()) {  // the state's file is done: Next opens the one after it
      current_ = Segment{state.epoch(), state.epoch_start(), state.epoch_end(), state.stream_file(), 0};
      have_current_ = true;
      known_end_.store(start);
      return absl::OkStatus();
    }
    KESTREL_ASSIGN_OR_RETURN(const bool found,
                             OpenSegment(state.epoch(), state.epoch_start(),
                                         state.has_reader() ? PositionOf(state.reader()) : ReaderPosition(),
                                         state.stream_file()));
    if (!found || current_.end != state.epoch_end()) {
      return absl::DataLossError(absl::StrFormat(
          "worker %d resumes file %s (epoch %d) at iteration %d, but it now holds %d iterations' lines, not %d "
          "(the file changed?)",
          options_.rank, state.stream_file(), state.epoch(), start, current_.end - current_.start,
          state.epoch_end() - state.epoch_start()));
    }
    if (!state.has_reader()) first_ = current_.start;  // read from the file's start, dropping what was trained
    next_ = first_;
    KLOG(Info) << "worker " << options_.rank << " resumes " << current_.file << " (epoch " << current_.index
               << ") for iteration " << start;
    return absl::OkStatus();
  }
  // No state to continue from: the files before start_clock are counted again, and its file read from its start.
  int64_t at = 0;
  for (int64_t index = 0;; ++index) {
    KESTREL_ASSIGN_OR_RETURN(const bool found, OpenSegment(index, at, ReaderPosition(), ""));
    if (!found) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "the training directory ends at iteration %d, before iteration %d this worker resumes at", at, start));
    }
    if (start < current_.end) break;
    at = current_.end;
  }
  next_ = first_ = current_.start;
  return absl::OkStatus();
}

absl::StatusOr<bool> TrainingFeed::OpenSegment(int64_t index, int64_t start, const ReaderPosition& at,
                                               const std::string& expected) {
  const JobConfig& job = options_.job;
  KESTREL_ASSIGN_OR_RETURN(const std::optional<std::string> file,
                           stream_->WaitFor(index, [this] { return cancelled_.load(); }));
  if (!file.has_value()) {
    stream_end_.store(start);
    known_end_.store(start);
    KLOG(Info) << "worker " << options_.rank << ": the training directory ends after " << index
               << " files, at iteration " << start;
    return false;
  }
  const std::string name = std::filesystem::path(*file).filename().string();
  if (!expected.empty() && name != expected) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "file %d of the training directory %s is %s, not %s as when it was trained: a file arrived out of name "
        "order",
        index, stream_->dir(), name, expected));
  }
  const bool header = job.data().format() == DataConfig::DELIMITED && job.data().schema().header();
  KESTREL_ASSIGN_OR_RETURN(const uint64_t lines, CountDataLines({*file}, header, ReaderOptions::Holdout()));
  std::vector<uint64_t> shares;
  for (int w = 0; w < options_.num_workers; ++w) shares.push_back(PlainAssignment(w, options_.num_workers).CountBelow(lines));
  const int64_t iterations = EpochIterations(job.train(), shares);
  current_ = Segment{index, start, start + iterations, *file, lines};
  have_current_ = true;
  per_epoch_ = iterations;
  {
    absl::MutexLock lock(&segments_mu_);
    segments_.push_back(current_);
    if (segments_.size() > kKeptSegments) segments_.erase(segments_.begin());
  }
  known_end_.store(current_.end);
  ReaderOptions reader_options = ReaderOptionsFor(job.data());
  reader_options.assignment = std::make_shared<LineAssignment>(PlainAssignment(options_.rank, options_.num_workers));
  if (job.train().shuffle_buffer() > 0) {
    reader_options.shuffle_window = static_cast<uint64_t>(job.train().shuffle_buffer());
    reader_options.shuffle_seed = job.train().shuffle_seed() != 0 ? job.train().shuffle_seed() : job.model().seed();
    reader_options.epoch = index;
  }
  KESTREL_ASSIGN_OR_RETURN(reader_, BatchReader::Open(options_.schema, {*file}, reader_options, at));
  const uint64_t mine = reader_options.assignment->CountBelow(lines);
  unread_ = mine - std::min(mine, reader_options.assignment->CountBelow(at.global_line));
  return true;
}

absl::StatusOr<bool> TrainingFeed::NextInStream(Batch* batch, int64_t* clock, ReaderPosition* after,
                                                std::vector<uint64_t>* lines) {
  while (true) {
    if (!have_current_ || next_ == current_.end) {  // the next file (or the first)
      const int64_t index = have_current_ ? current_.index + 1 : 0;
      KESTREL_ASSIGN_OR_RETURN(const bool found, OpenSegment(index, next_, ReaderPosition(), ""));
      if (!found) return false;
      continue;  // (a file with no iteration for this worker count: the one after it)
    }
    const int64_t it = next_;
    KESTREL_RETURN_IF_ERROR(FillBatch(it, current_.index, batch, lines));
    ++next_;
    if (it < options_.start_clock) continue;  // done before this worker was resumed
    *after = reader_->position();
    *clock = it;
    return true;
  }
}

}  // namespace kestrel
