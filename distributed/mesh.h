// The data x pipeline x expert layout of a run's ranks, built once from the world group, and each rank's
// group along each dimension, handed out by name. The groups are objects passed into the code that uses
// them (Megatron-Core's ProcessGroupCollection, not its parallel_state globals).
//
// Layout: rank = (pipeline_index * data + data_index) * expert + expert_index. Expert varies fastest, then
// data, then pipeline. The busier a dimension's traffic, the closer its members (on one node, or one NVLink
// domain, when ranks are packed per node): expert all-to-alls run in every MoE layer, forward and backward,
// on the critical path; data's gradient reduce moves the whole model once per step; pipeline sends one
// activation per micro-batch per stage boundary, the least, so pipeline stages are what spans nodes. So each
// stage is one contiguous block of data x expert ranks. (Megatron-Core's default order tp-cp-ep-dp-pp and
// torchtitan's pipeline-outermost mesh make the same choice.)
#ifndef LMFORGE_DISTRIBUTED_MESH_H_
#define LMFORGE_DISTRIBUTED_MESH_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "distributed/collectives.h"

namespace lmf::distributed {

struct MeshShape {
  int data = 1;
  int pipeline = 1;
  int expert = 1;
  int size() const { return data * pipeline * expert; }
  std::string ToString() const;  // "data=2 x pipeline=2 x expert=1"
};

// A rank's index along each dimension.
struct MeshCoordinates {
  int data = 0;
  int pipeline = 0;
  int expert = 0;
  bool operator==(const MeshCoordinates& o) const {
    return data == o.data && pipeline == o.pipeline && expert == o.expert;
  }
};

// The layout above, both ways.
int MeshRank(const MeshShape& shape, const MeshCoordinates& at);
MeshCoordinates MeshCoordinatesOf(const MeshShape& shape, int rank);

class ParallelMesh {
 public:
  // Collective over `world` (every rank calls it, with the same shape): makes every data, pipeline and
  // expert group (NewSubgroup, in one order on every rank; a dimension of size 1 gives groups of one rank)
  // and keeps this rank's. world.world_size() must be shape.size().
  static absl::StatusOr<std::unique_ptr<ParallelMesh>> Build(Collectives& world, const MeshShape& shape);

  const MeshShape& shape() const { return shape_; }
  const MeshCoordinates& coordinates() const { return coordinates_; }  // this rank's

  // This rank's group along each dimension; its rank there is its coordinate along it. Named
  // "dp[pp=1,ep=0]" (the data group of the ranks at pipeline 1, expert 0), "pp[dp=0,ep=0]", "ep[pp=1,dp=0]".
  Collectives& data() { return *data_; }
  Collectives& pipeline() { return *pipeline_; }
  Collectives& expert() { return *expert_; }
  // The data x expert ranks of this rank's pipeline stage (one contiguous block of ranks), "stage[pp=1]":
  // the replicas of its dense parameters when experts are spread over them. data() when expert = 1.
  Collectives& stage() { return stage_ != nullptr ? *stage_ : *data_; }

 private:
  ParallelMesh() = default;

  MeshShape shape_;
  MeshCoordinates coordinates_;
  std::unique_ptr<Collectives> data_;
  std::unique_ptr<Collectives> pipeline_;
  std::unique_ptr<Collectives> expert_;
  std::unique_ptr<Collectives> stage_;  // expert > 1 only
};

}  // namespace lmf::distributed

#endif  // LMFORGE_DISTRIBUTED_MESH_H_
