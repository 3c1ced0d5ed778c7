// cub::DeviceRadixSort::SortPairs for the CPU emulation (cuemu.h): a stable sort by the key bits
// [begin_bit, end_bit) after CUB's sign-bit flip of signed keys, which is what the radix sort computes. The
// temporary storage it asks for grows with the bit range, as CUB's does, so a caller that sizes it for a
// different range than it sorts is caught.
#ifndef LMFORGE_KERNELS_CUDA_EMULATION_FAKE_CUB_CUB_CUH_
#define LMFORGE_KERNELS_CUDA_EMULATION_FAKE_CUB_CUB_CUH_

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <type_traits>
#include <vector>

#include "cuda_runtime.h"

namespace cub {

struct DeviceRadixSort {
  static size_t TempBytes(int begin_bit, int end_bit) {
    return 4096 + 16 * static_cast<size_t>(end_bit - begin_bit);
  }

  template <typename K, typename V>
  static cudaError_t SortPairs(void* temp, size_t& temp_bytes, const K* keys_in, K* keys_out,
                               const V* values_in, V* values_out, int n, int begin_bit = 0,
                               int end_bit = sizeof(K) * 8, cudaStream_t = nullptr) {
    if (temp == nullptr) {
      temp_bytes = TempBytes(begin_bit, end_bit);
      return cudaSuccess;
    }
    if (temp_bytes < TempBytes(begin_bit, end_bit)) return cudaErrorMemoryAllocation;
    ::cuemu::DeviceWork work;  // device memory (the GPU tests' fake runtime fences it off otherwise)
    using U = typename std::make_unsigned<K>::type;
    constexpr int kBits = sizeof(K) * 8;
    const U flip = std::is_signed<K>::value ? static_cast<U>(U(1) << (kBits - 1)) : U(0);
    const U mask = end_bit >= kBits ? static_cast<U>(~U(0)) : static_cast<U>((U(1) << end_bit) - 1);
    auto digits = [&](K k) { return static_cast<U>((static_cast<U>(k) ^ flip) & mask) >> begin_bit; };
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return digits(keys_in[a]) < digits(keys_in[b]); });
    std::vector<K> keys(n);
    std::vector<V> values(n);
    for (int i = 0; i < n; ++i) keys[i] = keys_in[order[i]], values[i] = values_in[order[i]];
    std::copy(keys.begin(), keys.end(), keys_out);
    std::copy(values.begin(), values.end(), values_out);
    return cudaSuccess;
  }
};

}  // namespace cub

#endif  // LMFORGE_KERNELS_CUDA_EMULATION_FAKE_CUB_CUB_CUH_
