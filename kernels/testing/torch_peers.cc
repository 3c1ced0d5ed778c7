// See torch_peers.h.
#include "kernels/testing/torch_peers.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

ABSL_FLAG(std::string, torch_python, lmf::kernels::testing::CurrentTorchPython(),
          "python of the current PyTorch (default: $LMF_TORCH_PYTHON, else the venv of "
          "tools/peers/setup_torch.sh, else /usr/bin/python3)");
ABSL_FLAG(std::string, torch_modes, "eager,compile,bf16",
          "the current PyTorch's modes: eager (fp32), compile (torch.compile, fp32), bf16 (CPU autocast)");
ABSL_FLAG(std::string, debian_python, lmf::kernels::testing::kDebianPython,
          "Debian's PyTorch 1.13, eager fp32, as a second column; empty: none");

namespace lmf::kernels::testing {

std::string CurrentTorchPython() {
  if (const char* python = std::getenv("LMF_TORCH_PYTHON"); python != nullptr && *python != '\0') return python;
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    const std::string venv = absl::StrCat(home, "/.cache/lmforge/torch-venv/bin/python");
    if (access(venv.c_str(), X_OK) == 0) return venv;
  }
  return kDebianPython;
}

absl::StatusOr<std::vector<TorchPeerSpec>> TorchPeerSpecsFromFlags() {
  const std::string python = absl::GetFlag(FLAGS_torch_python);
  std::vector<TorchPeerSpec> specs;
  for (absl::string_view mode : absl::StrSplit(absl::GetFlag(FLAGS_torch_modes), ',', absl::SkipEmpty())) {
    if (mode != "eager" && mode != "compile" && mode != "bf16") {
      return absl::InvalidArgumentError(
          absl::StrCat("--torch_modes: '", mode, "' is not a mode; expected eager, compile or bf16"));
    }
    specs.push_back({python, std::string(mode)});
  }
  const std::string debian = absl::GetFlag(FLAGS_debian_python);
  if (!debian.empty() && debian != python) specs.push_back({debian, "eager"});
  return specs;
}

std::string TorchPeerRun::Name() const {
  if (result.ok()) {
    for (absl::string_view line : absl::StrSplit(result->description, '\n')) {
      if (absl::ConsumePrefix(&line, "peer ")) return std::string(line);
    }
  }
  return absl::StrCat(spec.python, " ", spec.mode);
}

std::vector<TorchPeerRun> RunTorchPeers(const std::vector<TorchPeerSpec>& specs, const std::string& script,
                                        const std::string& args, int threads) {
  std::vector<TorchPeerRun> runs;
  for (const TorchPeerSpec& spec : specs) {
    runs.push_back({spec, RunCpuPeer(script, absl::StrCat("--mode=", spec.mode, " ", args), threads, spec.python)});
  }
  return runs;
}

std::string FormatPeerTable(const std::vector<TorchPeerRun>& peers,
                            const std::vector<std::pair<std::string, double>>& ours_ms) {
  std::string table = absl::StrFormat("%-22s %10s", "case", "ours ms");
  for (size_t i = 0; i < peers.size(); ++i) absl::StrAppendFormat(&table, " %11s %7s", absl::StrCat("peer ", i + 1, " ms"), "vs");
  table += "\n";
  for (const auto& [label, ms] : ours_ms) {
    absl::StrAppendFormat(&table, "%-22s %10.3f", label, ms);
    for (const TorchPeerRun& p : peers) {
      const CpuPeer* peer = p.result.ok() ? &*p.result : nullptr;
      absl::StrAppendFormat(&table, " %11s %7s", PeerMs(peer, label), PeerRatio(peer, label, ms));
    }
    table += "\n";
  }
  for (size_t i = 0; i < peers.size(); ++i) {
    absl::StrAppendFormat(&table, "peer %d: %s", i + 1, peers[i].Name());
    if (!peers[i].result.ok()) absl::StrAppend(&table, ": unavailable: ", peers[i].result.status().message());
    table += "\n";
  }
  return table;
}

}  // namespace lmf::kernels::testing
