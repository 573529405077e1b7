#include "common/held_reads.h"

#include "gtest/gtest.h"

namespace kestrel {
namespace {

TEST(HeldReadsTest, TheBoundaryIsReadBackAlsoInsideALongerMessage) {
  const absl::Status held = ReadsHeldAt(1234);
  EXPECT_TRUE(absl::IsAborted(held));
  EXPECT_EQ(HeldClockOf(held), 1234);
  const absl::Status annotated =
      absl::AbortedError(absl::StrCat("server 1 (step of clock 1233): ", held.message()));
  EXPECT_EQ(HeldClockOf(annotated), 1234);
}

TEST(HeldReadsTest, OtherStatusesNameNoBoundary) {
  EXPECT_EQ(HeldClockOf(absl::OkStatus()), std::nullopt);
  EXPECT_EQ(HeldClockOf(absl::AbortedError("the job rolled back: rejoin")), std::nullopt);
  // The same words under another code are not the servers' answer.
  EXPECT_EQ(HeldClockOf(absl::UnavailableError(ReadsHeldAt(5).message())), std::nullopt);
  EXPECT_EQ(HeldClockOf(absl::AbortedError("reads held at clock x")), std::nullopt);
  EXPECT_EQ(HeldClockOf(absl::AbortedError("reads held at clock 99999999999999999999999")), std::nullopt);
}

}  // namespace
}  // namespace kestrel
