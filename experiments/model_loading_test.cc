// Loading trained models for eval/generate: from a checkpoint folder and from a run folder (its newest
// good checkpoint) the same weights come back; a folder that is neither is a clear error; a CUDA placement
// that cannot be opened here is the device error prefixed by the flags (placement_flags_test reads the
// flags themselves).
#include "experiments/model_loading.h"

#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "base/file.h"
#include "config/loader.h"
#include "config/model_conversion.h"
#include "experiments/checkpoint/checkpoint.h"
#include "experiments/trainer/weights.h"
#include "gtest/gtest.h"
#include "kernels/core/context.h"

namespace lmf::experiments {
namespace {

// The model of `experiment` on the CPU, initialised from `seed`.
absl::StatusOr<std::unique_ptr<model::LanguageModel>> TinyModel(const config::Experiment& experiment,
                                                                uint64_t seed) {
  absl::StatusOr<model::ModelConfig> config = config::ToModelConfig(experiment.model());
  if (!config.ok()) return config.status();
  auto model = model::LanguageModel::Create(*config, kernels::Context::Cpu());
  if (model.ok()) (*model)->InitializeParameters(seed);
  return model;
}

TEST(ModelLoading, CheckpointAndRunFolderGiveTheSavedWeights) {
  auto experiment = config::LoadExperiment("experiments/configs/tiny.textproto", {});
  ASSERT_TRUE(experiment.ok()) << experiment.status();
  auto model = TinyModel(*experiment, 42);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::string run = std::string(getenv("TEST_TMPDIR")) + "/run";
  CheckpointContents contents;
  const HostTensors weights = ModelTensors(**model);
  contents.model = weights.tensors;
  contents.state.set_step(7);
  contents.config_text = config::ExperimentToText(*experiment);
  auto saved = SaveCheckpoint(run + "/checkpoints", contents, 2);
  ASSERT_TRUE(saved.ok()) << saved.status();

  for (const std::string& path : {*saved, run}) {
    auto loaded = LoadModelFromCheckpoint(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->weights_path, *saved + "/model.safetensors");
    EXPECT_TRUE(loaded->skipped_checkpoints.empty());
    const HostTensors host_a = ModelTensors(**model), host_b = ModelTensors(*loaded->model);
    const std::vector<NamedTensor>&a = host_a.tensors, &b = host_b.tensors;
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      int64_t n = 1;
      for (int64_t d : a[i].shape) n *= d;
      EXPECT_EQ(std::memcmp(a[i].data, b[i].data, n * sizeof(float)), 0) << a[i].name;
    }
  }
}

// A run folder `name` with checkpoints at steps 1 and 2 of the tiny model (weights from `seed`); their
// folders go into `saved`.
void SaveTwoCheckpoints(const std::string& name, int seed, std::string* run, std::string saved[2]) {
  auto experiment = config::LoadExperiment("experiments/configs/tiny.textproto", {});
  ASSERT_TRUE(experiment.ok()) << experiment.status();
  auto model = TinyModel(*experiment, seed);
  ASSERT_TRUE(model.ok()) << model.status();
  *run = std::string(getenv("TEST_TMPDIR")) + "/" + name;
  const HostTensors weights = ModelTensors(**model);
  for (int step : {1, 2}) {
    CheckpointContents contents;
    contents.model = weights.tensors;
    contents.state.set_step(step);
    contents.config_text = config::ExperimentToText(*experiment);
    auto path = SaveCheckpoint(*run + "/checkpoints", contents, 2);
    ASSERT_TRUE(path.ok()) << path.status();
    saved[step - 1] = *path;
  }
}

// A run folder whose newest checkpoint is damaged gives the older one and says why the newer was passed
// over; a trainer_state.textproto that does not parse is an error naming it, line and column.
TEST(ModelLoading, ADamagedNewestCheckpointIsSkippedAndReported) {
  std::string run, saved[2];
  ASSERT_NO_FATAL_FAILURE(SaveTwoCheckpoints("damaged_run", 5, &run, saved));
  ASSERT_TRUE(WriteFileAtomically(saved[1] + "/trainer_state.textproto", "step: banana\n").ok());
  auto loaded = LoadModelFromCheckpoint(run);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->weights_path, saved[0] + "/model.safetensors");
  ASSERT_EQ(loaded->skipped_checkpoints.size(), 1u);
  EXPECT_EQ(loaded->skipped_checkpoints[0],
            saved[1] + "/trainer_state.textproto:1:7: Expected integer, got: banana (corrupt)");
  EXPECT_EQ(LoadModelFromCheckpoint(saved[1]).status().message(), loaded->skipped_checkpoints[0]);
  ASSERT_EQ(::unlink((saved[1] + "/trainer_state.textproto").c_str()), 0);
  EXPECT_EQ(LoadModelFromCheckpoint(saved[1]).status().message(),
            saved[1] +
                ": a checkpoint folder without its trainer_state.textproto (which records the files' "
                "checksums); for the weights alone use eval --config=... --weights=" +
                saved[1] + "/model.safetensors");
}

// eval and generate read the weights and config only: a checkpoint that lost its optimizer.safetensors (which
// --resume would skip) still loads, by its folder or as its run folder's newest; a damaged model file does
// not.
TEST(ModelLoading, ACheckpointWithoutItsOptimizerStateStillGivesItsWeights) {
  std::string run, saved[2];
  ASSERT_NO_FATAL_FAILURE(SaveTwoCheckpoints("no_moments_run", 3, &run, saved));
  ASSERT_EQ(::unlink((saved[1] + "/optimizer.safetensors").c_str()), 0);
  for (const std::string& path : {saved[1], run}) {
    auto loaded = LoadModelFromCheckpoint(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->weights_path, saved[1] + "/model.safetensors");
    EXPECT_TRUE(loaded->skipped_checkpoints.empty());
  }
  ASSERT_EQ(::truncate((saved[1] + "/model.safetensors").c_str(), 64), 0);
  auto loaded = LoadModelFromCheckpoint(run);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->weights_path, saved[0] + "/model.safetensors");
  EXPECT_FALSE(LoadModelFromCheckpoint(saved[1]).ok());
}

TEST(ModelLoading, NeitherCheckpointNorRunFolderIsAnError) {
  const std::string empty = std::string(getenv("TEST_TMPDIR")) + "/empty";
  ASSERT_TRUE(MakeDirs(empty).ok());
  EXPECT_EQ(LoadModelFromCheckpoint(empty).status().message(),
            empty + " is neither a checkpoint folder nor a run folder with a good checkpoint");
}

// No machine has CUDA device 999: in a binary with the CUDA backend the CUDA error comes back (whether or
// not a GPU is present), in one without it the build hint; either way prefixed by the flags.
TEST(ModelLoading, AnUnopenableCudaDeviceIsTheDeviceErrorNamingTheFlags) {
  auto experiment = config::LoadExperiment("experiments/configs/tiny.textproto", {});
  ASSERT_TRUE(experiment.ok()) << experiment.status();
  ModelPlacement placement{config::RunConfig::CUDA, 999, config::RunConfig::FP32};
  auto loaded = LoadModelFromWeights(*experiment, "/nonexistent.safetensors", placement);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition) << loaded.status();
  const std::string message(loaded.status().message());
  EXPECT_TRUE(absl::StartsWith(message, "--device=cuda --cuda_device=999 --precision=fp32: ")) << message;
#if LMF_WITH_CUDA
  const std::string opening = "cannot open CUDA device 999: ";  // then CudaContext::Create's reason
  ASSERT_TRUE(absl::StrContains(message, opening)) << message;
  EXPECT_GT(message.size(), message.find(opening) + opening.size()) << message;
#else
  EXPECT_TRUE(absl::StrContains(message, "this binary was built without the CUDA backend")) << message;
#endif
}

}  // namespace
}  // namespace lmf::experiments
