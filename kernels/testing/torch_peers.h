// The PyTorch peers of the CPU benchmarks, chosen one way in every benchmark binary: the current PyTorch
// (the venv tools/peers/setup_torch.sh makes) in each of the modes --torch_modes names, and Debian's
// python3-torch (1.13) in eager fp32 as a second column. Each peer is one run of the benchmark's script
// (`<python> <script> --mode=<mode> ...`), same shapes, same threads, same run as lmforge's number, and is
// named by the version it printed ("PyTorch 2.15.0+cu132 torch.compile fp32").
//
// Flags (defined here, so every benchmark that links this takes them):
//   --torch_python   the current PyTorch's python (default: CurrentTorchPython())
//   --torch_modes    eager,compile,bf16: eager fp32, torch.compile fp32 (inductor), eager CPU bf16 autocast
//   --debian_python  /usr/bin/python3: Debian's PyTorch 1.13, eager fp32; "" (or the same python as
//                    --torch_python) leaves it out
#ifndef LMFORGE_KERNELS_TESTING_TORCH_PEERS_H_
#define LMFORGE_KERNELS_TESTING_TORCH_PEERS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "kernels/testing/cpu_peer.h"

ABSL_DECLARE_FLAG(std::string, torch_python);
ABSL_DECLARE_FLAG(std::string, torch_modes);
ABSL_DECLARE_FLAG(std::string, debian_python);

namespace lmf::kernels::testing {

inline constexpr char kDebianPython[] = "/usr/bin/python3";

// $LMF_TORCH_PYTHON when set, else ~/.cache/lmforge/torch-venv/bin/python when it exists (the current
// PyTorch, tools/peers/setup_torch.sh), else Debian's /usr/bin/python3 (PyTorch 1.13).
std::string CurrentTorchPython();

// One peer: an interpreter and the mode its script runs in (eager, compile or bf16).
struct TorchPeerSpec {
  std::string python;
  std::string mode;
};

// The peers the flags ask for, in column order. A --torch_modes entry other than eager, compile or bf16 is
// an InvalidArgument error naming it.
absl::StatusOr<std::vector<TorchPeerSpec>> TorchPeerSpecsFromFlags();

struct TorchPeerRun {
  TorchPeerSpec spec;
  absl::StatusOr<CpuPeer> result;
  // "PyTorch 2.15.0 eager fp32" from the script's "peer ..." line, or "<python> <mode>" when it failed.
  std::string Name() const;
};

// Runs `script` (tools/kernels/<script>, RunCpuPeer) once per spec with `--mode=<mode> <args>`.
std::vector<TorchPeerRun> RunTorchPeers(const std::vector<TorchPeerSpec>& specs, const std::string& script,
                                        const std::string& args, int threads);

// A table: one row per (label, ours ms), then per peer its ms and its time over ours ("n/a" where it has no
// such label); under it each peer's name, or why it is unavailable.
std::string FormatPeerTable(const std::vector<TorchPeerRun>& peers,
                            const std::vector<std::pair<std::string, double>>& ours_ms);

}  // namespace lmf::kernels::testing

#endif  // LMFORGE_KERNELS_TESTING_TORCH_PEERS_H_
