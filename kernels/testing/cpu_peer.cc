// See cpu_peer.h.
#include "kernels/testing/cpu_peer.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace lmf::kernels::testing {
namespace {

std::string FindScript(const std::string& script) {
  const std::string rel = "tools/kernels/" + script;
  std::vector<std::string> candidates;
  if (const char* runfiles = std::getenv("RUNFILES_DIR"))
    candidates.push_back(absl::StrCat(runfiles, "/lmforge/", rel));
  char exe[4096];
  if (const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1); n > 0) {
    exe[n] = 0;
    candidates.push_back(absl::StrCat(exe, ".runfiles/lmforge/", rel));
  }
  candidates.push_back(rel);
  if (const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY")) {
    candidates.push_back(absl::StrCat(workspace, "/", rel));
  }
  for (const std::string& c : candidates) {
    if (access(c.c_str(), R_OK) == 0) return c;
  }
  return "";
}

// 'text' for sh, quotes inside escaped.
std::string ShellQuote(const std::string& text) {
  std::string quoted = "'";
  for (const char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace

std::string PeerEnvironment(int threads) {
  return absl::StrCat("OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell} OPENBLAS_NUM_THREADS=", threads,
                      " OMP_NUM_THREADS=", threads);
}

absl::StatusOr<CpuPeer> RunPeerCommand(const std::string& command) {
  const std::string with_stderr = command + " 2>&1";
  FILE* pipe = popen(with_stderr.c_str(), "r");
  if (pipe == nullptr) return absl::UnavailableError(absl::StrCat("cannot run `", command, "`"));
  CpuPeer peer;
  char line[1024];
  while (std::fgets(line, sizeof(line), pipe) != nullptr) {
    std::istringstream fields(line);
    std::string label;
    double ms = 0;
    if ((fields >> label >> ms) && (fields >> std::ws).eof()) {
      peer.ms[label] = ms;
    } else {
      peer.description += line;
    }
  }
  const int status = pclose(pipe);
  if (status != 0 || peer.ms.empty()) {
    return absl::UnavailableError(absl::StrCat("peer `", command, "` failed: ", peer.description));
  }
  while (!peer.description.empty() && peer.description.back() == '\n') peer.description.pop_back();
  return peer;
}

absl::StatusOr<CpuPeer> RunCpuPeer(const std::string& script, const std::string& args, int threads,
                                   const std::string& python) {
  const std::string path = FindScript(script);
  if (path.empty())
    return absl::NotFoundError(absl::StrCat("peer script tools/kernels/", script, " not found"));
  return RunPeerCommand(
      absl::StrCat(PeerEnvironment(threads), " ", ShellQuote(python), " ", ShellQuote(path), " ", args));
}

std::string PeerRatio(const CpuPeer* peer, const std::string& label, double ours_ms) {
  if (peer == nullptr) return "n/a";
  const auto it = peer->ms.find(label);
  return it == peer->ms.end() ? "n/a" : absl::StrFormat("%.2fx", it->second / ours_ms);
}

std::string PeerMs(const CpuPeer* peer, const std::string& label) {
  if (peer == nullptr) return "n/a";
  const auto it = peer->ms.find(label);
  return it == peer->ms.end() ? "n/a" : absl::StrFormat("%.3f", it->second);
}

}  // namespace lmf::kernels::testing
