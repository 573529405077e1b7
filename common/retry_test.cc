#include "common/retry.h"

#include "gtest/gtest.h"

namespace kestrel {
namespace {

TEST(RetryScopeTest, EveryCodeHasOneMeaning) {
  EXPECT_EQ(RetryScopeOf(absl::OkStatus()), RetryScope::kNone);
  EXPECT_EQ(RetryScopeOf(absl::UnavailableError("")), RetryScope::kCall);
  EXPECT_EQ(RetryScopeOf(absl::DeadlineExceededError("")), RetryScope::kCall);
  EXPECT_EQ(RetryScopeOf(absl::AbortedError("")), RetryScope::kOperation);
  EXPECT_EQ(RetryScopeOf(absl::CancelledError("")), RetryScope::kOperation);
  for (const absl::Status& fix : {absl::InvalidArgumentError(""), absl::FailedPreconditionError(""),
                                  absl::NotFoundError(""), absl::AlreadyExistsError(""),
                                  absl::PermissionDeniedError(""), absl::OutOfRangeError(""),
                                  absl::ResourceExhaustedError(""), absl::DataLossError(""),
                                  absl::InternalError(""), absl::UnimplementedError("")}) {
    EXPECT_EQ(RetryScopeOf(fix), RetryScope::kNone) << fix;
    EXPECT_FALSE(IsTransient(fix)) << fix;
  }
  EXPECT_TRUE(IsTransient(absl::UnavailableError("")));
  EXPECT_FALSE(IsTransient(absl::AbortedError("")));
}

}  // namespace
}  // namespace kestrel
