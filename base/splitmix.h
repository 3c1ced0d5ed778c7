// SplitMix64's output for state `x` (Steele, Lea, Flood 2014): a bijective 64-bit mix with good avalanche,
// the one counter-based hash behind lmforge's seeded draws (parameter init, batch order, sampling, MoE
// gating noise, on the host and in CUDA kernels), so that a draw depends only on its key and never on the
// order draws are made in.
#ifndef LMFORGE_BASE_SPLITMIX_H_
#define LMFORGE_BASE_SPLITMIX_H_

#include <cstdint>

#include "base/host_device.h"

namespace lmf {

LMF_HOST_DEVICE inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace lmf

#endif  // LMFORGE_BASE_SPLITMIX_H_
