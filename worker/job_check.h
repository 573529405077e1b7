// CheckJob: what can be known wrong with a job before it trains, found up front. The model config is checked
// as the Trainer builds the model, and every training and test file is opened and its first examples read
// through the job's own reader (worker/batch_reader.h), so a format that does not match the data, a line the
// reader refuses or an example with more features than the job has slots stops the job before its first
// iteration, naming the file and line, instead of failing it midway. Data past the first examples is read
// only by training: a later bad line still fails it then.
//
// Thread-safe (it reads only files and its arguments).
#ifndef KESTREL_WORKER_JOB_CHECK_H_
#define KESTREL_WORKER_JOB_CHECK_H_

#include <cstdint>

#include <memory>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "worker/compute/backend.h"
#include "worker/data/schema.h"

namespace kestrel {

struct JobCheckOptions {
  // The job evaluates or scores its test files, so it needs some. Default: false.
  bool needs_test_files = false;
  // Examples read from the start of each file. Default: 1000.
  int64_t examples_per_file = 1000;
};

// The job's data format, resolved (hand it to the Trainer: TrainerOptions::schema), when the job can start;
// InvalidArgument naming the problem (the config field, or the file and line) otherwise. `backend`: the one the
// job computes on (the model is built on it, then dropped).
[[nodiscard]] absl::StatusOr<std::shared_ptr<const Schema>> CheckJob(const JobConfig& job, Backend* backend,
                                                       const JobCheckOptions& options = {});

}  // namespace kestrel

#endif  // KESTREL_WORKER_JOB_CHECK_H_
