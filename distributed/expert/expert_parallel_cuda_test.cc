// Expert parallelism on CUDA: the mixture-of-experts layer's token exchange over an NCCL group of device
// buffers (GroupExpertExchange, through TokenDispatcher's DispatchSorted/CombineSorted), on 2 and 4 ranks,
// each its own process and device (forked by distributed/test_ranks.h, which also gives each a Gloo group
// that these tests use only for their rank; the exchange runs over an NcclGroup met through a fresh folder).
//
// Dispatch: every rank's rows are sorted by expert and each row holds (its rank, its row index, its expert),
// so a rank checks exactly which rows it received from whom for each of its experts, in order; on 4 ranks
// rank 1 sends no rows at all, and the last expert always receives none; Return(Send(rows)) gives every rank
// its rows back. Both layouts are covered: one local expert per rank (the all-to-all alone) and two (the arrived blocks
// rearranged into expert-major order).
//
// The layer: on 2 ranks (E = 4, two experts each; fp32 and bf16) and on 4 (one expert each; fp32), each
// rank's expert-parallel CUDA layer against the single-device CUDA layer with every expert and the same
// weights (each parameter seeded by its name): the output and input gradient of the rank's own tokens and
// both router losses equal the single-device layer's on those tokens; the gradients of the rank's experts
// equal the single-device layer's after it ran every rank's tokens (the experts see all ranks' rows). The
// router and shared experts see only their own rank's tokens (data parallelism sums them, not the layer), so
// they are not compared here. Tolerance: |ep - single| <= 1e-5 of each tensor's scale (its largest value;
// floored at 1% of the largest gradient): the same kernels run on the same rows, and only the order of the
// expert weight gradients' row sums differs (one grouped GEMM over rows from several ranks against one
// rank's rows at a time), a few fp32 ulps; bf16 storage rounds the same values alike on both sides. A lost,
// misplaced or doubled row errs by the size of a row's contribution (a dropped dh row: 8% of the scale).
//
// Tag gpu: skips without enough devices; CI runs it on the CUDA emulation with its fake NCCL
// (expert_parallel_cuda_test_emulated, 4 emulated devices).
#include <cuda_runtime.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "distributed/collectives.h"
#include "distributed/expert/expert_exchange.h"
#include "distributed/nccl_group.h"
#include "distributed/test_ranks.h"
#include "gtest/gtest.h"
#include "kernels/cast/cast.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/memory/memory.h"
#include "kernels/testing/compare.h"
#include "model/layers/moe/moe.h"

namespace lmf::distributed::expert {
namespace {

using kernels::DType;
using testing::Checks;
using testing::ExpectAllPassed;
using testing::RunRanks;

// CUDA devices, counted in a child process (a process forked after its parent used CUDA cannot use it).
int Devices() {
  return RunRanks(1, [](Collectives&) {
           int count = 0;
           return ::cudaGetDeviceCount(&count) == cudaSuccess ? std::min(count, 99) : 0;
         })[0]
      .exit_code;
}

// A fresh folder the ranks meet in, made before they are forked.
std::string MeetingFolder() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/expert_parallel_XXXXXX");
  return ::mkdtemp(path.data()) != nullptr ? path : std::string();
}

// This rank's device, and the NCCL group of `world` ranks on it; null (with a failed check) if either fails.
struct RankDevice {
  std::unique_ptr<kernels::cuda::CudaContext> cuda;
  std::unique_ptr<NcclGroup> group;
};
bool Connect(int rank, int world, const std::string& folder, Checks& checks, RankDevice& out) {
  absl::StatusOr<std::unique_ptr<kernels::cuda::CudaContext>> cuda = kernels::cuda::CudaContext::Create(rank);
  if (!checks.Ok(cuda.status(), "CudaContext::Create")) return false;
  out.cuda = *std::move(cuda);
  NcclGroupOptions options;
  options.name = "ep";
  options.rank = rank, options.world_size = world, options.device = rank, options.rendezvous_dir = folder;
  options.timeout = std::chrono::seconds(60);
  absl::StatusOr<std::unique_ptr<NcclGroup>> group = NcclGroup::Connect(options);
  if (!checks.Ok(group.status(), "NcclGroup::Connect")) return false;
  out.group = *std::move(group);
  return true;
}

// Runs body(rank, device) on `world` ranks, each with its device and NCCL group.
void OnRanks(int world, const std::function<void(int rank, RankDevice& device, Checks& checks)>& body) {
  if (Devices() < world) GTEST_SKIP() << "needs " << world << " CUDA devices";
  const std::string folder = MeetingFolder();
  ASSERT_FALSE(folder.empty()) << "mkdtemp";
  testing::RankOptions options;
  options.deadline = std::chrono::seconds(300);  // emulated kernels on a loaded 2-core machine
  ExpectAllPassed(RunRanks(
      world,
      [&](Collectives& gloo) {
        Checks checks(gloo.rank());
        RankDevice device;
        if (Connect(gloo.rank(), world, folder, checks, device)) body(gloo.rank(), device, checks);
        return checks.exit_code();
      },
      options));
}

// ---------------------------------------------------------------------------------------------------------
// Dispatch.

constexpr int64_t kWidth = 3;  // floats per row: (rank, row index, expert)

// Rank r's rows for global expert g: none on rank `empty` (-1: none) and none for the last expert.
int64_t RowsOf(int rank, int empty, int g, int experts) {
  if (rank == empty || g == experts - 1) return 0;
  return 1 + (rank + 2 * g) % 3;
}

void CheckDispatch(int rank, RankDevice& device, Checks& checks, int ranks, int experts, int empty) {
  const kernels::Context ctx = device.cuda->context();
  const int local = experts / ranks;
  // This rank's rows, sorted by expert.
  std::vector<int32_t> row_experts;
  std::vector<float> rows;
  for (int g = 0; g < experts; ++g) {
    for (int64_t j = 0; j < RowsOf(rank, empty, g, experts); ++j) {
      rows.insert(rows.end(), {float(rank), float(row_experts.size()), float(g)});
      row_experts.push_back(g);
    }
  }
  const int64_t m = static_cast<int64_t>(row_experts.size());
  // What arrives: local expert e's rows from rank 0, from rank 1, ..., each source's in its order.
  std::vector<float> want;
  std::vector<int64_t> want_counts(static_cast<size_t>(local), 0);
  for (int e = 0; e < local; ++e) {
    const int g = rank * local + e;
    for (int source = 0; source < ranks; ++source) {
      int64_t first = 0;  // the source's first row of expert g
      for (int h = 0; h < g; ++h) first += RowsOf(source, empty, h, experts);
      for (int64_t j = 0; j < RowsOf(source, empty, g, experts); ++j) {
        want.insert(want.end(), {float(source), float(first + j), float(g)});
      }
      want_counts[e] += RowsOf(source, empty, g, experts);
    }
  }
  const size_t row_bytes = kWidth * sizeof(float);
  const auto device_floats = [&](size_t count) {
    return kernels::Tensor::Empty({static_cast<int64_t>(std::max<size_t>(count, 1))}, DType::kF32, ctx.allocator);
  };
  kernels::Tensor sent = device_floats(rows.size()), received = device_floats(want.size()),
                  back = device_floats(rows.size());
  kernels::CopyToDevice(ctx, sent.data(), rows.data(), rows.size() * sizeof(float));
  GroupExpertExchange exchange(*device.group);
  std::vector<int64_t> counts;
  std::unique_ptr<model::moe::ExpertExchange::Plan> plan =
      exchange.Route(ctx, row_experts.data(), m, experts, &counts);
  checks.Expect(counts == want_counts, "the rows each local expert receives");
  checks.Expect(plan->received_rows() * kWidth == static_cast<int64_t>(want.size()), "received rows");
  exchange.Send(ctx, *plan, sent.data(), row_bytes, received.data());
  std::vector<float> got(want.size());
  kernels::CopyToHost(ctx, got.data(), received.data(), got.size() * sizeof(float));
  checks.Expect(got == want, "each local expert's rows from each rank, in order (who sent what)");
  exchange.Return(ctx, *plan, received.data(), row_bytes, back.data());
  std::vector<float> returned(rows.size());
  kernels::CopyToHost(ctx, returned.data(), back.data(), returned.size() * sizeof(float));
  checks.Expect(returned == rows, "Return(Send(rows)) = rows");
  checks.Ok(exchange.status(), "the exchange's status");
}

TEST(ExpertParallelCuda, DispatchOnTwoRanksTwoExpertsEach) {
  OnRanks(2, [](int rank, RankDevice& device, Checks& checks) { CheckDispatch(rank, device, checks, 2, 4, -1); });
}
TEST(ExpertParallelCuda, DispatchOnFourRanksOneExpertEachRankOneEmpty) {
  OnRanks(4, [](int rank, RankDevice& device, Checks& checks) { CheckDispatch(rank, device, checks, 4, 4, 1); });
}
TEST(ExpertParallelCuda, DispatchOnFourRanksTwoExpertsEachRankOneEmpty) {
  OnRanks(4, [](int rank, RankDevice& device, Checks& checks) { CheckDispatch(rank, device, checks, 4, 8, 1); });
}

// ---------------------------------------------------------------------------------------------------------
// The layer.

constexpr int64_t kB = 2, kT = 3, kC = 16;

model::MoeSpec Spec() {
  model::MoeSpec spec;
  spec.n_experts = 4, spec.top_k = 2, spec.d_expert = 8, spec.router = model::RouterKind::kSoftmaxTopK;
  spec.aux_loss = 0.01, spec.router_z_loss = 0.001, spec.shared_d_ff = 8;
  return spec;
}

model::ModelConfig Model() { return model::Cs336Config(32, 16, kC, 1, 2, 16); }

// Each parameter N(0, 0.3) from a seed of its name, so that a layer holding some of the experts has the
// same weights as one holding all of them.
void SetWeights(const model::MixtureOfExperts& layer, const kernels::Context& ctx) {
  layer.VisitParameters("ffn", [&](const std::string& name, const model::Parameter& p) {
    std::vector<float> v = kernels::testing::RandomNormal(p.value.numel(), Fingerprint(name), 0.3f);
    kernels::CopyToDevice(ctx, p.value.data(), v.data(), v.size() * sizeof(float));
    if (p.compute.data() != p.value.data()) {
      kernels::Cast(ctx, {p.value.numel(), DType::kF32, p.compute.dtype(), p.value.data(), p.compute.data()});
    }
  });
}

std::vector<float> ToHost(const kernels::Context& ctx, const kernels::Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  kernels::CopyToHostAsFloats(ctx, out.data(), t.data(), t.dtype(), t.numel());
  return out;
}

// Device values of dtype from host floats.
kernels::Tensor Upload(const kernels::Context& ctx, const std::vector<float>& v, DType dtype) {
  kernels::Tensor f = kernels::Tensor::Empty({static_cast<int64_t>(v.size())}, DType::kF32, ctx.allocator);
  kernels::CopyToDevice(ctx, f.data(), v.data(), v.size() * sizeof(float));
  if (dtype == DType::kF32) return f;
  kernels::Tensor t = kernels::Tensor::Empty({static_cast<int64_t>(v.size())}, dtype, ctx.allocator);
  kernels::Cast(ctx, {f.numel(), DType::kF32, dtype, f.data(), t.data()});
  return t;
}

struct Pass {
  std::vector<float> out, dh;
  double balance_loss = 0, z_loss = 0;
};

// One training forward and backward of rank `source`'s tokens (inputs from seeds of the rank).
Pass ForwardBackward(const model::MixtureOfExperts& layer, const kernels::Context& ctx, DType dtype, int source) {
  const int64_t n = kB * kT;
  using kernels::testing::RandomNormal;
  kernels::Tensor h = Upload(ctx, RandomNormal(n * kC, 10 + source), dtype);
  kernels::Tensor dout = Upload(ctx, RandomNormal(n * kC, 20 + source), dtype);
  kernels::Tensor out = kernels::Tensor::Empty({n * kC}, dtype, ctx.allocator);
  kernels::Tensor dh = kernels::Tensor::Empty({n * kC}, dtype, ctx.allocator);
  std::unique_ptr<model::LayerActivations> saved = layer.NewActivations();
  model::Scratch scratch(ctx.allocator);
  const model::ForwardMode mode = model::ForwardMode::Training(/*seed=*/11, /*step=*/3, /*first_token=*/0);
  layer.Forward(ctx, kB, kT, h.data(), out.data(), /*accumulate=*/false, *saved, mode);
  layer.Backward(ctx, h.data(), *saved, dout.data(), dh.data(), scratch);
  const auto& moe = static_cast<const model::MoeActivations&>(*saved);
  return {ToHost(ctx, out), ToHost(ctx, dh), moe.balance_loss, moe.z_loss};
}

double Scale(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s = std::max(s, std::fabs(double{x}));
  return s;
}

void CheckLayer(int rank, RankDevice& device, Checks& checks, int ranks, DType dtype) {
  const kernels::Context ctx = device.cuda->context();
  const model::MoeSpec spec = Spec();
  model::StepCounters counters;
  model::MixtureOfExperts single(spec, Model(), ctx, dtype, &counters);
  GroupExpertExchange exchange(*device.group);
  model::MixtureOfExperts parallel(spec, Model(), ctx, dtype, &counters, &exchange);
  SetWeights(single, ctx);
  SetWeights(parallel, ctx);
  Pass want;
  for (int source = 0; source < ranks; ++source) {  // the experts' gradients sum every rank's rows
    Pass pass = ForwardBackward(single, ctx, dtype, source);
    if (source == rank) want = pass;
  }
  const Pass got = ForwardBackward(parallel, ctx, dtype, rank);
  checks.Ok(exchange.status(), "the exchange's status");
  std::map<std::string, std::vector<float>> want_grads, got_grads;
  single.VisitParameters("ffn", [&](const std::string& name, const model::Parameter& p) {
    if (name.find(".experts.") != std::string::npos) want_grads[name] = ToHost(ctx, p.grad);
  });
  parallel.VisitParameters("ffn", [&](const std::string& name, const model::Parameter& p) {
    if (name.find(".experts.") != std::string::npos) got_grads[name] = ToHost(ctx, p.grad);
  });
  checks.Expect(got_grads.size() * ranks == want_grads.size(), "the rank holds E/ep experts' parameters");
  double largest = 0;
  for (const auto& [name, g] : want_grads) largest = std::max(largest, Scale(g));
  const auto close = [&](const std::string& what, const std::vector<float>& g, const std::vector<float>& w) {
    if (!checks.Expect(g.size() == w.size(), what + ": size")) return;
    const double scale = std::max(Scale(w), 1e-2 * largest);
    double worst = 0;
    for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::fabs(double{g[i]} - w[i]));
    checks.Expect(worst <= 1e-5 * scale, absl::StrCat(what, ": max error ", worst, " over 1e-5 of ", scale));
  };
  close("out", got.out, want.out);
  close("dh", got.dh, want.dh);
  for (const auto& [name, g] : got_grads) {
    if (checks.Expect(want_grads.count(name) == 1, name + " is one of the single layer's")) {
      close("grad of " + name, g, want_grads.at(name));
    }
  }
  checks.Expect(std::fabs(got.balance_loss - want.balance_loss) <= 1e-5 * std::fabs(want.balance_loss) + 1e-12,
                "balance loss");
  checks.Expect(std::fabs(got.z_loss - want.z_loss) <= 1e-5 * std::fabs(want.z_loss) + 1e-12, "z-loss");
}

TEST(ExpertParallelCuda, LayerOnTwoRanksEqualsOneDeviceF32) {
  OnRanks(2, [](int rank, RankDevice& device, Checks& checks) { CheckLayer(rank, device, checks, 2, DType::kF32); });
}
TEST(ExpertParallelCuda, LayerOnFourRanksEqualsOneDeviceF32) {
  OnRanks(4, [](int rank, RankDevice& device, Checks& checks) { CheckLayer(rank, device, checks, 4, DType::kF32); });
}
TEST(ExpertParallelCuda, LayerOnTwoRanksEqualsOneDeviceBf16) {
  OnRanks(2, [](int rank, RankDevice& device, Checks& checks) { CheckLayer(rank, device, checks, 2, DType::kBF16); });
}

}  // namespace
}  // namespace lmf::distributed::expert
