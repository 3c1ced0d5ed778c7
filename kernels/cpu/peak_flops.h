// The CPU's peak fp32 FLOP/s, measured rather than assumed, for MFU on CPU runs. A fixed estimate is wrong
// in both directions: an AVX2 figure (2 FMA units x 8 lanes) undercounts a core with AVX-512, so MFU reads
// above 100%, and a nominal clock is not the clock a vector load runs at.
//
// Each of min(threads, the CPUs this process may run on) threads runs independent chains of FMAs of the
// widest vector ISA the CPU has (AVX-512F, else AVX2), in registers, for `cpu_seconds_per_thread` of its
// own CPU time; the peak is the sum of their FLOP per CPU-second. Timing by thread CPU time makes the
// figure the same on a loaded machine; measuring the threads at once makes SMT siblings share one core's
// FMA units as they do in training. A dense GEMM cannot beat it (peak_flops_test).
#ifndef LMFORGE_KERNELS_CPU_PEAK_FLOPS_H_
#define LMFORGE_KERNELS_CPU_PEAK_FLOPS_H_

namespace lmf::kernels {

struct CpuPeak {
  double flops_per_second = 0;  // all `threads` together
  int threads = 0;              // asked for
  int measured_threads = 0;     // threads beyond the CPUs the process may use add no peak
  const char* isa = "";         // "AVX-512" or "AVX2"
};

CpuPeak MeasureCpuFmaPeak(int threads, double cpu_seconds_per_thread = 0.02);

// MeasureCpuFmaPeak, once per process and thread count (~20 ms of CPU time per thread the first time).
const CpuPeak& CpuFmaPeak(int threads);

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_CPU_PEAK_FLOPS_H_
