// Test helpers for the training feed and what reads through it: small Criteo files, a job training on one, the
// feed of a rank, and everything a feed gives. Test-only.
#ifndef KESTREL_WORKER_TRAINING_FEED_TESTING_H_
#define KESTREL_WORKER_TRAINING_FEED_TESTING_H_

#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/checkpoint.pb.h"
#include "proto/job.pb.h"
#include "worker/data/schema.h"
#include "worker/trainer.h"
#include "worker/training_feed.h"

namespace kestrel {

// Writes the distinct Criteo examples first .. first + lines - 1 to `out`: example i has label i % 2 and integer
// feature 0 = i.
inline void WriteCriteoExamples(std::ostream& out, int first, int lines) {
  for (int i = first; i < first + lines; ++i) {
    out << i % 2 << "\t" << i;
    for (int j = 1; j < 13; ++j) out << "\t" << j;
    for (int f = 0; f < 26; ++f) out << "\t" << absl::StrCat(absl::Hex(i * 26 + f + 16));
    out << "\n";
  }
}

// A Criteo TSV file `name` of examples 0 .. lines - 1 (WriteCriteoExamples) in the test's temporary directory.
// Returns its path.
inline std::string WriteCriteoFile(const std::string& name, int lines) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream out(path);
  WriteCriteoExamples(out, 0, lines);
  return path;
}

// A job training on the Criteo `file`, with defaults applied.
inline JobConfig CriteoJob(const std::string& file, int batch, int epochs, int shuffle_buffer) {
  JobConfig job;
  job.mutable_model()->set_type(ModelConfig::DEEPFM);  // an MLP model: the integer features are dense inputs
  job.mutable_data()->set_format(DataConfig::CRITEO);
  job.mutable_data()->add_train_files(file);
  job.mutable_train()->set_batch_size(batch);
  job.mutable_train()->set_epochs(epochs);
  job.mutable_train()->set_shuffle_buffer(shuffle_buffer);
  return JobWithDefaults(job);
}

// `job`'s schema (a test failure and null when it does not resolve).
inline std::shared_ptr<const Schema> ResolveSchema(const JobConfig& job) {
  absl::StatusOr<std::shared_ptr<const Schema>> schema = Schema::Resolve(job.data(), job.model());
  EXPECT_TRUE(schema.ok()) << schema.status();
  return schema.ok() ? *schema : nullptr;
}

// The feed of rank `rank` of `workers`, continuing at `start_clock` from `state` (a test failure and null when it
// does not open).
inline std::unique_ptr<TrainingFeed> OpenFeed(const JobConfig& job, int rank, int workers, int64_t start_clock,
                                              const WorkerState& state) {
  TrainingFeedOptions options;
  options.job = job;
  options.schema = ResolveSchema(job);
  options.rank = rank;
  options.num_workers = workers;
  options.start_clock = start_clock;
  options.start_state = state;
  absl::StatusOr<std::unique_ptr<TrainingFeed>> feed = TrainingFeed::Open(std::move(options));
  EXPECT_TRUE(feed.ok()) << feed.status();
  return feed.ok() ? *std::move(feed) : nullptr;
}

// Everything a feed gives until it ends: each iteration's examples (their numbers, from dense input 0 =
// log1p(i)), the state Advance would report after it, and the error that ended the reading (OK at the end).
struct FeedRead {
  std::map<int64_t, std::vector<int>> examples;
  std::map<int64_t, WorkerState> state_after;
  absl::Status status;
};

inline FeedRead ReadFeed(TrainingFeed* feed) {
  FeedRead out;
  Batch batch;
  int64_t clock = 0;
  ReaderPosition after;
  while (true) {
    absl::StatusOr<bool> more = feed->Next(&batch, &clock, &after, nullptr);
    if (!more.ok()) out.status = more.status();
    if (!more.ok() || !*more) break;
    std::vector<int>& lines = out.examples[clock];
    for (int64_t e = 0; e < batch.size; ++e) {
      lines.push_back(static_cast<int>(std::lround(std::expm1(batch.dense[e * batch.dense_dim]))));
    }
    out.state_after[clock + 1] = feed->StateOf(clock + 1, after);
  }
  return out;
}

}  // namespace kestrel

#endif  // KESTREL_WORKER_TRAINING_FEED_TESTING_H_
