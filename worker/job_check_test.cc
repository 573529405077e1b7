// CheckJob finds a job's config and data problems before training, each named: the model config, missing file
// lists, an unreadable file, a format that does not match the data, and examples wider than the job's slots.
#include "worker/job_check.h"

#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "worker/compute/cpu_backend.h"

namespace kestrel {
namespace {

std::string WriteFile(const std::string& name, const std::string& contents) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << contents;
  return path;
}

JobConfig LibsvmJob(int slots) {
  JobConfig job;
  job.mutable_model()->set_type(ModelConfig::LOGISTIC_REGRESSION);
  job.mutable_data()->set_format(DataConfig::LIBSVM);
  job.mutable_data()->set_libsvm_slots(slots);
  job.mutable_data()->add_train_files(WriteFile("train.svm", "1 3:1 7:0.5\n0 2:1\n"));
  job.mutable_data()->add_test_files(WriteFile("test.svm", "0 1:1\n1 3:1 4:1 9:2\n"));
  return job;
}

TEST(JobCheckTest, AcceptsAJobWhoseDataItsReaderReads) {
  auto backend = NewCpuBackend();
  JobCheckOptions options;
  options.needs_test_files = true;
  const auto schema = CheckJob(LibsvmJob(3), backend.get(), options);
  ASSERT_TRUE(schema.ok()) << schema.status();
  EXPECT_EQ((*schema)->fields(), 3);
}

// Without data.libsvm_slots the job takes as many fields as the widest line of its files has features.
TEST(JobCheckTest, CountsTheSlotsWhenNoneAreGiven) {
  auto backend = NewCpuBackend();
  const auto schema = CheckJob(LibsvmJob(0), backend.get());
  ASSERT_TRUE(schema.ok()) << schema.status();
  EXPECT_EQ((*schema)->fields(), 3) << "the widest line of train.svm and test.svm";
}

TEST(JobCheckTest, NamesANegativeShuffleBuffer) {
  auto backend = NewCpuBackend();
  JobConfig job = LibsvmJob(0);
  job.mutable_train()->set_shuffle_buffer(-1);
  const absl::Status status = CheckJob(job, backend.get()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "train.shuffle_buffer")) << status;
}

TEST(JobCheckTest, NamesTheFileAndLineOfAnExampleWiderThanTheSlots) {
  auto backend = NewCpuBackend();
  const absl::Status status = CheckJob(LibsvmJob(2), backend.get()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "test.svm:2")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "data.libsvm_slots")) << status;
}

TEST(JobCheckTest, NamesAMissingFileAndMissingFileLists) {
  auto backend = NewCpuBackend();
  JobConfig missing = LibsvmJob(3);
  missing.mutable_data()->add_train_files(::testing::TempDir() + "/absent.svm");
  absl::Status status = CheckJob(missing, backend.get()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "absent.svm")) << status;

  JobConfig no_test = LibsvmJob(3);
  no_test.mutable_data()->clear_test_files();
  EXPECT_TRUE(CheckJob(no_test, backend.get()).ok());
  JobCheckOptions evaluating;
  evaluating.needs_test_files = true;
  status = CheckJob(no_test, backend.get(), evaluating).status();
  EXPECT_TRUE(absl::StrContains(status.message(), "test files")) << status;

  JobConfig no_train = LibsvmJob(3);
  no_train.mutable_data()->clear_train_files();
  status = CheckJob(no_train, backend.get()).status();
  EXPECT_TRUE(absl::StrContains(status.message(), "train_files")) << status;
}

TEST(JobCheckTest, NamesAFormatThatDoesNotMatchTheDataAndABadModel) {
  auto backend = NewCpuBackend();
  JobConfig criteo = LibsvmJob(3);
  criteo.mutable_data()->set_format(DataConfig::CRITEO);  // libsvm lines are not Criteo's 40 columns
  absl::Status status = CheckJob(criteo, backend.get()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "train.svm:1")) << status;

  criteo.mutable_data()->set_skip_malformed(true);  // the job skips such lines: training decides
  EXPECT_TRUE(CheckJob(criteo, backend.get()).ok());

  JobConfig wide = LibsvmJob(3);
  wide.mutable_model()->set_embedding_dim(5000);
  status = CheckJob(wide, backend.get()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "embedding_dim")) << status;
}

}  // namespace
}  // namespace kestrel
