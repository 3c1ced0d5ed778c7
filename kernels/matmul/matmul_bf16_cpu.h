// The CPU backend's bf16 matmul (matmul_bf16_cpu.cc), called by matmul_cpu.cc's entry points when dtype is
// kBF16; internal to //kernels/matmul.
#ifndef LMFORGE_KERNELS_MATMUL_MATMUL_BF16_CPU_H_
#define LMFORGE_KERNELS_MATMUL_MATMUL_BF16_CPU_H_

#include "kernels/matmul/matmul.h"

namespace lmf::kernels::cpu::internal {

void MatmulBF16(const Context& ctx, const MatmulParams& p, const MatmulEpilogueParams& e);
void MatmulBackwardBF16(const Context& ctx, const MatmulBackwardParams& p);

}  // namespace lmf::kernels::cpu::internal

#endif  // LMFORGE_KERNELS_MATMUL_MATMUL_BF16_CPU_H_
