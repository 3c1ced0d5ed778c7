// The collectives data-parallel training needs, as an interface the trainer is written against: it never
// names a transport. GlooGroup (CPU processes over TCP) implements it; an NCCL group for GPUs would too.
#ifndef LMFORGE_DISTRIBUTED_COLLECTIVES_H_
#define LMFORGE_DISTRIBUTED_COLLECTIVES_H_

#include <cstddef>

#include "absl/status/status.h"

namespace lmf::distributed {

class Collectives {
 public:
  virtual ~Collectives() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // In-place sum over all ranks of data[0..n); every rank gets the same values.
  virtual absl::Status AllReduceSum(float* data, size_t n) = 0;
  virtual absl::Status AllReduceSum(double* data, size_t n) = 0;
  // Copies root's data[0..n) to every rank.
  virtual absl::Status Broadcast(float* data, size_t n, int root) = 0;
  virtual absl::Status Barrier() = 0;
};

}  // namespace lmf::distributed

#endif  // LMFORGE_DISTRIBUTED_COLLECTIVES_H_
