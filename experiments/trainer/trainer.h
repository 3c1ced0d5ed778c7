// The training loop: from a validated, resolved Experiment (config/loader.h) to a trained model in
// run.output_dir, which receives
//   config.textproto      the resolved config
//   metrics.jsonl         one line per step (experiments/metrics/metrics_log.h)
//   events.out.tfevents.* TensorBoard scalars: train/loss, train/lr, train/grad_norm, val/loss,
//                         perf/tokens_per_second, perf/mfu
//   checkpoints/          step_XXXXXXXX folders (experiments/checkpoint/checkpoint.h), the newest N kept
//   .lock                 held while a trainer runs (base/file.h FileLock): a second trainer is refused
// The run trains on run.device in run.precision (training_device.h: the CPU in FP32, or a CUDA device in
// FP32 or BF16 with fp32 master weights and optimizer state); the console log names the device and the peak
// FLOP/s MFU is measured against. Checkpoints hold fp32 weights and moments under the same names on every
// device, so a run checkpointed on the CPU resumes on a GPU and the reverse.
// Each step: run.grad_accum_steps micro-batches of run.batch_size random windows (forward, backward,
// gradients averaged), the LR from the schedule, the global gradient norm, clipping and AdamW. A NaN or
// infinite loss or gradient norm stops the run before the update, with an error naming the step and the
// last good checkpoint. Validation loss on run.eval_tokens tokens every run.eval_interval steps, after
// each of run.eval_steps and at the end. `resume` continues from the newest good checkpoint so that the rest
// of the run is bit-identical to an uninterrupted one (same weights, moments, step and data-sampler state;
// same thread count). With checkpoint_on_signal, SIGINT / SIGTERM end the run cleanly after the current step
// with a checkpoint. run.init_from starts a fresh run folder from another run's checkpoint the same way,
// after checking that the steps it takes over were taken with this config's model, data, batch, seed,
// optimizer and learning rates (a WSD cooldown branch). The training data is data.train_tokens or a
// data.train_mixture. run.parallel.data > 1 trains on that many processes (CPU ones, or one GPU each with the
// gradients summed over NCCL on the devices: device_group.h), splitting each step's micro-batches
// (data_parallel.h); run.parallel.pipeline > 1 cuts the layers into that many stages, one
// per process, data x pipeline processes in all (distributed/pipeline/pipeline_step.h), with checkpoints
// that hold the whole model and resume in any layout (pipeline_checkpoint.h).
#ifndef LMFORGE_EXPERIMENTS_TRAINER_TRAINER_H_
#define LMFORGE_EXPERIMENTS_TRAINER_TRAINER_H_

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/experiment.pb.h"
#include "config/run.pb.h"
#include "distributed/collectives.h"
#include "experiments/trainer/device_group.h"
#include "experiments/trainer/training_device.h"

namespace lmf::experiments {

struct TrainOptions {
  // Continue from the newest good checkpoint in run.output_dir/checkpoints (from scratch if there is
  // none). Without it, an output folder that already holds a run is an error.
  bool resume = false;
  // > 0: end the process's work right after this step completes, writing nothing more (no checkpoint,
  // evaluation or final line), exactly as if it were killed there; for testing and demonstrating resume.
  int64_t stop_after_step = 0;
  // Catch SIGINT and SIGTERM (Ctrl-C, a scheduler's preemption) during the run: the step in progress
  // finishes, a checkpoint is written, and Train returns Cancelled naming it, for --resume to continue.
  bool checkpoint_on_signal = false;
  // How the stop message (checkpoint_on_signal) tells the user to continue the run: by hand with --resume,
  // or, for a run that a sweep started, by starting the sweep again (it resumes its runs itself).
  std::string how_to_continue = "continue with --resume";
  FILE* console = stderr;
  // Data parallelism (run.parallel.data > 1; data_parallel.h): the group this process trains in as one
  // rank. Null: this process is rank 0 and starts the others itself, as `data_parallel_command` (default:
  // this executable, which must call DataParallelWorkerMain when IsDataParallelWorker()).
  distributed::Collectives* collectives = nullptr;
  std::vector<std::string> data_parallel_command;
  // With `collectives` and run.device CUDA (device_group.h): where its ranks met (the NCCL group's unique id
  // travels through that store), and this process's rank among its machine's ranks (-1: its rank in
  // `collectives`, every rank on one machine), which picks its GPU: local_rank modulo the devices visible.
  GroupStore store;
  int local_rank = -1;
};

struct TrainResult {
  int64_t steps = 0;                // optimizer steps completed
  double last_loss = 0;
  std::optional<double> last_val_loss;
  std::string last_checkpoint;      // "" when none was written
};

absl::StatusOr<TrainResult> Train(const config::Experiment& experiment, const TrainOptions& options);

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_TRAINER_TRAINER_H_
