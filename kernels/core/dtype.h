// Element types and devices of lmforge tensors. f32 is what the CPU kernels compute in today; bf16 and
// f16 are storage types for the CUDA kernels (issue 7); the fp8 formats are named so that a tensor can
// already describe them. Nothing here depends on CUDA.
#ifndef LMFORGE_KERNELS_CORE_DTYPE_H_
#define LMFORGE_KERNELS_CORE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <ostream>

namespace lmf::kernels {

enum class DType : uint8_t {
  kF32,
  kBF16,
  kF16,
  kF8E4M3,
  kF8E5M2,
  kI32,  // token ids, targets
  kI64,
  kU8,  // masks (0 = masked out, nonzero = attend)
};

// Bytes per element.
constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kU8:
      return 1;
    case DType::kI64:
      return 8;
  }
  return 0;
}

const char* DTypeName(DType t);
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << DTypeName(t); }

enum class DeviceType : uint8_t { kCpu, kCuda };

// A device: its kind and, for CUDA, the ordinal.
struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;

  static constexpr Device Cpu() { return Device{DeviceType::kCpu, 0}; }
  static constexpr Device Cuda(int index) { return Device{DeviceType::kCuda, index}; }
  bool is_cpu() const { return type == DeviceType::kCpu; }
  bool is_cuda() const { return type == DeviceType::kCuda; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

std::ostream& operator<<(std::ostream& os, const Device& d);

// bf16 <-> f32 (round to nearest even; NaN stays NaN). For tests and host-side conversions.
inline uint16_t FloatToBF16(float f) {
  uint32_t bits;
  __builtin_memcpy(&bits, &f, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}
inline float BF16ToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_CORE_DTYPE_H_
