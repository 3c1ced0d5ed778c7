// Helpers for the CUDA benchmarks: median kernel time with CUDA events (after warm-up), and the PyTorch
// peer measured in the same run: a script from tools/gpu_peers/ (found in the runfiles, or in the GPU
// bundle's peers/ folder) run with python3, printing one "<label> <milliseconds>" line per case.
#ifndef LMFORGE_KERNELS_CUDA_BENCH_UTIL_H_
#define LMFORGE_KERNELS_CUDA_BENCH_UTIL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/cuda_context.h"

namespace lmf::kernels::cuda::bench {

// CUDA device 0's context for the benchmark `name`. Null where there is none: without a CUDA device it
// prints "<name>: no CUDA device, nothing measured" and sets *exit_code to 0 (a machine without a GPU is no
// failure); where the context cannot be made, it prints "<name>: <why>" and sets *exit_code to 1.
std::unique_ptr<CudaContext> OpenDevice(const char* name, int* exit_code);

// Median milliseconds of `iters` timed runs of fn (each timed with events on `stream`) after `warmup` runs.
// fn reports its own failures (it returns nothing); a pending CUDA error after the runs aborts, naming it.
double MedianMs(void* stream, const std::function<void()>& fn, int warmup = 3, int iters = 20);

// Runs `python3 <script> <args>` (script: a file name under tools/gpu_peers) and parses its
// "<label> <milliseconds>" lines. Fails when python3, the script or PyTorch is missing.
absl::StatusOr<std::map<std::string, double>> RunPeer(const std::string& script, const std::string& args);

// "1.23x" or "n/a".
std::string Ratio(const std::map<std::string, double>* peer, const std::string& label, double ours_ms);

// n uniform values in [-scale, scale) from a fixed seed (benchmarks never time on zeros or constants).
std::vector<float> RandomUniform(int64_t n, uint64_t seed, float scale = 1.0f);

// Device-to-device copy bandwidth in GB/s (bytes read + written), measured on `bytes` buffers.
double CopyBandwidthGBs(void* stream, size_t bytes);

}  // namespace lmf::kernels::cuda::bench

#endif  // LMFORGE_KERNELS_CUDA_BENCH_UTIL_H_
