// Google Benchmark: the cost of a ParallelFor dispatch (empty work) and the speed-up on a memory-light,
// compute-heavy loop, against running the same loop on the calling thread.
//   ./bazelw run //base:thread_pool_benchmark
#include <cmath>
#include <vector>

#include "base/thread_pool.h"
#include "benchmark/benchmark.h"

namespace {

void BM_DispatchOverhead(benchmark::State& state) {
  lmf::ThreadPool pool(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    pool.ParallelFor(1024, 1, [](int64_t, int64_t) {});
  }
}
BENCHMARK(BM_DispatchOverhead)->Arg(1)->Arg(2)->Arg(4);

void BM_SinSum(benchmark::State& state) {
  lmf::ThreadPool pool(static_cast<int>(state.range(0)));
  const int64_t n = 1 << 18;
  for (auto _ : state) {
    std::vector<double> out(n);
    pool.ParallelFor(n, 4096, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[i] = std::sin(static_cast<double>(i) * 1e-3);
    });
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_SinSum)->Arg(1)->Arg(2)->UseRealTime();

}  // namespace
