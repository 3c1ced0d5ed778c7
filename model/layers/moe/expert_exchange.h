// ExpertExchange: what a mixture-of-experts layer needs from expert parallelism, as a small interface the
// step strategy hands in (distributed/expert/expert_exchange.h implements it over a process group), so the
// layer stays single-device code that names no transport. The ep ranks of an expert-parallel group hold
// contiguous blocks of the E experts (rank q: experts [q E/ep, (q+1) E/ep)); every rank routes its own
// tokens over all E experts and sends each kept assignment's row to the rank that holds its expert.
//
//   plan = exchange.Route(ctx, row_experts, m, E, &counts)  // m rows (sorted by expert) -> counts (E/ep)
//   exchange.Send(ctx, *plan, rows, row_bytes, received)    // rows (M, C) -> received (R, C), local expert major
//   exchange.Return(ctx, *plan, out, row_bytes, rows_out)   // received (R, C) -> rows (M, C), back to their owners
//
// Every call is a collective of the group: each rank calls the same sequence (the layers' forwards and
// backwards run in the same order on every rank of a group), with its own m (0 allowed). Errors (a dead or
// stalled peer) are sticky: the first one is kept in status(), later calls move nothing (their outputs are
// not to be used), and the step strategy reports status() after the step (a layer's Forward returns none).
// The rows live on ctx's device, as the layer's (host fp32 on the CPU; fp32 or bf16 on CUDA), and move as
// bytes; ctx's stream orders the exchange after the kernels that wrote them. The counts and the plan are on
// the host.
#ifndef LMFORGE_MODEL_LAYERS_MOE_EXPERT_EXCHANGE_H_
#define LMFORGE_MODEL_LAYERS_MOE_EXPERT_EXCHANGE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "kernels/core/context.h"

namespace lmf::model::moe {

class ExpertExchange {
 public:
  // Where one forward's rows went and where the rows received came from; kept in the layer's activations
  // for the backward, which moves gradients along the same plan.
  class Plan {
   public:
    virtual ~Plan() = default;
    virtual int64_t received_rows() const = 0;  // R
  };

  virtual ~ExpertExchange() = default;
  virtual int ranks() const = 0;  // ep
  virtual int rank() const = 0;   // this rank's index in the group: it holds experts [rank E/ep, (rank+1) E/ep)

  // row_experts (M): the global expert of each of this rank's rows, non-decreasing -> the plan, and
  // counts (E/ep): the rows each local expert receives from every rank (rows [offset e, + counts[e]) of R).
  // row_experts is host memory.
  virtual std::unique_ptr<Plan> Route(const kernels::Context& ctx, const int32_t* row_experts, int64_t m,
                                      int64_t num_experts, std::vector<int64_t>* counts) = 0;
  // rows (M, row_bytes) -> received (R, row_bytes) written: local expert 0's rows from rank 0, from rank 1,
  // ..., then local expert 1's; within one source, in the source's row order. No overlap.
  virtual void Send(const kernels::Context& ctx, const Plan& plan, const void* rows, size_t row_bytes,
                    void* received) = 0;
  // received (R, row_bytes) in Send's layout -> rows (M, row_bytes) written, each back in its sender's row
  // order. No overlap.
  virtual void Return(const kernels::Context& ctx, const Plan& plan, const void* received, size_t row_bytes,
                      void* rows) = 0;

  // OK, or the first error of any call.
  virtual absl::Status status() const = 0;
};

}  // namespace lmf::model::moe

#endif  // LMFORGE_MODEL_LAYERS_MOE_EXPERT_EXCHANGE_H_
