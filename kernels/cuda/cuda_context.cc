// CudaContext and the cudaMalloc-backed memory backend; see cuda_context.h.
#include "kernels/cuda/cuda_context.h"

#include <mutex>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/cuda/cuda_check.h"

namespace lmf::kernels::cuda {
namespace {

constexpr int kMaxDevices = 64;
std::mutex registry_mu;
const CudaContext* registry[kMaxDevices] = {};

}  // namespace

absl::StatusOr<void*> CudaMemoryBackend::Malloc(size_t bytes) {
  void* ptr = nullptr;
  const cudaError_t e = cudaMalloc(&ptr, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky-free error so later launches do not report it
    return absl::ResourceExhaustedError(
        absl::StrCat("cudaMalloc(", bytes, ") on device ", device_, ": out of memory"));
  }
  LMF_CUDA_RETURN_IF_ERROR(e);
  return ptr;
}

void CudaMemoryBackend::Free(void* ptr) {
  const cudaError_t e = cudaFree(ptr);
  LMF_CHECK(e == cudaSuccess) << "cudaFree: " << cudaGetErrorString(e);
}

EventHandle CudaMemoryBackend::RecordEvent(StreamHandle stream) {
  cudaEvent_t ev = nullptr;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  LMF_CHECK(e == cudaSuccess) << "cudaEventCreate: " << cudaGetErrorString(e);
  e = cudaEventRecord(ev, static_cast<cudaStream_t>(stream));
  LMF_CHECK(e == cudaSuccess) << "cudaEventRecord: " << cudaGetErrorString(e);
  return ev;
}

bool CudaMemoryBackend::EventCompleted(EventHandle event) {
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (e == cudaErrorNotReady) return false;
  LMF_CHECK(e == cudaSuccess) << "cudaEventQuery: " << cudaGetErrorString(e);
  return true;
}

void CudaMemoryBackend::DestroyEvent(EventHandle event) { cudaEventDestroy(static_cast<cudaEvent_t>(event)); }

void CudaMemoryBackend::SynchronizeDevice() {
  const cudaError_t e = cudaDeviceSynchronize();
  LMF_CHECK(e == cudaSuccess) << "cudaDeviceSynchronize: " << cudaGetErrorString(e);
}

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

absl::StatusOr<std::unique_ptr<CudaContext>> CudaContext::Create(int device) {
  if (device < 0 || device >= kMaxDevices)
    return absl::InvalidArgumentError(absl::StrCat("CUDA device ", device));
  std::unique_ptr<CudaContext> c(new CudaContext());
  c->device_ = device;
  LMF_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  LMF_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&c->props_, device));
  LMF_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&c->stream_, cudaStreamNonBlocking));
  LMF_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&c->lt_));
  c->backend_ = std::make_unique<CudaMemoryBackend>(device);
  c->allocator_ = std::make_unique<CachingAllocator>(c->backend_.get(), c->stream_);
  absl::StatusOr<void*> ws = c->allocator_->AllocateOnStream(kCublasWorkspaceBytes, c->stream_);
  if (!ws.ok()) return ws.status();
  c->workspace_ = *ws;
  std::lock_guard<std::mutex> lock(registry_mu);
  registry[device] = c.get();
  return c;
}

CudaContext::~CudaContext() {
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    if (registry[device_] == this) registry[device_] = nullptr;
  }
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (workspace_ != nullptr) allocator_->Free(workspace_);
  allocator_.reset();
  if (lt_ != nullptr) cublasLtDestroy(lt_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Context CudaContext::context() const {
  Context ctx;
  ctx.device = Device::Cuda(device_);
  ctx.stream = stream_;
  ctx.pool = nullptr;
  ctx.allocator = allocator_.get();
  return ctx;
}

absl::Status CudaContext::Synchronize() const {
  LMF_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

const CudaContext* CudaContextForDevice(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  std::lock_guard<std::mutex> lock(registry_mu);
  return registry[device];
}

}  // namespace lmf::kernels::cuda
