// Weights by name: a model's tensors written to safetensors load back into a fresh model exactly, the
// saved tensors are a host snapshot (the staging path every device takes), and a missing tensor, a wrong
// shape or an unknown tensor is an error naming it; a stage slice loads its own names from a whole file.
#include "experiments/trainer/weights.h"

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
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
  auto reader = SafetensorsReader::FromBytes(Serialize(ModelTensors(*source).tensors), "w.safetensors");
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_TRUE(LoadWeights(*reader, *target).ok());
  const HostTensors host_a = ModelTensors(*source), host_b = ModelTensors(*target);
  const std::vector<NamedTensor>&a = host_a.tensors, &b = host_b.tensors;
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : a[i].shape) n *= d;
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(std::memcmp(a[i].data, b[i].data, n * sizeof(float)), 0) << a[i].name;
  }
}

// A mixture of experts' expert-selection bias is model state, not a parameter: it is saved and loaded with
// the weights under its name.
TEST(Weights, TheExpertBiasRoundTrips) {
  model::ModelConfig config = model::Cs336Config(50, 8, 16, 2, 2, 24);
  model::MoeSpec moe;
  moe.n_experts = 4, moe.top_k = 2, moe.d_expert = 8, moe.expert_bias = true;
  config.moe = moe;
  auto source = model::LanguageModel::Create(config, kernels::Context::Cpu());
  auto target = model::LanguageModel::Create(config, kernels::Context::Cpu());
  ASSERT_TRUE(source.ok() && target.ok()) << source.status() << target.status();
  (*source)->InitializeParameters(1);
  int biases = 0;
  (*source)->VisitBuffers([&](const std::string&, const kernels::Tensor& bias) {
    for (int64_t i = 0; i < bias.numel(); ++i) bias.data<float>()[i] = 0.25f * static_cast<float>(i + biases);
    ++biases;
  });
  ASSERT_EQ(biases, 2);
  const HostTensors saved = ModelTensors(**source);
  EXPECT_EQ(saved.tensors.back().name, "layers.1.ffn.router.expert_bias");
  auto reader = SafetensorsReader::FromBytes(Serialize(saved.tensors), "w.safetensors");
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_TRUE(LoadWeights(*reader, **target).ok());
  int checked = 0;
  (*target)->VisitBuffers([&](const std::string& name, const kernels::Tensor& bias) {
    for (int64_t i = 0; i < bias.numel(); ++i) {
      EXPECT_EQ(bias.data<float>()[i], 0.25f * static_cast<float>(i + checked)) << name << " " << i;
    }
    ++checked;
  });
  EXPECT_EQ(checked, 2);
}

TEST(Weights, SavedTensorsAreAHostSnapshotOfTheMasterWeights) {
  auto model = Make(1);
  const HostTensors snapshot = ModelTensors(*model);
  std::vector<std::vector<float>> before;
  for (const NamedTensor& t : snapshot.tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    before.emplace_back(t.data, t.data + n);
  }
  size_t i = 0;
  model->VisitParameters([&](const std::string& name, const model::Parameter& p) {
    ASSERT_EQ(snapshot.tensors[i].name, name);
    EXPECT_NE(snapshot.tensors[i].data, p.data()) << name << ": a copy, not a pointer into the model";
    ++i;
  });
  model->InitializeParameters(2);  // the model changes; the snapshot must not
  for (size_t k = 0; k < snapshot.tensors.size(); ++k) {
    EXPECT_EQ(std::memcmp(snapshot.tensors[k].data, before[k].data(), before[k].size() * sizeof(float)), 0)
        << snapshot.tensors[k].name;
  }
}

TEST(Weights, MissingWrongShapeAndUnknownTensorsAreErrors) {
  auto model = Make(1);
  const HostTensors host = ModelTensors(*model);
  const std::vector<NamedTensor>& tensors = host.tensors;
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

  // Non-finite weights (a hand-edited or corrupted file with a valid CRC, a diverged model saved elsewhere).
  for (const float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    int64_t numel = 1;
    for (int64_t d : tensors[2].shape) numel *= d;
    std::vector<float> values(tensors[2].data, tensors[2].data + numel);
    values[3] = bad;
    std::vector<NamedTensor> poisoned = tensors;
    poisoned[2].data = values.data();
    reader = SafetensorsReader::FromBytes(Serialize(poisoned), "w.safetensors");
    ASSERT_TRUE(reader.ok());
    const absl::Status status = LoadWeights(*reader, *model);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(status.message(), "w.safetensors: tensor " + tensors[2].name + " holds " + absl::StrCat(bad) +
                                    " at element 3; weights must be finite");
  }
}

// A stage slice takes its own tensors from the whole model's file and leaves the other stages' (the
// resharding load of a pipeline run); a name no stage of the model has is still an error, and a whole
// model's LoadWeights still refuses a file with another model's extra layer.
TEST(Weights, ASliceLoadsItsNamesFromTheWholeFile) {
  auto whole = Make(1);
  const HostTensors host = ModelTensors(*whole);
  auto reader = SafetensorsReader::FromBytes(Serialize(host.tensors), "w.safetensors");
  ASSERT_TRUE(reader.ok());
  const model::ModelConfig config = whole->config();
  for (const model::LayerRange range : {model::LayerRange{0, 1}, model::LayerRange{1, 2}}) {
    auto slice = model::LanguageModel::Create(config, kernels::Context::Cpu(), kernels::DType::kF32, range);
    ASSERT_TRUE(slice.ok()) << slice.status();
    EXPECT_EQ(LoadWeights(*reader, **slice).code(), absl::StatusCode::kInvalidArgument)
        << "the whole-model load";
    ASSERT_TRUE(LoadSliceWeights(*reader, **slice).ok()) << range.first;
    (*slice)->VisitParameters([&](const std::string& name, const model::Parameter& p) {
      for (const NamedTensor& t : host.tensors) {
        if (t.name == name) {
          EXPECT_EQ(std::memcmp(t.data, p.value.data(), p.value.nbytes()), 0) << name;
        }
      }
    });
  }
  std::vector<NamedTensor> extra = host.tensors;
  extra.push_back({"layers.2.attn.q_proj.weight", {2}, host.tensors[0].data});  // the model has 2 layers
  extra.push_back({"rope.cache", {2}, host.tensors[0].data});
  reader = SafetensorsReader::FromBytes(Serialize(extra), "w.safetensors");
  ASSERT_TRUE(reader.ok());
  auto first = model::LanguageModel::Create(config, kernels::Context::Cpu(), kernels::DType::kF32, {0, 1});
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(LoadSliceWeights(*reader, **first).message(),
            "w.safetensors: tensors the model does not have: layers.2.attn.q_proj.weight, rope.cache");
}

// Sparse upcycling: a dense model's weights into a mixture of experts of the same shape whose experts copy
// the FFN; with gates that sum to 1 (top-k then softmax; normalised softmax gates) the MoE computes the
// dense model's loss. The MoE runs each expert's rows through their own GEMM (other row blocking than the
// dense GEMM over all rows), so the two agree to fp32 rounding: 1e-5 relative.
TEST(Weights, UpcycledExpertsComputeTheDenseModel) {
  const model::ModelConfig dense_config = model::Cs336Config(50, 8, 16, 2, 2, 24);
  auto dense = Make(1);
  auto reader = SafetensorsReader::FromBytes(Serialize(ModelTensors(*dense).tensors), "dense.safetensors");
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<int32_t> ids(2 * 8), targets(2 * 8);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((7 * i + 3) % 50), targets[i] = (ids[i] + 1) % 50;
  const absl::StatusOr<double> want = dense->ForwardWithLoss(ids.data(), targets.data(), 2, 8);
  ASSERT_TRUE(want.ok()) << want.status();
  for (const auto& [router, normalize] : {std::make_pair(model::RouterKind::kTopKSoftmax, false),
                                          std::make_pair(model::RouterKind::kSoftmaxTopK, true)}) {
    model::ModelConfig config = dense_config;
    model::MoeSpec moe;
    moe.n_experts = 4, moe.top_k = 2, moe.d_expert = 24, moe.router = router, moe.normalize_gates = normalize;
    config.moe = moe;
    auto upcycled = model::LanguageModel::Create(config, kernels::Context::Cpu());
    ASSERT_TRUE(upcycled.ok()) << upcycled.status();
    (*upcycled)->InitializeParameters(2);
    ASSERT_TRUE(LoadUpcycledWeights(*reader, **upcycled).ok());
    const absl::StatusOr<double> got = (*upcycled)->ForwardWithLoss(ids.data(), targets.data(), 2, 8);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_NEAR(*got, *want, 1e-5 * *want) << "normalize " << normalize;
  }
  // A MoE of another expert width has no place for the dense FFN.
  model::ModelConfig narrow = dense_config;
  model::MoeSpec moe;
  moe.n_experts = 4, moe.top_k = 2, moe.d_expert = 12;
  narrow.moe = moe;
  auto wrong = model::LanguageModel::Create(narrow, kernels::Context::Cpu());
  ASSERT_TRUE(wrong.ok());
  const absl::Status status = LoadUpcycledWeights(*reader, **wrong);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(std::string(status.message()).find("layers.0.ffn.w1.weight"), std::string::npos) << status;
}

}  // namespace
}  // namespace lmf::experiments
