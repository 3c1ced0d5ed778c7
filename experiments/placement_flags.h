// The placement flags of eval and generate: where the loaded model runs, as the trainer's run.device,
// run.cuda_device and run.precision say for training.
//   --device=cpu|cuda      (default cpu)
//   --cuda_device=N        (default 0; only with --device=cuda)
//   --precision=fp32|bf16  (default fp32; bf16 only with --device=cuda)
#ifndef LMFORGE_EXPERIMENTS_PLACEMENT_FLAGS_H_
#define LMFORGE_EXPERIMENTS_PLACEMENT_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "experiments/model_loading.h"

ABSL_DECLARE_FLAG(std::string, device);
ABSL_DECLARE_FLAG(int64_t, cuda_device);
ABSL_DECLARE_FLAG(std::string, precision);

namespace lmf::experiments {

// The placement the flags give (after lmf::ParseFlags). An unknown device or precision, a negative
// ordinal and --cuda_device without --device=cuda are InvalidArgument errors naming the flag (bf16 runs on
// either device). Whether the device opens is checked when the model is loaded.
absl::StatusOr<ModelPlacement> PlacementFromFlags();

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_PLACEMENT_FLAGS_H_
