// Which vector ISA the CPU kernels' hot loops run. The build targets x86-64-v3 (AVX2 + FMA); the loops that
// gain from wider vectors (the small GEMM tiles inside attention: vec::SmallGemm) also have AVX-512 forms,
// compiled per function (`LMF_TARGET_AVX512`) and chosen at run time where the CPU and the OS support
// AVX-512 F/VL/DQ/BW.
//
// Both forms give bitwise the same results: they do the same IEEE operations per element in the same order
// (each GEMM element is one FMA chain over k from the same start), so the attention kernels give the same
// bits on machines with and without AVX-512 (small_gemm_test and attention_test check it). A whole training
// run does not: the model's large GEMMs are oneDNN's, which picks its code by CPU.
//
// LMF_CPU_ISA in the environment: unset, empty or "auto" (the widest the CPU has), "avx2" (never AVX-512),
// or "avx512" (an error where the CPU lacks it).
#ifndef LMFORGE_KERNELS_CPU_ISA_H_
#define LMFORGE_KERNELS_CPU_ISA_H_

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#define LMF_TARGET_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw")))
// For the AVX-512 forms' innermost pieces (a GEMM register tile): inlined into their AVX-512 callers.
#define LMF_ALWAYS_INLINE inline __attribute__((always_inline))

namespace lmf::kernels::vec {

// Whether this CPU (and OS) can run the AVX-512 forms. libgcc's feature bits include the OS check (XCR0
// enables the ZMM state) for the AVX-512 features.
inline bool CpuHasAvx512() {
  static const bool has = (__builtin_cpu_init(), true) &&  // in case this runs before libgcc's constructor
                          __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw");
  return has;
}

// The choice LMF_CPU_ISA's value asks for on a CPU with or without AVX-512: true for AVX-512, false for
// AVX2; an error message in *error (and false) for a value it does not know or an AVX-512 the CPU lacks.
inline bool ParseCpuIsa(const char* value, bool cpu_has_avx512, std::string* error) {
  error->clear();
  if (value == nullptr || *value == '\0' || std::strcmp(value, "auto") == 0) return cpu_has_avx512;
  if (std::strcmp(value, "avx2") == 0) return false;
  if (std::strcmp(value, "avx512") == 0) {
    if (cpu_has_avx512) return true;
    *error =
        "LMF_CPU_ISA=avx512, but this CPU (or its OS) does not support AVX-512 F/VL/DQ/BW; unset it or "
        "set LMF_CPU_ISA=avx2";
    return false;
  }
  *error = std::string("LMF_CPU_ISA=\"") + value + "\" is not one of auto, avx2, avx512";
  return false;
}

namespace internal {
// -1 until the first UseAvx512(), then 0 or 1.
inline std::atomic<int> g_use_avx512{-1};
// Reads LMF_CPU_ISA and the CPU once; a bad value exits with the message (status 2). Serialised, so that
// threads arriving at once read the variable once and at most one of them exits.
inline int InitUseAvx512() {
  static std::mutex* const mu = new std::mutex;  // never destroyed: exit() may run while others wait on it
  std::lock_guard<std::mutex> lock(*mu);
  if (const int v = g_use_avx512.load(std::memory_order_relaxed); v >= 0) return v;
  std::string error;
  const bool on = ParseCpuIsa(std::getenv("LMF_CPU_ISA"), CpuHasAvx512(), &error);
  if (!error.empty()) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    std::exit(2);
  }
  g_use_avx512.store(on ? 1 : 0, std::memory_order_relaxed);
  return on ? 1 : 0;
}
}  // namespace internal

// Whether the kernels run their AVX-512 forms (one relaxed load after the first call).
inline bool UseAvx512() {
  int v = internal::g_use_avx512.load(std::memory_order_relaxed);
  if (__builtin_expect(v < 0, 0)) v = internal::InitUseAvx512();
  return v != 0;
}

// The ISA in words ("AVX-512" or "AVX2"), for logs and benchmarks.
inline const char* IsaName() { return UseAvx512() ? "AVX-512" : "AVX2"; }

// Tests: runs the kernels' AVX2 or (where the CPU has it) AVX-512 forms from now on; returns the previous
// setting.
inline bool SetUseAvx512ForTesting(bool on) {
  const bool before = UseAvx512();
  internal::g_use_avx512.store(on && CpuHasAvx512() ? 1 : 0, std::memory_order_relaxed);
  return before;
}

}  // namespace lmf::kernels::vec

#endif  // LMFORGE_KERNELS_CPU_ISA_H_
