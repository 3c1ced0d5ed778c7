// The device and precision a run trains on, and its MFU peak (see training_device.h).
#include "experiments/trainer/training_device.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "config/validation.h"
#include "kernels/cpu/peak_flops.h"

#if LMF_WITH_CUDA
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/op_profiler.h"
#endif

namespace lmf::experiments {

struct TrainingDevice::CudaHolder {
#if LMF_WITH_CUDA
  std::unique_ptr<kernels::cuda::CudaContext> context;
  std::unique_ptr<kernels::cuda::OpProfiler> profiler;  // while an op profile runs
#endif
};

TrainingDevice::TrainingDevice() = default;
TrainingDevice::~TrainingDevice() = default;

double PeakFlops(const config::RunConfig& run, int num_threads, std::string* source) {
  if (run.peak_flops() > 0) {
    if (source != nullptr) *source = "run.peak_flops";
    return run.peak_flops();
  }
  const kernels::CpuPeak& peak = kernels::CpuFmaPeak(num_threads);
  if (source != nullptr) {
    *source = absl::StrFormat("measured %s FMA peak, %d x %.0f GFLOP/s", peak.isa, peak.measured_threads,
                              peak.flops_per_second / peak.measured_threads / 1e9);
  }
  return peak.flops_per_second;
}

std::optional<double> GpuPeakFlops(const std::string& device_name, config::RunConfig::Precision precision) {
  struct Peak {
    const char* name_part;
    const char* excluded_part;  // a variant with another peak ("" when none)
    double bf16, fp32;
  };
  static constexpr Peak kPeaks[] = {
      {"H200", "", 989.4e12, 66.9e12},
      {"H100", "PCIe", 989.4e12, 66.9e12},  // SXM (the driver names it e.g. "NVIDIA H100 80GB HBM3")
      {"H100", "", 756.0e12, 51.2e12},      // PCIe
      {"A100", "", 312.0e12, 19.5e12},
  };
  // The NVL cards (H100 NVL, H200 NVL: PCIe boards at lower power and clocks) have other peaks than the SXM
  // parts whose names they contain; they are not in the table, so they get none rather than the SXM's.
  if (absl::StrContains(device_name, "NVL")) return std::nullopt;
  for (const Peak& peak : kPeaks) {
    if (!absl::StrContains(device_name, peak.name_part)) continue;
    if (peak.excluded_part[0] != '\0' && absl::StrContains(device_name, peak.excluded_part)) continue;
    switch (precision) {
      case config::RunConfig::BF16:
        return peak.bf16;
      case config::RunConfig::FP32:
        return peak.fp32;
      default:
        return std::nullopt;
    }
  }
  return std::nullopt;
}

absl::Status TrainingDevice::StartOpProfile() {
  if (cpu_profiler_ != nullptr) return absl::FailedPreconditionError("an op profile is already running");
#if LMF_WITH_CUDA
  if (cuda_ != nullptr) {
    if (cuda_->profiler != nullptr) return absl::FailedPreconditionError("an op profile is already running");
    absl::StatusOr<std::unique_ptr<kernels::cuda::OpProfiler>> profiler = kernels::cuda::OpProfiler::Start(ctx_);
    if (!profiler.ok()) return profiler.status();
    cuda_->profiler = *std::move(profiler);
    return absl::OkStatus();
  }
#endif
  absl::StatusOr<std::unique_ptr<kernels::CpuOpProfiler>> profiler = kernels::CpuOpProfiler::Start(ctx_);
  if (!profiler.ok()) return profiler.status();
  cpu_profiler_ = *std::move(profiler);
  return absl::OkStatus();
}

absl::StatusOr<TrainingDevice::OpProfileReport> TrainingDevice::FinishOpProfile(int steps) {
  absl::StatusOr<kernels::OpProfile> profile = absl::FailedPreconditionError("no op profile is running");
  std::string method;
#if LMF_WITH_CUDA
  if (cuda_ != nullptr && cuda_->profiler != nullptr) {
    profile = cuda_->profiler->Finish();
    cuda_->profiler.reset();
    method =
        "an op's time is the stream's from the previous op's end to its own end (idle time before it included): "
        "kernels/cuda/op_profiler.h";
  }
#endif
  if (cpu_profiler_ != nullptr) {
    profile = cpu_profiler_->Finish();
    cpu_profiler_.reset();
    method =
        "an op's time is its own wall time on the training thread; outside the ops is the host's work between "
        "them (data, the model's loops): kernels/profile/cpu_op_profiler.h";
  }
  if (!profile.ok()) return profile.status();
  return OpProfileReport{kernels::FormatOpProfile(*profile, steps), method, kernels::FormatLargestOps(*profile, 4)};
}

absl::StatusOr<std::unique_ptr<TrainingDevice>> TrainingDevice::Open(const config::RunConfig& run,
                                                                     ThreadPool* cpu_pool) {
  config::ConfigErrors errors;  // an unspecified device or precision
  config::ValidateDevice(run, &errors);
  if (!errors.empty()) return errors.ToStatus("");
  std::unique_ptr<TrainingDevice> device(new TrainingDevice());
  const bool bf16 = run.precision() == config::RunConfig::BF16;
  device->activations_ = bf16 ? kernels::DType::kBF16 : kernels::DType::kF32;
  const char* precision_name = bf16 ? "bf16" : "fp32";
  switch (run.device()) {
    case config::RunConfig::CPU: {
      device->ctx_ = cpu_pool != nullptr ? kernels::Context::Cpu(cpu_pool) : kernels::Context::Cpu();
      device->name_ = absl::StrCat("CPU (", device->ctx_.num_threads(), " threads)");
      // BF16 too: the CPU's bf16 ops compute in fp32 (kernels/cpu/bf16.h), so the fp32 FMA peak is the bound.
      device->peak_flops_ = PeakFlops(run, device->ctx_.num_threads(), &device->peak_flops_source_);
      return device;
    }
    default: {  // CUDA, the only other device ValidateDevice accepts
#if LMF_WITH_CUDA
      absl::StatusOr<std::unique_ptr<kernels::cuda::CudaContext>> cuda =
          kernels::cuda::CudaContext::Create(run.cuda_device());
      if (!cuda.ok()) {
        return absl::FailedPreconditionError(absl::StrCat("run.device=CUDA: cannot open CUDA device ",
                                                          run.cuda_device(), ": ", cuda.status().message()));
      }
      device->cuda_ = std::make_unique<CudaHolder>();
      device->cuda_->context = *std::move(cuda);
      device->cuda_->context->set_gemm_autotune(run.gemm_autotune());
      device->ctx_ = device->cuda_->context->context();
      const std::string gpu_name = device->cuda_->context->properties().name;
      device->name_ = absl::StrCat(gpu_name, " (cuda:", run.cuda_device(), ")");
      if (run.peak_flops() > 0) {
        device->peak_flops_ = run.peak_flops();
        device->peak_flops_source_ = "run.peak_flops";
      } else if (std::optional<double> peak = GpuPeakFlops(gpu_name, run.precision()); peak.has_value()) {
        device->peak_flops_ = *peak;
        device->peak_flops_source_ = absl::StrCat(gpu_name, " dense ", precision_name, " peak");
      } else {
        device->peak_flops_source_ = absl::StrCat("none: no known ", precision_name, " peak for ", gpu_name,
                                                  "; set run.peak_flops to log MFU (MFU is logged as 0)");
      }
      return device;
#else
      (void)precision_name;
      return absl::FailedPreconditionError(
          "run.device=CUDA: this binary was built without the CUDA backend (under --config=nocuda, or where "
          "bazel found no CUDA toolkit); build it on a machine with the CUDA toolkit, without "
          "--config=nocuda, "
          "e.g. ./bazelw build //experiments:train");
#endif
    }
  }
}

}  // namespace lmf::experiments
