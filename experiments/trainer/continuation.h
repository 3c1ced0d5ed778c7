// Whether a checkpoint may be continued by this config: a --resume of the same run, or a new run that starts
// from another run's checkpoint (run.init_from, a WSD cooldown branch). Each check returns
// FailedPrecondition naming the checkpoint, the field that differs and its two values.
#ifndef LMFORGE_EXPERIMENTS_TRAINER_CONTINUATION_H_
#define LMFORGE_EXPERIMENTS_TRAINER_CONTINUATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "config/experiment.pb.h"
#include "experiments/checkpoint/checkpoint.h"
#include "experiments/data/token_batches.h"

namespace lmf::experiments {

// What must not change between a checkpoint and the run that continues from it, or the continuation would
// be a different run: the model, the data stream (file, batch shape, seed).
// `then` is the checkpoint's config (ParseStoredExperiment: resolved as `now` is, so that a checkpoint of an
// older build compares equal); `how` names the continuation in the error: "resume from " or "start from
// run.init_from=".
absl::Status CheckResumable(const config::Experiment& now, const config::Experiment& then,
                            const std::string& checkpoint_path, const std::string& how);

// A run that starts from another run's checkpoint at step `branch_step` (run.init_from) takes over those
// steps as its own: they must have been taken with this config's optimizer and learning rates (a WSD
// branch at or before its decay start; not a cosine run's checkpoint, nor one of another peak or warmup).
absl::Status CheckBranch(const config::Experiment& now, const config::Experiment& then,
                         const std::string& checkpoint_path, int64_t branch_step);

// Sparse upcycling (run.init_from naming a dense model's checkpoint from a mixture-of-experts config): the
// two models must be the same but for the feed-forward, each routed expert the dense FFN's kind and width
// (model.moe.expert_kind, model.moe.d_expert), and the first_k_dense blocks' model.moe.dense_ffn the dense
// FFN itself. FailedPrecondition naming the field otherwise.
absl::Status CheckUpcycle(const config::Experiment& now, const config::Experiment& then,
                          const std::string& checkpoint_path);

// The training files are the ones the checkpoint's run read (its fingerprints, where it recorded them): the
// same windows are drawn only from the same ids. `what` names the continuation in the error.
absl::Status CheckSameData(const checkpoint::TrainerState& state, const std::vector<uint32_t>& fingerprints,
                           const TrainBatchSampler& sampler, const std::string& what);

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_TRAINER_CONTINUATION_H_
