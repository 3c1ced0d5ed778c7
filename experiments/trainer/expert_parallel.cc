// The trainer's expert-parallel groups and checkpoint gathering (see expert_parallel.h).
#include "experiments/trainer/expert_parallel.h"

#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/memory/memory.h"

namespace lmf::experiments {

absl::StatusOr<std::unique_ptr<ExpertParallelRun>> ExpertParallelRun::Build(distributed::Collectives& world, int data,
                                                                            int expert,
                                                                            distributed::Collectives* device_group) {
  const distributed::MeshShape shape{data, 1, expert};
  absl::StatusOr<std::unique_ptr<distributed::ParallelMesh>> mesh = distributed::ParallelMesh::Build(world, shape);
  if (!mesh.ok()) return mesh.status();
  std::unique_ptr<ExpertParallelRun> run(new ExpertParallelRun());
  run->mesh_ = *std::move(mesh);
  if (device_group != nullptr) {
    absl::StatusOr<std::unique_ptr<distributed::ParallelMesh>> device_mesh =
        distributed::ParallelMesh::Build(*device_group, shape);
    if (!device_mesh.ok()) return device_mesh.status();
    run->device_mesh_ = *std::move(device_mesh);
  }
  distributed::ParallelMesh& rows = run->device_mesh_ != nullptr ? *run->device_mesh_ : *run->mesh_;
  run->exchange_ = std::make_unique<distributed::expert::GroupExpertExchange>(rows.expert());
  return run;
}

namespace {

// The name that expert-parallel rank `q` gives the block rank 0 calls `name`: "layers.{i}.ffn.experts.{e}.w"
// with e moved by q times the layer's experts per rank.
std::string NameOnRank(const model::LanguageModel& model, const std::string& name, int q, int ranks) {
  static const std::regex expert(R"(^(layers\.(\d+)\..*\.experts\.)(\d+)(\..+)$)");
  std::smatch m;
  LMF_CHECK(std::regex_match(name, m, expert)) << "expert block " << name << " is not named layers.{i}...experts.{e}";
  const int64_t layer = std::stoll(m[2].str());
  const int64_t per_rank = model.config().layer(layer).channel_mixer.moe.n_experts / ranks;
  return absl::StrCat(m[1].str(), std::stoll(m[3].str()) + q * per_rank, m[4].str());
}

}  // namespace

absl::Status ExpertParallelRun::GatherExpertBlocks(const model::LanguageModel& model, const model::AdamW& adamw,
                                                   HostTensors* weights, HostTensors* optimizer_state) {
  if (mesh_->coordinates().data != 0 || mesh_->coordinates().pipeline != 0) return absl::OkStatus();
  return experiments::GatherExpertBlocks(mesh_->expert(), model, adamw, weights, optimizer_state);
}

absl::Status GatherExpertBlocks(distributed::Collectives& group, const model::LanguageModel& model,
                                const model::AdamW& adamw, HostTensors* weights, HostTensors* optimizer_state) {
  const int ranks = group.world_size();
  const bool lead = group.rank() == 0;
  absl::Status status = absl::OkStatus();
  std::vector<float> gathered, value, m, v;
  const kernels::Context host = kernels::Context::Cpu();  // `gathered` is host memory on every device
  // One block's tensor from every rank; rank 0 keeps the others' under their names.
  const auto gather = [&](const std::string& name, const std::vector<int64_t>& shape, const float* data, size_t n,
                          HostTensors* into) {
    gathered.resize(n * ranks);
    status = group.AllGather(distributed::Buffer::Host(data, n), distributed::Buffer::Host(gathered.data(), gathered.size()));
    for (int q = 1; status.ok() && lead && q < ranks; ++q) {
      into->AddFromDevice(host, NameOnRank(model, name, q, ranks), shape, gathered.data() + q * n);
    }
  };
  model.VisitParameters([&](const std::string& name, const model::Parameter& p) {
    if (!status.ok() || !p.expert_shard) return;
    std::vector<int64_t> shape;
    for (int i = 0; i < p.value.rank(); ++i) shape.push_back(p.value.dim(i));
    const size_t n = static_cast<size_t>(p.value.numel());
    value.resize(n);
    kernels::CopyToHost(model.context(), value.data(), p.data(), n * sizeof(float));
    gather(name, shape, value.data(), n, weights);
    if (!status.ok()) return;
    if (!adamw.ReadState(name, &m, &v)) {  // held for every block (ZeRO-1: consolidated onto the first replica)
      status = absl::InternalError(absl::StrCat("expert parallel checkpoint: the optimizer holds no moments for ", name));
      return;
    }
    // Moments are named after their parameter ("<name>.exp_avg"), so renaming the parameter renames them.
    const auto moment = [&](const std::vector<float>& values, const char* suffix) {
      gathered.resize(n * ranks);
      status = group.AllGather(distributed::Buffer::Host(values.data(), n),
                               distributed::Buffer::Host(gathered.data(), gathered.size()));
      for (int q = 1; status.ok() && lead && q < ranks; ++q) {
        optimizer_state->AddFromDevice(host, NameOnRank(model, name, q, ranks) + suffix, shape,
                                       gathered.data() + q * n);
      }
    };
    moment(m, ".exp_avg");
    if (status.ok()) moment(v, ".exp_avg_sq");
  });
  return status;
}

}  // namespace lmf::experiments
