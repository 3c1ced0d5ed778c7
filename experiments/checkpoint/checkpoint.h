// Checkpoint folders of a training run: <run>/checkpoints/step_00000100/ holding
//   model.safetensors        the weights by parameter name (loadable with safetensors.torch.load_file)
//   optimizer.safetensors    AdamW moments "<parameter>.exp_avg" / "<parameter>.exp_avg_sq"
//   config.textproto         the resolved experiment config
//   trainer_state.textproto  step, tokens, sampler (RNG) state, and size + CRC-32C of the three files above;
//                            its first line, a comment, holds the CRC-32C of the rest (StateFileText)
// A checkpoint is written into step_XXXXXXXX.partial/ (every file fsynced) and renamed into place only when
// complete, so a crash or kill mid-write never hides or replaces the previous good checkpoint; leftover
// .partial folders are removed by the next save. Loading checks the state file's own CRC (files written
// before it existed have none and are read as before) and its step against the folder's name, then the
// files' sizes and CRCs, and LatestCheckpoint skips (and reports) a checkpoint that fails them. Only the
// newest `keep` intact checkpoints are kept, and any pinned steps (run.checkpoint_steps: branch points for
// run.init_from); a damaged one never counts as kept.
#ifndef LMFORGE_EXPERIMENTS_CHECKPOINT_CHECKPOINT_H_
#define LMFORGE_EXPERIMENTS_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "experiments/checkpoint/safetensors.h"
#include "experiments/checkpoint/trainer_state.pb.h"

namespace lmf::experiments {

struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;  // numel(shape) floats, alive during SaveCheckpoint
};

struct CheckpointContents {
  std::vector<NamedTensor> model;
  std::vector<NamedTensor> optimizer;
  checkpoint::TrainerState state;  // `files` is filled by SaveCheckpoint
  std::string config_text;
};

// The text of a trainer_state.textproto: "# CRC-32C of the lines below: 1234abcd", then the state as a
// textproto.
std::string StateFileText(const checkpoint::TrainerState& state);

// "<checkpoints_dir>/step_00000100".
std::string CheckpointPath(const std::string& checkpoints_dir, int64_t step);

// Writes step `contents.state.step()` as described above, then prunes: the checkpoint just written and the
// newest `keep` - 1 older ones that verify are kept, with any damaged folder between them (damaged ones do
// not count), and the older ones are removed. The `pinned` steps are kept and not counted, and folders of
// steps after the one written are neither counted nor removed. Returns the checkpoint's folder.
absl::StatusOr<std::string> SaveCheckpoint(const std::string& checkpoints_dir,
                                           const CheckpointContents& contents, int keep,
                                           const std::vector<int64_t>& pinned = {});

// What a checkpoint is loaded for: continuing its run (--resume, run.init_from: every file), or its weights
// alone (eval, generate: model.safetensors and config.textproto; optimizer.safetensors is neither verified
// nor read, so a folder that lost only the moments still serves).
enum class CheckpointUse { kResume, kWeights };

struct LoadedCheckpoint {
  std::string path;
  checkpoint::TrainerState state;
  SafetensorsReader model;
  std::optional<SafetensorsReader> optimizer;  // kResume only
  std::string config_text;
};

// Verifies the size and CRC-32C of every file `use` reads against trainer_state.textproto, then opens them.
absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& path,
                                                CheckpointUse use = CheckpointUse::kResume);

// Verifies a checkpoint folder as LoadCheckpoint does (its state file, then the size and CRC-32C of every
// file `use` reads) without opening it: OK, or the damage (DataLoss, or the error reading a file).
absl::Status VerifyCheckpoint(const std::string& path, CheckpointUse use = CheckpointUse::kResume);

// Whether an error of VerifyCheckpoint means the checkpoint is damaged (a CRC or size that does not match,
// a corrupt state file, a file missing, a file that is not a plain file), as opposed to one that says nothing about it (a read error, a
// permission, too many open files), after which the checkpoint must not be set aside as damaged.
bool IsCheckpointDamage(const absl::Status& verify_error);

// The newest checkpoint folder that verifies for `use`, NotFound when there is none. Each newer one that
// verification finds damaged (IsCheckpointDamage) is skipped and its error appended to `skipped` (when not
// null); one that cannot be read (an I/O or permission error) is an error, not a reason to go back further.
absl::StatusOr<std::string> LatestCheckpoint(const std::string& checkpoints_dir,
                                             std::vector<std::string>* skipped = nullptr,
                                             CheckpointUse use = CheckpointUse::kResume);

// Moves every checkpoint folder of a step after `after_step` that verification finds damaged
// (IsCheckpointDamage; another error, a read error say, is returned and nothing more is moved) into
// <checkpoints_dir>/damaged/ (as step_00000020, or step_00000020.2, ... where that name is taken) and returns
// their new paths. --resume calls it with the step it resumes from: the newer folders it skipped as damaged
// would otherwise stay the run's "newest" checkpoints while it trains on, misleading whatever lists them.
absl::StatusOr<std::vector<std::string>> MoveAsideDamagedCheckpoints(const std::string& checkpoints_dir,
                                                                     int64_t after_step);

// Moves the folder of checkpoint `step` into <checkpoints_dir>/damaged/ as MoveAsideDamagedCheckpoints
// does (without verifying it: for a caller that found it damaged) and returns its new path.
absl::StatusOr<std::string> MoveCheckpointToDamaged(const std::string& checkpoints_dir, int64_t step);

// The steps of the complete checkpoint folders in `checkpoints_dir`, ascending (no verification).
std::vector<int64_t> ListCheckpointSteps(const std::string& checkpoints_dir);

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_CHECKPOINT_CHECKPOINT_H_
