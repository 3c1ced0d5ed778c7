// Helpers shared by the checks of the CPU emulation of the CUDA kernels (emulation_check.cc,
// attention_check.cc; built by emulated_test.sh): host memory standing in for device memory, NaN-poisoned
// buffers in f32 or bf16, and the comparison that prints one "ok"/"FAIL" line per check and counts failures.
#ifndef LMFORGE_KERNELS_CUDA_EMULATION_CHECK_UTIL_H_
#define LMFORGE_KERNELS_CUDA_EMULATION_CHECK_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/core/context.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/caching_allocator.h"

namespace lmf::kernels {

namespace kc = ::lmf::kernels::cuda;

// "Device" memory for the scratch allocations of the kernels: host memory, poisoned with 0xff (NaN).
class HostBackend final : public kc::DeviceMemoryBackend {
 public:
  absl::StatusOr<void*> Malloc(size_t bytes) override {
    void* p = nullptr;
    if (posix_memalign(&p, 256, bytes) != 0) return absl::ResourceExhaustedError("host memory");
    std::memset(p, 0xff, bytes);
    return p;
  }
  void Free(void* p) override { std::free(p); }
  kc::EventHandle RecordEvent(kc::StreamHandle) override { return nullptr; }
  bool EventCompleted(kc::EventHandle) override { return true; }
  void DestroyEvent(kc::EventHandle) override {}
  void SynchronizeDevice() override {}
  Device device() const override { return Device::Cuda(0); }
};

inline int failures = 0;

inline std::vector<float> RandomNormal(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<float> RoundTo(std::vector<float> v, DType dt) {
  if (dt == DType::kBF16)
    for (float& x : v) x = BF16ToFloat(FloatToBF16(x));
  return v;
}

// n elements of f32 or bf16 in their own heap block of exactly the bytes needed (so that AddressSanitizer
// sees any read or write past the end), `offset` elements past a 64-byte boundary (offset 1: the kernels
// must take their one-element paths), poisoned with 0xff (NaN).
class Buf {
 public:
  Buf(int64_t n, DType dt, int offset = 0) : dt_(dt), n_(n), offset_(offset) {
    const size_t bytes = (offset + std::max<int64_t>(n, 1)) * DTypeSize(dt);
    if (posix_memalign(&base_, 64, bytes) != 0) std::abort();
    std::memset(base_, 0xff, bytes);
  }
  Buf(const std::vector<float>& v, DType dt, int offset = 0)
      : Buf(static_cast<int64_t>(v.size()), dt, offset) {
    for (int64_t i = 0; i < n_; ++i) {
      if (dt_ == DType::kF32) {
        as<float>()[i] = v[i];
      } else {
        as<uint16_t>()[i] = FloatToBF16(v[i]);
      }
    }
  }
  Buf(Buf&& o) noexcept : base_(o.base_), dt_(o.dt_), n_(o.n_), offset_(o.offset_) { o.base_ = nullptr; }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  ~Buf() { std::free(base_); }

  void* get() const { return static_cast<char*>(base_) + offset_ * DTypeSize(dt_); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(get());
  }
  std::vector<float> floats() const {
    std::vector<float> out(n_);
    for (int64_t i = 0; i < n_; ++i)
      out[i] = dt_ == DType::kF32 ? as<float>()[i] : BF16ToFloat(as<uint16_t>()[i]);
    return out;
  }

 private:
  void* base_ = nullptr;
  DType dt_;
  int64_t n_;
  int offset_;
};

// |got - want| <= atol + rtol |want| everywhere (NaN fails); negative tolerances pick the dtype's default.
inline void Check(const std::string& what, DType dt, const std::vector<float>& got,
                  const std::vector<float>& want, double rtol = -1, double atol = -1) {
  if (rtol < 0) rtol = dt == DType::kF32 ? 2e-5 : 1.6e-2;
  if (atol < 0) atol = dt == DType::kF32 ? 2e-5 : 1e-2;
  const std::string name = what + " [" + DTypeName(dt) + "]";
  if (got.size() != want.size()) {
    ++failures;
    std::printf("FAIL %s: %zu values, want %zu\n", name.c_str(), got.size(), want.size());
    return;
  }
  int64_t bad = 0, worst = -1;
  double worst_excess = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]), tol = atol + rtol * std::fabs(want[i]);
    if (d <= tol || got[i] == want[i]) continue;
    ++bad;
    if (!(d - tol <= worst_excess)) worst_excess = d - tol, worst = static_cast<int64_t>(i);
  }
  if (bad == 0) {
    std::printf("ok   %s (%zu values)\n", name.c_str(), got.size());
    return;
  }
  ++failures;
  std::printf("FAIL %s: %ld of %zu differ, worst [%ld] %g vs %g\n", name.c_str(), static_cast<long>(bad),
              got.size(), static_cast<long>(worst), got[worst], want[worst]);
}

inline void ExpectOk(const std::string& what, const absl::Status& s) {
  if (s.ok()) return;
  ++failures;
  std::printf("FAIL %s: %s\n", what.c_str(), s.ToString().c_str());
}

// attention_check.cc: the bf16 and f32 attention kernels and the column sums on the emulated device `gpu`.
void CheckAttention(const Context& gpu);
void CheckColumnSum(const Context& gpu);

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_CUDA_EMULATION_CHECK_UTIL_H_
