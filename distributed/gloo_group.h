// A CPU process group over Gloo (TCP transport): the collectives that data-parallel training on CPUs needs
// (all-reduce of gradients, broadcast of initial weights, barrier). Processes meet through a file store
// (a folder every rank can see), so no coordinator process is needed. The group is an object passed into
// the code that uses it, never a global (see ../shared/STYLE.md).
#ifndef LMFORGE_DISTRIBUTED_GLOO_GROUP_H_
#define LMFORGE_DISTRIBUTED_GLOO_GROUP_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "distributed/collectives.h"

namespace gloo {
class Context;
}

namespace lmf::distributed {

struct GlooGroupOptions {
  int rank = 0;
  int world_size = 1;
  std::string rendezvous_dir;        // a folder shared by all ranks (created if missing)
  std::string hostname = "127.0.0.1";  // the address this rank listens on
  std::chrono::milliseconds timeout{30000};          // for each collective
  std::chrono::milliseconds connect_timeout{30000};  // for each other rank's address, and for each connection
  // Asked about every 100 ms while this rank waits for the others, both to publish their addresses and to
  // connect to it (a rank that dies in between never connects); a non-empty answer ends Connect at once with
  // that text in its error (a launcher that sees a rank's process exit says so instead of waiting out
  // connect_timeout). Unset: wait the whole timeout.
  std::function<std::string()> abort_connect;
};

class GlooGroup : public Collectives {
 public:
  // Connects all ranks (blocks until every rank has joined or the timeout passes).
  static absl::StatusOr<std::unique_ptr<GlooGroup>> Connect(const GlooGroupOptions& options);
  ~GlooGroup() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }

  absl::Status AllReduceSum(float* data, size_t n) override;
  absl::Status AllReduceSum(double* data, size_t n) override;
  absl::Status Broadcast(float* data, size_t n, int root) override;
  absl::Status Barrier() override;

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
