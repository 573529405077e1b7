// Test helpers for the training feed and what reads through it: small Criteo files, a job training on one, and
// the feed of a rank. Test-only.
#ifndef KESTREL_WORKER_TRAINING_FEED_TESTING_H_
#define KESTREL_WORKER_TRAINING_FEED_TESTING_H_

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/checkpoint.pb.h"
#include "proto/job.pb.h"
#include "worker/data/schema.h"
#include "worker/trainer.h"
#include "worker/training_feed.h"

namespace kestrel {

// A Criteo TSV file `name` of `lines` distinct examples in the test's temporary directory: example i has label
// i % 2 and integer feature 0 = i. Returns its path.
inline std::string WriteCriteoFile(const std::string& name, int lines) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream out(path);
  for (int i = 0; i < lines; ++i) {
    out << i % 2 << "\t" << i;
    for (int j = 1; j < 13; ++j) out << "\t" << j;
    for (int f = 0; f < 26; ++f) out << "\t" << absl::StrCat(absl::Hex(i * 26 + f + 16));
    out << "\n";
  }
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

}  // namespace kestrel

#endif  // KESTREL_WORKER_TRAINING_FEED_TESTING_H_
