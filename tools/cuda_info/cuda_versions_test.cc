// The CUDA libraries loaded at run time agree with the headers we compiled against (no GPU needed).
#include "tools/cuda_info/cuda_versions.h"

#include "gtest/gtest.h"

namespace lmf::cuda_info {
namespace {

TEST(CudaVersions, LoadedLibrariesMatchHeaders) {
  const CudaReport report = Probe();
  ASSERT_EQ(report.libraries.size(), 4u);
  for (const LibraryVersion& lib : report.libraries) {
    EXPECT_TRUE(lib.compatible) << lib.library << ": headers " << lib.compiled << ", loaded " << lib.runtime
                                << " (" << lib.note << ")";
  }
  EXPECT_NE(Format(report).find("nccl"), std::string::npos);
}

TEST(CudaVersions, DeviceListMatchesCount) {
  const CudaReport report = Probe();
  EXPECT_EQ(static_cast<int>(report.devices.size()), report.device_count);
}

}  // namespace
}  // namespace lmf::cuda_info
