// The PyTorch peer of a CPU kernel benchmark, measured in the same run on the same threads: runs
// `<python> tools/kernels/<script> <args>` (which pythons and modes: torch_peers.h) and parses its
// "<label> <ms>" lines. OpenBLAS is pinned to its AVX2 (Haswell) kernel unless OPENBLAS_CORETYPE is set (Debian's OpenBLAS
// does not know newer CPUs and falls back to a generic path several times slower), and OpenBLAS and OpenMP
// get `threads` threads (the script sets PyTorch's own).
#ifndef LMFORGE_KERNELS_TESTING_CPU_PEER_H_
#define LMFORGE_KERNELS_TESTING_CPU_PEER_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace lmf::kernels::testing {

struct CpuPeer {
  std::map<std::string, double> ms;  // label -> milliseconds
  std::string description;           // the script's other lines (e.g. "peer PyTorch 1.13 ...")
};

// "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell} OPENBLAS_NUM_THREADS=<threads> OMP_NUM_THREADS=<threads>":
// the environment every PyTorch CPU peer runs in (a shell prefix).
std::string PeerEnvironment(int threads);

// Runs a shell command (its stderr is read too) and parses its "<label> <number>" lines; the other lines are
// the description. Fails when the command fails or prints no such line. The CPU peers and the CUDA
// benchmarks' peers (kernels/cuda/bench_util.h) run through it.
absl::StatusOr<CpuPeer> RunPeerCommand(const std::string& command);

// The script is found in the benchmark's runfiles (a data dependency on //tools/kernels:<script>), the
// current folder or, under `bazel run`, the workspace. Fails, saying why, when it, python or PyTorch is
// missing.
absl::StatusOr<CpuPeer> RunCpuPeer(const std::string& script, const std::string& args, int threads,
                                   const std::string& python = "/usr/bin/python3");

// peer ms / ours ms as "1.23x", or "n/a" when the peer did not run or has no such label.
std::string PeerRatio(const CpuPeer* peer, const std::string& label, double ours_ms);
// The peer's milliseconds for `label` as "%.3f", or "n/a".
std::string PeerMs(const CpuPeer* peer, const std::string& label);

}  // namespace lmf::kernels::testing

#endif  // LMFORGE_KERNELS_TESTING_CPU_PEER_H_
