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

// 16 independent chains of __m512 FMAs: more than latency x FMA ports (4 x 2) in flight, so the FMA units,
// not a chain's latency, set the rate. The asm barriers keep the chains in registers and alive.
__attribute__((target("avx512f"))) double FmaRateAvx512(double min_cpu_seconds) {
  __m512 a0 = _mm512_set1_ps(1e-3f * 0), a1 = _mm512_set1_ps(1e-3f * 1), a2 = _mm512_set1_ps(1e-3f * 2),
         a3 = _mm512_set1_ps(1e-3f * 3), a4 = _mm512_set1_ps(1e-3f * 4), a5 = _mm512_set1_ps(1e-3f * 5),
         a6 = _mm512_set1_ps(1e-3f * 6), a7 = _mm512_set1_ps(1e-3f * 7), a8 = _mm512_set1_ps(1e-3f * 8),
         a9 = _mm512_set1_ps(1e-3f * 9), a10 = _mm512_set1_ps(1e-3f * 10), a11 = _mm512_set1_ps(1e-3f * 11),
         a12 = _mm512_set1_ps(1e-3f * 12), a13 = _mm512_set1_ps(1e-3f * 13), a14 = _mm512_set1_ps(1e-3f * 14),
         a15 = _mm512_set1_ps(1e-3f * 15);
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  int64_t rounds = 0;
  const double start = ThreadCpuSeconds();
  double elapsed = 0;
  do {
    for (int r = 0; r < kRoundsPerCheck; ++r) {
      a0 = _mm512_fmadd_ps(a0, m, c);
      a1 = _mm512_fmadd_ps(a1, m, c);
      a2 = _mm512_fmadd_ps(a2, m, c);
      a3 = _mm512_fmadd_ps(a3, m, c);
      a4 = _mm512_fmadd_ps(a4, m, c);
      a5 = _mm512_fmadd_ps(a5, m, c);
      a6 = _mm512_fmadd_ps(a6, m, c);
      a7 = _mm512_fmadd_ps(a7, m, c);
      a8 = _mm512_fmadd_ps(a8, m, c);
      a9 = _mm512_fmadd_ps(a9, m, c);
      a10 = _mm512_fmadd_ps(a10, m, c);
      a11 = _mm512_fmadd_ps(a11, m, c);
      a12 = _mm512_fmadd_ps(a12, m, c);
      a13 = _mm512_fmadd_ps(a13, m, c);
      a14 = _mm512_fmadd_ps(a14, m, c);
      a15 = _mm512_fmadd_ps(a15, m, c);
    }
    __asm__ volatile("" : "+v"(a0));
    __asm__ volatile("" : "+v"(a1));
    __asm__ volatile("" : "+v"(a2));
    __asm__ volatile("" : "+v"(a3));
    __asm__ volatile("" : "+v"(a4));
    __asm__ volatile("" : "+v"(a5));
    __asm__ volatile("" : "+v"(a6));
    __asm__ volatile("" : "+v"(a7));
    __asm__ volatile("" : "+v"(a8));
    __asm__ volatile("" : "+v"(a9));
    __asm__ volatile("" : "+v"(a10));
    __asm__ volatile("" : "+v"(a11));
    __asm__ volatile("" : "+v"(a12));
    __asm__ volatile("" : "+v"(a13));
    __asm__ volatile("" : "+v"(a14));
    __asm__ volatile("" : "+v"(a15));
    rounds += kRoundsPerCheck;
  } while ((elapsed = ThreadCpuSeconds() - start) < min_cpu_seconds);
  volatile float sink = a0[0] + a1[0] + a2[0] + a3[0] + a4[0] + a5[0] + a6[0] + a7[0] + a8[0] + a9[0] +
                        a10[0] + a11[0] + a12[0] + a13[0] + a14[0] + a15[0];
  (void)sink;
  return static_cast<double>(rounds) * 16 * 16 * 2 / elapsed;
}

// 12 independent chains of __m256 FMAs: more than latency x FMA ports (4 x 2) in flight, so the FMA units,
// not a chain's latency, set the rate. The asm barriers keep the chains in registers and alive.
__attribute__((target("avx2,fma"))) double FmaRateAvx2(double min_cpu_seconds) {
  __m256 a0 = _mm256_set1_ps(1e-3f * 0), a1 = _mm256_set1_ps(1e-3f * 1), a2 = _mm256_set1_ps(1e-3f * 2),
         a3 = _mm256_set1_ps(1e-3f * 3), a4 = _mm256_set1_ps(1e-3f * 4), a5 = _mm256_set1_ps(1e-3f * 5),
         a6 = _mm256_set1_ps(1e-3f * 6), a7 = _mm256_set1_ps(1e-3f * 7), a8 = _mm256_set1_ps(1e-3f * 8),
         a9 = _mm256_set1_ps(1e-3f * 9), a10 = _mm256_set1_ps(1e-3f * 10), a11 = _mm256_set1_ps(1e-3f * 11);
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  int64_t rounds = 0;
  const double start = ThreadCpuSeconds();
  double elapsed = 0;
  do {
    for (int r = 0; r < kRoundsPerCheck; ++r) {
      a0 = _mm256_fmadd_ps(a0, m, c);
      a1 = _mm256_fmadd_ps(a1, m, c);
      a2 = _mm256_fmadd_ps(a2, m, c);
      a3 = _mm256_fmadd_ps(a3, m, c);
      a4 = _mm256_fmadd_ps(a4, m, c);
      a5 = _mm256_fmadd_ps(a5, m, c);
      a6 = _mm256_fmadd_ps(a6, m, c);
      a7 = _mm256_fmadd_ps(a7, m, c);
      a8 = _mm256_fmadd_ps(a8, m, c);
      a9 = _mm256_fmadd_ps(a9, m, c);
      a10 = _mm256_fmadd_ps(a10, m, c);
      a11 = _mm256_fmadd_ps(a11, m, c);
    }
    __asm__ volatile("" : "+v"(a0));
    __asm__ volatile("" : "+v"(a1));
    __asm__ volatile("" : "+v"(a2));
    __asm__ volatile("" : "+v"(a3));
    __asm__ volatile("" : "+v"(a4));
    __asm__ volatile("" : "+v"(a5));
    __asm__ volatile("" : "+v"(a6));
    __asm__ volatile("" : "+v"(a7));
    __asm__ volatile("" : "+v"(a8));
    __asm__ volatile("" : "+v"(a9));
    __asm__ volatile("" : "+v"(a10));
    __asm__ volatile("" : "+v"(a11));
    rounds += kRoundsPerCheck;
  } while ((elapsed = ThreadCpuSeconds() - start) < min_cpu_seconds);
  volatile float sink =
      a0[0] + a1[0] + a2[0] + a3[0] + a4[0] + a5[0] + a6[0] + a7[0] + a8[0] + a9[0] + a10[0] + a11[0];
  (void)sink;
  return static_cast<double>(rounds) * 12 * 8 * 2 / elapsed;
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
      rates[i] = avx512 ? FmaRateAvx512(cpu_seconds_per_thread) : FmaRateAvx2(cpu_seconds_per_thread);
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
