// A CPU process group over Gloo (TCP transport): the collectives that data-parallel training on CPUs needs
// (all-reduce of gradients, broadcast of initial weights, barrier). Processes meet through a file store
// (a folder every rank can see), so no coordinator process is needed. The group is an object passed into
// the code that uses it, never a global (see ../shared/STYLE.md).
#ifndef LMFORGE_DISTRIBUTED_GLOO_GROUP_H_
#define LMFORGE_DISTRIBUTED_GLOO_GROUP_H_

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gloo {
class Context;
}

namespace lmf::distributed {

struct GlooGroupOptions {
  int rank = 0;
  int world_size = 1;
  std::string rendezvous_dir;        // a folder shared by all ranks (created if missing)
  std::string hostname = "127.0.0.1";  // the address this rank listens on
  std::chrono::milliseconds timeout{30000};
};

class GlooGroup {
 public:
  // Connects all ranks (blocks until every rank has joined or the timeout passes).
  static absl::StatusOr<std::unique_ptr<GlooGroup>> Connect(const GlooGroupOptions& options);
  ~GlooGroup();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

  // In-place sum over all ranks of data[0..n).
  absl::Status AllReduceSum(float* data, size_t n);
  absl::Status AllReduceSum(double* data, size_t n);
  // Copies root's data[0..n) to every rank.
  absl::Status Broadcast(float* data, size_t n, int root);
  absl::Status Barrier();

 private:
  GlooGroup(int rank, int world_size, std::shared_ptr<gloo::Context> context);
  template <typename T>
  absl::Status AllReduceSumImpl(T* data, size_t n);

  int rank_;
  int world_size_;
  std::shared_ptr<gloo::Context> context_;
};

}  // namespace lmf::distributed

#endif  // LMFORGE_DISTRIBUTED_GLOO_GROUP_H_
