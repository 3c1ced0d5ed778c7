// Weights by name: a model's tensors written to safetensors load back into a fresh model exactly, and
// a missing tensor, a wrong shape or an unknown tensor is an error naming it. Also the resume guard: a
// checkpoint of a different model is refused.
#include "experiments/trainer/weights.h"

#include <cstring>
#include <string>

#include "experiments/checkpoint/safetensors.h"
#include "gtest/gtest.h"
#include "kernels/core/context.h"
#include "model/config/config.h"

namespace lmf::experiments {
namespace {

std::unique_ptr<model::LanguageModel> Make(uint64_t seed) {
  auto m = model::LanguageModel::Create(model::Cs336Config(50, 8, 16, 2, 2, 24), kernels::Context::Cpu());
  EXPECT_TRUE(m.ok()) << m.status();
  (*m)->InitializeParameters(seed);
  return *std::move(m);
}

std::string Serialize(const std::vector<NamedTensor>& tensors) {
  SafetensorsWriter writer;
  for (const NamedTensor& t : tensors) writer.AddF32(t.name, t.shape, t.data);
  return writer.Serialize();
}

TEST(Weights, RoundTripIntoAFreshModel) {
  auto source = Make(1);
  auto target = Make(2);
  auto reader = SafetensorsReader::FromBytes(Serialize(ModelTensors(*source)), "w.safetensors");
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_TRUE(LoadWeights(*reader, *target).ok());
  const std::vector<NamedTensor> a = ModelTensors(*source), b = ModelTensors(*target);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : a[i].shape) n *= d;
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(std::memcmp(a[i].data, b[i].data, n * sizeof(float)), 0) << a[i].name;
  }
}

TEST(Weights, MissingWrongShapeAndUnknownTensorsAreErrors) {
  auto model = Make(1);
  std::vector<NamedTensor> tensors = ModelTensors(*model);
  std::vector<NamedTensor> missing(tensors.begin() + 1, tensors.end());
  auto reader = SafetensorsReader::FromBytes(Serialize(missing), "w.safetensors");
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(LoadWeights(*reader, *model).message(), "w.safetensors: no tensor named \"token_embeddings.weight\"");

  std::vector<NamedTensor> reshaped = tensors;
  reshaped[0].shape = {16, 50};
  reader = SafetensorsReader::FromBytes(Serialize(reshaped), "w.safetensors");
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(LoadWeights(*reader, *model).message(),
            "w.safetensors: tensor \"token_embeddings.weight\" has shape [16, 50], expected [50, 16]");

  std::vector<NamedTensor> extra = tensors;
  extra.push_back({"rope.cache", {2}, tensors[0].data});
  reader = SafetensorsReader::FromBytes(Serialize(extra), "w.safetensors");
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(LoadWeights(*reader, *model).message(), "w.safetensors: tensors the model does not have: rope.cache");
}

}  // namespace
}  // namespace lmf::experiments
