// See peak_flops.h.
#include "kernels/cpu/peak_flops.h"

#include <immintrin.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace lmf::kernels {
namespace {

constexpr int kRoundsPerCheck = 4096;

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Runs `chunk` (kRoundsPerCheck rounds of FMAs on chains it loads from and stores back to `state`, which
// keeps them alive) until this thread has spent `min_cpu_seconds` of CPU time, in kWindows windows of equal
// CPU time; the best window's FLOP per CPU-second. CPU time hides time-slicing but not a busy SMT sibling
// (on a virtual machine, possibly another guest's) sharing the core's FMA units for part of the run: the
// best window is the rate the core reaches, which a GEMM timed at a quiet moment may reach too.
template <typename Chunk>
double TimeChunks(double min_cpu_seconds, double flops_per_round, Chunk chunk) {
  constexpr int kWindows = 5;
  alignas(64) float state[256];
  for (int i = 0; i < 256; ++i) state[i] = 1e-3f * static_cast<float>(i / 16);
  double best = 0;
  for (int w = 0; w < kWindows; ++w) {
    int64_t rounds = 0;
    const double start = ThreadCpuSeconds();
    double elapsed = 0;
    do {
      chunk(state);
      rounds += kRoundsPerCheck;
    } while ((elapsed = ThreadCpuSeconds() - start) < min_cpu_seconds / kWindows);
    best = std::max(best, static_cast<double>(rounds) * flops_per_round / elapsed);
  }
  volatile float sink = state[0];
  (void)sink;
  return best;
}

// 16 independent chains of __m512 FMAs (12 of __m256 below): more than latency x FMA ports (4 x 2) in
// flight, so the FMA units, not a chain's latency, set the rate. Fully unrolled, the chains stay in
// registers (checked in the disassembly: one vfmadd per chain per round, no memory operand).
__attribute__((target("avx512f"))) void Avx512Chunk(float* state) {
  __m512 a[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) a[i] = _mm512_load_ps(state + 16 * i);
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int r = 0; r < kRoundsPerCheck; ++r) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) _mm512_store_ps(state + 16 * i, a[i]);
}

__attribute__((target("avx2,fma"))) void Avx2Chunk(float* state) {
  __m256 a[12];
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) a[i] = _mm256_load_ps(state + 8 * i);
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int r = 0; r < kRoundsPerCheck; ++r) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
  }
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) _mm256_store_ps(state + 8 * i, a[i]);
}

int LogicalCpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

CpuPeak MeasureCpuFmaPeak(int threads, double cpu_seconds_per_thread) {
  CpuPeak peak;
  peak.threads = std::max(1, threads);
  peak.measured_threads = std::min(peak.threads, LogicalCpus());
  const bool avx512 = __builtin_cpu_supports("avx512f");
  peak.isa = avx512 ? "AVX-512" : "AVX2";
  std::vector<double> rates(peak.measured_threads);
  std::vector<std::thread> workers;
  for (int i = 0; i < peak.measured_threads; ++i) {
    workers.emplace_back([&, i] {
      rates[i] = avx512 ? TimeChunks(cpu_seconds_per_thread, 16 * 16 * 2, Avx512Chunk)
                        : TimeChunks(cpu_seconds_per_thread, 12 * 8 * 2, Avx2Chunk);
    });
  }
  for (std::thread& w : workers) w.join();
  for (double r : rates) peak.flops_per_second += r;
  return peak;
}

const CpuPeak& CpuFmaPeak(int threads) {
  static std::mutex mu;
  static std::map<int, CpuPeak>* cache = new std::map<int, CpuPeak>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(threads);
  if (it == cache->end()) it = cache->emplace(threads, MeasureCpuFmaPeak(threads)).first;
  return it->second;
}

}  // namespace lmf::kernels
