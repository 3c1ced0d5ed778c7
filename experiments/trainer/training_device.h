// Where a run trains: the kernels::Context for run.device (the CPU's thread pool, or a CUDA device's stream
// and caching allocator), the activation dtype for run.precision (FP32: f32; BF16: bf16 weights copies and
// activations over fp32 master weights), the device's name for the run's log, and the peak FLOP/s that MFU
// is measured against:
//   - run.peak_flops when it is set;
//   - on the CPU, the fp32 FMA peak of the run's threads, measured once per process
//     (kernels/cpu/peak_flops.h: AVX-512 or AVX2 FMA chains timed by thread CPU time, ~20 ms);
//   - on a GPU, the dense rate of the run's precision for a device named in GpuPeakFlops's table (bf16
//     tensor cores for BF16 runs, fp32 CUDA cores for FP32 runs); none for an unknown GPU (MFU is then 0).
// This file holds no CUDA header: the CUDA context lives behind a forward-declared holder and exists only in
// binaries built with the CUDA backend (LMF_WITH_CUDA).
#ifndef LMFORGE_EXPERIMENTS_TRAINER_TRAINING_DEVICE_H_
#define LMFORGE_EXPERIMENTS_TRAINER_TRAINING_DEVICE_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "base/thread_pool.h"
#include "config/run.pb.h"
#include "kernels/core/context.h"
#include "kernels/core/dtype.h"
#include "kernels/profile/cpu_op_profiler.h"

namespace lmf::experiments {

class TrainingDevice {
 public:
  // The device run.device names (run.cuda_device for CUDA) and the dtype run.precision names. Errors:
  // CUDA in a binary built without the CUDA backend (the message says how to build with it), a CUDA device
  // that cannot be opened (no driver, no such ordinal: the CUDA error), and what config::ValidateDevice
  // refuses (BF16 on the CPU, an unspecified device or precision, a negative run.cuda_device), in its
  // words. A CPU run's kernels split their work over `cpu_pool` (ThreadPool::Default() when null).
  static absl::StatusOr<std::unique_ptr<TrainingDevice>> Open(const config::RunConfig& run,
                                                              ThreadPool* cpu_pool = nullptr);
  ~TrainingDevice();
  TrainingDevice(const TrainingDevice&) = delete;
  TrainingDevice& operator=(const TrainingDevice&) = delete;

  const kernels::Context& context() const { return ctx_; }
  kernels::DType activations() const { return activations_; }
  // "CPU (2 threads)" or the GPU's name with its ordinal, e.g. "NVIDIA H200 (cuda:0)".
  const std::string& name() const { return name_; }
  // The peak FLOP/s for MFU (see the top of this file); nullopt for a GPU without a known peak and no
  // run.peak_flops.
  std::optional<double> peak_flops() const { return peak_flops_; }
  // Where peak_flops comes from, for the log: e.g. "run.peak_flops", "NVIDIA H200 dense bf16 peak".
  const std::string& peak_flops_source() const { return peak_flops_source_; }

  // The time of every op from StartOpProfile to FinishOpProfile: on CUDA the device time by events on the
  // stream (kernels/cuda/op_profiler.h), on the CPU the wall time of each op on the training thread
  // (kernels/profile/cpu_op_profiler.h). The table of FormatOpProfile per step of `steps`, how its times were
  // taken (one line) and its largest rows in one line ("Matmul 41.2%, ...").
  struct OpProfileReport {
    std::string table;
    std::string method;
    std::string largest;
  };
  absl::Status StartOpProfile();
  absl::StatusOr<OpProfileReport> FinishOpProfile(int steps);

 private:
  struct CudaHolder;  // the kernels::cuda::CudaContext of a CUDA run (training_device.cc)

  TrainingDevice();
  kernels::Context ctx_;
  kernels::DType activations_ = kernels::DType::kF32;
  std::string name_;
  std::optional<double> peak_flops_;
  std::string peak_flops_source_;
  std::unique_ptr<CudaHolder> cuda_;
  std::unique_ptr<kernels::CpuOpProfiler> cpu_profiler_;  // while an op profile of a CPU run runs
};

// Peak FLOP/s for MFU on the CPU: run.peak_flops when set, else the measured FMA peak of `num_threads`
// threads. `source`, when given, gets what the figure is, for the run's log.
double PeakFlops(const config::RunConfig& run, int num_threads, std::string* source = nullptr);

// The dense peak FLOP/s of a GPU, by the name the CUDA driver reports (cudaDeviceProp::name), for bf16
// (tensor cores) or fp32 (CUDA cores, no TF32): H200 and H100 SXM 989.4e12 / 66.9e12, H100 PCIe 756e12 /
// 51.2e12, A100 312e12 / 19.5e12 (NVIDIA's data sheets, without sparsity). nullopt for other devices,
// including the H100 NVL and H200 NVL cards (whose names contain H100 / H200 but whose peaks are lower).
std::optional<double> GpuPeakFlops(const std::string& device_name, config::RunConfig::Precision precision);

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_TRAINER_TRAINING_DEVICE_H_
