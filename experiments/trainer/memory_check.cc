// The up-front memory fit check (see memory_check.h).
#include "experiments/trainer/memory_check.h"

#include <sys/sysinfo.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace lmf::experiments {
namespace {

// "79.1 GB" (decimal units, as free -h and cloud instance sizes).
std::string Human(double bytes) {
  const char* units[] = {"bytes", "kB", "MB", "GB", "TB", "PB", "EB"};
  int u = 0;
  while (bytes >= 1000 && u < 6) bytes /= 1000, ++u;
  return u == 0 ? absl::StrFormat("%.0f bytes", bytes) : absl::StrFormat("%.3g %s", bytes, units[u]);
}

}  // namespace

double MemoryBytes() {
  // Swap counts: a model that fits only with it runs, slowly, and the check refuses only what cannot run.
  struct sysinfo info;
  if (::sysinfo(&info) != 0) return 0;
  return (static_cast<double>(info.totalram) + static_cast<double>(info.totalswap)) * info.mem_unit;
}

absl::Status CheckFitsInMemory(const model::ModelMemory& need, int processes, double available,
                               const std::string& what) {
  const double total = need.total() * processes;
  if (available <= 0 || total <= available) return absl::OkStatus();
  std::string parts =
      absl::StrCat(need.weights > 4 * need.parameters ? "weights and their bf16 copies " : "weights ",
                   Human(need.weights), ", gradients ", Human(need.gradients));
  if (need.optimizer > 0) absl::StrAppend(&parts, ", AdamW moments ", Human(need.optimizer));
  if (need.activations > 0) absl::StrAppend(&parts, ", activations ", Human(need.activations));
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s needs at least %s (%.0f bytes) of memory, more than this machine's %s (memory and swap): %s%.4g parameters (%s)",
      what, Human(total), total, Human(available),
      processes > 1 ? absl::StrCat(processes, " processes of ") : "", need.parameters, parts));
}

}  // namespace lmf::experiments
