#include "worker/job_check.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "worker/batch_reader.h"
#include "worker/data/schema.h"
#include "worker/model.h"
#include "worker/train_stream.h"
#include "worker/trainer.h"

namespace kestrel {
namespace {

// Reads the first `examples` examples of `file` as training would; the error says which list the file is in.
[[nodiscard]] absl::Status CheckFile(const JobConfig& job, const std::shared_ptr<const Schema>& schema, const std::string& file,
                       const char* list, int64_t examples) {
  const ReaderOptions options = ReaderOptionsFor(job.data());
  absl::StatusOr<std::unique_ptr<BatchReader>> reader = BatchReader::Open(schema, {file}, options);
  absl::Status status = reader.status();
  if (status.ok()) {
    Batch batch;
    status = (*reader)->Fill(examples, &batch).status();
  }
  if (status.ok()) return absl::OkStatus();
  // The reader's errors name the file (and line).
  return absl::InvalidArgumentError(absl::StrCat("the ", list, " data: ", status.message()));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Schema>> CheckJob(const JobConfig& job_in, Backend* backend,
                                                       const JobCheckOptions& options) {
  JobConfig job = JobWithDefaults(job_in);
  if (!job.data().train_stream().empty()) {
    // A job that follows a directory: its data format is read from the first file (waited for).
    const DataConfig& data = job.data();
    if (!data.train_files().empty() || data.validation_every() > 0 || !data.validation_column().empty() ||
        data.validation_files_size() > 0) {
      return absl::InvalidArgumentError(
          "data.train_stream takes neither data.train_files nor a validation split (validation_files, "
          "validation_every, validation_column)");
    }
    const uint32_t poll_ms = data.stream_poll_ms() > 0 ? data.stream_poll_ms() : kDefaultStreamPollMs;
    KLOG(Info) << "waiting for the first file of the training directory " << data.train_stream();
    absl::StatusOr<std::optional<std::string>> first =
        TrainStream(data.train_stream(), absl::Milliseconds(poll_ms)).WaitFor(0);
    if (!first.ok()) return absl::InvalidArgumentError(absl::StrCat("data.train_stream: ", first.status().message()));
    if (!first->has_value()) return absl::InvalidArgumentError("data.train_stream: the stream ended before its first file");
    job.mutable_data()->add_train_files(**first);
  }
  if (job.data().train_files().empty()) {
    return absl::InvalidArgumentError("no training files: set data.train_files or give --train_files");
  }
  if (job.train().shuffle_buffer() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("train.shuffle_buffer must be >= 0 (0: no shuffling), got ",
                                                   job.train().shuffle_buffer()));
  }
  // The data format (the schema's columns, features and tables; the header lines; libsvm's slots).
  absl::StatusOr<std::shared_ptr<const Schema>> schema = Schema::Resolve(job.data(), job.model());
  if (!schema.ok()) return absl::InvalidArgumentError(absl::StrCat("the data: ", schema.status().message()));
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(job.model(), (*schema)->fields(), (*schema)->dense_dim(), backend);
  if (!model.ok()) return absl::InvalidArgumentError(absl::StrCat("the model: ", model.status().message()));
  if (options.needs_test_files && job.data().test_files().empty()) {
    return absl::InvalidArgumentError("no test files: set data.test_files or give --test_files");
  }
  for (const std::string& file : job.data().train_files()) {
    KESTREL_RETURN_IF_ERROR(CheckFile(job, *schema, file, "training", options.examples_per_file));
  }
  for (const std::string& file : job.data().test_files()) {
    KESTREL_RETURN_IF_ERROR(CheckFile(job, *schema, file, "test", options.examples_per_file));
  }
  return *std::move(schema);
}

}  // namespace kestrel
