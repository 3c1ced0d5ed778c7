// The placement flags of eval and generate (see placement_flags.h).
#include "experiments/placement_flags.h"

#include <cstdint>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/flags.h"

ABSL_FLAG(std::string, device, "cpu", "where the model runs: cpu or cuda");
ABSL_FLAG(int64_t, cuda_device, 0, "the CUDA device's ordinal (with --device=cuda)");
ABSL_FLAG(std::string, precision, "fp32", "fp32 or bf16 (bf16 needs --device=cuda)");

namespace lmf::experiments {

absl::StatusOr<ModelPlacement> PlacementFromFlags() {
  ModelPlacement placement;
  const std::string device = absl::GetFlag(FLAGS_device);
  if (absl::AsciiStrToLower(device) == "cuda") {
    placement.device = config::RunConfig::CUDA;
  } else if (absl::AsciiStrToLower(device) != "cpu") {
    return absl::InvalidArgumentError(absl::StrCat("--device=", device, ": expected cpu or cuda"));
  }
  const std::string precision = absl::GetFlag(FLAGS_precision);
  if (absl::AsciiStrToLower(precision) == "bf16") {
    placement.precision = config::RunConfig::BF16;
  } else if (absl::AsciiStrToLower(precision) != "fp32") {
    return absl::InvalidArgumentError(absl::StrCat("--precision=", precision, ": expected fp32 or bf16"));
  }
  if (FlagGiven(FLAGS_cuda_device)) {
    const int64_t ordinal = absl::GetFlag(FLAGS_cuda_device);
    if (ordinal < 0 || ordinal > INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cuda_device=", ordinal, ": expected a CUDA device ordinal (0, 1, ...)"));
    }
    if (placement.device != config::RunConfig::CUDA) {
      return absl::InvalidArgumentError("--cuda_device needs --device=cuda");
    }
    placement.cuda_device = static_cast<int32_t>(ordinal);
  }
  return placement;
}

}  // namespace lmf::experiments
