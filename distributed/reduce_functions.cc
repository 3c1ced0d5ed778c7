// HostReduce (see reduce_functions.h).
#include "distributed/reduce_functions.h"

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/core/dtype.h"

namespace lmf::distributed {
namespace {

template <typename T>
T Combine(T a, T b, ReduceOp op) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;  // wraps, where a signed overflow would be undefined
    if (op == ReduceOp::kSum) return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    if (op == ReduceOp::kSum) return a + b;
    return std::fmax(a, b);  // as NCCL's max: a NaN only where both are (collectives.h)
  }
  return a > b ? a : b;
}

template <typename T, ReduceOp kOp>
void Reduce(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = Combine(x[i], y[i], kOp);
}

template <ReduceOp kOp>
void ReduceBF16(void* out, const void* a, const void* b, size_t n) {
  uint16_t* o = static_cast<uint16_t*>(out);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) {
    o[i] = kernels::FloatToBF16(Combine(kernels::BF16ToFloat(x[i]), kernels::BF16ToFloat(y[i]), kOp));
  }
}

template <ReduceOp kOp>
HostReduceFunction ForType(DataType type) {
  switch (type) {
    case DataType::kF32:
      return &Reduce<float, kOp>;
    case DataType::kF64:
      return &Reduce<double, kOp>;
    case DataType::kBF16:
      return &ReduceBF16<kOp>;
    case DataType::kI32:
      return &Reduce<int32_t, kOp>;
    case DataType::kI64:
      return &Reduce<int64_t, kOp>;
    case DataType::kU8:
      return &Reduce<uint8_t, kOp>;
  }
  return nullptr;
}

}  // namespace

HostReduceFunction HostReduce(DataType type, ReduceOp op) {
  return op == ReduceOp::kSum ? ForType<ReduceOp::kSum>(type) : ForType<ReduceOp::kMax>(type);
}

}  // namespace lmf::distributed
