// Loading trained models for eval/generate: from a checkpoint folder and from a run folder (its newest
// good checkpoint) the same weights come back; a folder that is neither is a clear error.
#include "experiments/model_loading.h"

#include <cstring>
#include <string>
#include <vector>

#include "base/file.h"
#include "experiments/checkpoint/checkpoint.h"
#include "experiments/config/loader.h"
#include "experiments/trainer/model_spec.h"
#include "experiments/trainer/weights.h"
#include "gtest/gtest.h"
#include "kernels/core/context.h"

namespace lmf::experiments {
namespace {

TEST(ModelLoading, CheckpointAndRunFolderGiveTheSavedWeights) {
  auto experiment = LoadExperiment("experiments/configs/tiny.textproto", {});
  ASSERT_TRUE(experiment.ok()) << experiment.status();
  auto config = ToModelConfig(experiment->model());
  ASSERT_TRUE(config.ok());
  auto model = model::LanguageModel::Create(*config, kernels::Context::Cpu());
  ASSERT_TRUE(model.ok());
  (*model)->InitializeParameters(42);
  const std::string run = std::string(getenv("TEST_TMPDIR")) + "/run";
  CheckpointContents contents;
  const HostTensors weights = ModelTensors(**model);
  contents.model = weights.tensors;
  contents.state.set_step(7);
  contents.config_text = ExperimentToText(*experiment);
  auto saved = SaveCheckpoint(run + "/checkpoints", contents, 2);
  ASSERT_TRUE(saved.ok()) << saved.status();

  for (const std::string& path : {*saved, run}) {
    auto loaded = LoadModelFromCheckpoint(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->weights_path, *saved + "/model.safetensors");
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

TEST(ModelLoading, NeitherCheckpointNorRunFolderIsAnError) {
  const std::string empty = std::string(getenv("TEST_TMPDIR")) + "/empty";
  ASSERT_TRUE(MakeDirs(empty).ok());
  EXPECT_EQ(LoadModelFromCheckpoint(empty).status().message(),
            empty + " is neither a checkpoint folder nor a run folder with a good checkpoint");
}

}  // namespace
}  // namespace lmf::experiments
