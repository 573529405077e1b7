// GPU test (tagged "gpu"): runs a kernel and checks it on the host where a GPU is present, skips elsewhere.
#include "common/cuda_device.h"

#include "gtest/gtest.h"

namespace kestrel {
namespace {

TEST(CudaDeviceTest, KernelComputesWhatTheHostExpects) {
  if (CudaDeviceCount() == 0) {
    GTEST_SKIP() << "no GPU here (" << DescribeCudaDevices() << "); CUDA backend built: " << CudaBuilt();
  }
  for (int d = 0; d < CudaDeviceCount(); ++d) EXPECT_TRUE(CheckCudaDevice(d).ok()) << CheckCudaDevice(d);
}

TEST(CudaDeviceTest, MissingDeviceIsAFailedPrecondition) {
  EXPECT_EQ(CheckCudaDevice(CudaDeviceCount()).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(DescribeCudaDevices().empty());
}

}  // namespace
}  // namespace kestrel
