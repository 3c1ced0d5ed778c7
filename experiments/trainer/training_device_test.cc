// The training device: the CPU context and its MFU estimate, the errors for runs that cannot start (CUDA in a
// binary without the CUDA backend or on a machine without a GPU), and the GPU peak table.
#include "experiments/trainer/training_device.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/peak_flops.h"

namespace lmf::experiments {
namespace {

config::RunConfig RunOn(config::RunConfig::Device device, config::RunConfig::Precision precision) {
  config::RunConfig run;
  run.set_device(device);
  run.set_precision(precision);
  return run;
}

TEST(TrainingDevice, CpuFp32UsesTheThreadPoolAndTheMeasuredFmaPeak) {
  auto device = TrainingDevice::Open(RunOn(config::RunConfig::CPU, config::RunConfig::FP32));
  ASSERT_TRUE(device.ok()) << device.status();
  const kernels::Context& ctx = (*device)->context();
  EXPECT_TRUE(ctx.device.is_cpu());
  EXPECT_EQ((*device)->activations(), kernels::DType::kF32);
  EXPECT_EQ((*device)->name(), "CPU (" + std::to_string(ctx.num_threads()) + " threads)");
  ASSERT_TRUE((*device)->peak_flops().has_value());
  const kernels::CpuPeak& measured = kernels::CpuFmaPeak(ctx.num_threads());
  EXPECT_EQ(*(*device)->peak_flops(), measured.flops_per_second);
  EXPECT_GT(measured.flops_per_second, 0);
  EXPECT_TRUE(absl::StartsWith(
      (*device)->peak_flops_source(),
      absl::StrCat("measured ", measured.isa, " FMA peak, ", measured.measured_threads, " x ")))
      << (*device)->peak_flops_source();
}

TEST(TrainingDevice, RunPeakFlopsOverridesTheEstimate) {
  config::RunConfig run = RunOn(config::RunConfig::CPU, config::RunConfig::FP32);
  run.set_peak_flops(1.5e12);
  auto device = TrainingDevice::Open(run);
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ((*device)->peak_flops(), 1.5e12);
  EXPECT_EQ((*device)->peak_flops_source(), "run.peak_flops");
  EXPECT_EQ(PeakFlops(run, 4), 1.5e12);
}

// The CPU's bf16 ops store bf16 and compute in fp32 (kernels/cpu/bf16.h), so MFU keeps the fp32 FMA peak.
TEST(TrainingDevice, CpuBf16StoresBf16ActivationsAndKeepsTheMeasuredFmaPeak) {
  auto device = TrainingDevice::Open(RunOn(config::RunConfig::CPU, config::RunConfig::BF16));
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_TRUE((*device)->context().device.is_cpu());
  EXPECT_EQ((*device)->activations(), kernels::DType::kBF16);
  ASSERT_TRUE((*device)->peak_flops().has_value());
  EXPECT_EQ(*(*device)->peak_flops(), kernels::CpuFmaPeak((*device)->context().num_threads()).flops_per_second);
}

TEST(TrainingDevice, UnspecifiedPrecisionOrDeviceIsAnError) {
  auto precision =
      TrainingDevice::Open(RunOn(config::RunConfig::CPU, config::RunConfig::PRECISION_UNSPECIFIED));
  EXPECT_EQ(precision.status().message(),
            "run.precision must not be an UNSPECIFIED value");
  auto device = TrainingDevice::Open(RunOn(config::RunConfig::DEVICE_UNSPECIFIED, config::RunConfig::FP32));
  EXPECT_EQ(device.status().message(), "run.device must not be an UNSPECIFIED value");
}

TEST(TrainingDevice, CudaWithoutABackendOrADeviceSaysWhy) {
  auto device = TrainingDevice::Open(RunOn(config::RunConfig::CUDA, config::RunConfig::BF16));
#if LMF_WITH_CUDA
  // Built with the backend: this machine may or may not have a GPU; without one, the CUDA error is named.
  if (device.ok()) {
    EXPECT_TRUE((*device)->context().device.is_cuda());
    EXPECT_EQ((*device)->activations(), kernels::DType::kBF16);
    EXPECT_TRUE(absl::StrContains((*device)->name(), "(cuda:0)")) << (*device)->name();
  } else {
    EXPECT_EQ(device.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(absl::StartsWith(device.status().message(), "run.device=CUDA: cannot open CUDA device 0: "))
        << device.status();
  }
#else
  ASSERT_FALSE(device.ok());
  EXPECT_TRUE(absl::StartsWith(device.status().message(),
                               "run.device=CUDA: this binary was built without the CUDA backend"))
      << device.status();
  EXPECT_TRUE(absl::StrContains(device.status().message(), "without --config=nocuda")) << device.status();
#endif
}

TEST(GpuPeakFlops, KnownDevicesByDriverName) {
  EXPECT_EQ(GpuPeakFlops("NVIDIA H200", config::RunConfig::BF16), 989.4e12);
  EXPECT_EQ(GpuPeakFlops("NVIDIA H200", config::RunConfig::FP32), 66.9e12);
  EXPECT_EQ(GpuPeakFlops("NVIDIA H100 80GB HBM3", config::RunConfig::BF16), 989.4e12);
  EXPECT_EQ(GpuPeakFlops("NVIDIA H100 PCIe", config::RunConfig::BF16), 756e12);
  EXPECT_EQ(GpuPeakFlops("NVIDIA A100-SXM4-80GB", config::RunConfig::BF16), 312e12);
  EXPECT_EQ(GpuPeakFlops("NVIDIA A100-SXM4-80GB", config::RunConfig::FP32), 19.5e12);
  EXPECT_EQ(GpuPeakFlops("NVIDIA GeForce RTX 4090", config::RunConfig::BF16), std::nullopt);
  // The NVL cards are other parts than the SXM ones their names contain: no peak, not the SXM's.
  EXPECT_EQ(GpuPeakFlops("NVIDIA H100 NVL", config::RunConfig::BF16), std::nullopt);
  EXPECT_EQ(GpuPeakFlops("NVIDIA H200 NVL", config::RunConfig::FP32), std::nullopt);
}

}  // namespace
}  // namespace lmf::experiments
