// CudaContext: what the CUDA kernels need on one device, owned in one place: a non-blocking stream, a
// cuBLASLt handle with its workspace, and the caching device allocator (backed by cudaMalloc/cudaFree and
// CUDA events). context() gives the plain kernels::Context the op functions take (device, stream, allocator).
//
//   absl::StatusOr<std::unique_ptr<CudaContext>> cc = CudaContext::Create(/*device=*/0);
//   lmf::kernels::cuda::RmsNormForward((*cc)->context(), params);
#ifndef LMFORGE_KERNELS_CUDA_CUDA_CONTEXT_H_
#define LMFORGE_KERNELS_CUDA_CUDA_CONTEXT_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <atomic>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/core/context.h"
#include "kernels/cuda/caching_allocator.h"

namespace lmf::kernels::cuda {

// cudaMalloc/cudaFree and events on one device.
class CudaMemoryBackend final : public DeviceMemoryBackend {
 public:
  explicit CudaMemoryBackend(int device) : device_(device) {}
  absl::StatusOr<void*> Malloc(size_t bytes) override;
  void Free(void* ptr) override;
  EventHandle RecordEvent(StreamHandle stream) override;
  bool EventCompleted(EventHandle event) override;
  void DestroyEvent(EventHandle event) override;
  void SynchronizeDevice() override;
  Device device() const override { return Device::Cuda(device_); }

 private:
  int device_;
};

// Number of CUDA devices visible (0 when there is no driver or no GPU).
int CudaDeviceCount();

class CudaContext {
 public:
  static constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;  // cuBLASLt's recommendation for Hopper

  static absl::StatusOr<std::unique_ptr<CudaContext>> Create(int device);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  Context context() const;
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cublasLtHandle_t cublas_lt() const { return lt_; }
  void* cublas_workspace() const { return workspace_; }
  CachingAllocator& allocator() { return *allocator_; }
  const cudaDeviceProp& properties() const { return props_; }
  // GEMM algorithm choice (kernels/matmul): off (the default), each new GEMM geometry runs cuBLASLt's
  // heuristic's first algorithm, as PyTorch does; on, the first call of each geometry times up to
  // kernels/matmul's candidate count of the heuristic's algorithms on its own operands (output to scratch;
  // the stream waits for the timing) and keeps the fastest. Algorithms may round differently, so a tuned
  // run's results are reproducible within the process but may differ in the last bits from another run's
  // that timed a different winner.
  void set_gemm_autotune(bool on) { gemm_autotune_.store(on, std::memory_order_relaxed); }
  bool gemm_autotune() const { return gemm_autotune_.load(std::memory_order_relaxed); }
  absl::Status Synchronize() const;

 private:
  CudaContext() = default;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  cudaDeviceProp props_{};
  std::atomic<bool> gemm_autotune_{false};
  std::unique_ptr<CudaMemoryBackend> backend_;
  std::unique_ptr<CachingAllocator> allocator_;
};

// The cuBLASLt handle and workspace for a Context's device, registered by CudaContext::Create (the plain
// Context carries only the stream). Null when no CudaContext exists for that device.
const CudaContext* CudaContextForDevice(int device);

}  // namespace lmf::kernels::cuda

#endif  // LMFORGE_KERNELS_CUDA_CUDA_CONTEXT_H_
