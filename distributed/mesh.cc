// ParallelMesh and the layout functions (see mesh.h).
#include "distributed/mesh.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lmf::distributed {

std::string MeshShape::ToString() const {
  return absl::StrCat("data=", data, " x pipeline=", pipeline, " x expert=", expert);
}

int MeshRank(const MeshShape& shape, const MeshCoordinates& at) {
  return (at.pipeline * shape.data + at.data) * shape.expert + at.expert;
}

MeshCoordinates MeshCoordinatesOf(const MeshShape& shape, int rank) {
  MeshCoordinates at;
  at.expert = rank % shape.expert;
  at.data = rank / shape.expert % shape.data;
  at.pipeline = rank / (shape.expert * shape.data);
  return at;
}

namespace {

// Every group along one dimension (`along`, of `size` ranks, named `name`), each made from the ranks whose
// other coordinates are those of a rank at 0 along it, in rank order; `mine` gets this rank's.
absl::Status MakeGroups(Collectives& world, const MeshShape& shape, int MeshCoordinates::*along, int size,
                        const char* name, std::unique_ptr<Collectives>& mine) {
  struct Named {
    const char* name;
    int MeshCoordinates::*coordinate;
  };
  const Named layout[] = {{"pp", &MeshCoordinates::pipeline},  // slowest first
                          {"dp", &MeshCoordinates::data},
                          {"ep", &MeshCoordinates::expert}};
  for (int first = 0; first < shape.size(); ++first) {
    MeshCoordinates at = MeshCoordinatesOf(shape, first);
    if (at.*along != 0) continue;
    std::vector<std::string> fixed;
    for (const Named& other : layout) {
      if (other.coordinate != along) fixed.push_back(absl::StrCat(other.name, "=", at.*other.coordinate));
    }
    std::vector<int> ranks;
    for (int k = 0; k < size; ++k) {
      at.*along = k;
      ranks.push_back(MeshRank(shape, at));
    }
    absl::StatusOr<std::unique_ptr<Collectives>> group =
        world.NewSubgroup(ranks, absl::StrCat(name, "[", absl::StrJoin(fixed, ","), "]"));
    if (!group.ok()) return group.status();
    if (*group != nullptr) mine = *std::move(group);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ParallelMesh>> ParallelMesh::Build(Collectives& world,
                                                                  const MeshShape& shape) {
  if (shape.data < 1 || shape.pipeline < 1 || shape.expert < 1 || shape.size() != world.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mesh ", shape.ToString(), ": each must be at least 1 and", " their product ", shape.size(),
        " must be the ", world.world_size(), " ranks of group '", world.name(), "'"));
  }
  std::unique_ptr<ParallelMesh> mesh(new ParallelMesh());
  mesh->shape_ = shape;
  mesh->coordinates_ = MeshCoordinatesOf(shape, world.rank());
  if (absl::Status s = MakeGroups(world, shape, &MeshCoordinates::data, shape.data, "dp", mesh->data_);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          MakeGroups(world, shape, &MeshCoordinates::pipeline, shape.pipeline, "pp", mesh->pipeline_);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = MakeGroups(world, shape, &MeshCoordinates::expert, shape.expert, "ep", mesh->expert_);
      !s.ok()) {
    return s;
  }
  const int block = shape.data * shape.expert;
  for (int stage = 0; shape.expert > 1 && stage < shape.pipeline; ++stage) {  // each stage's ranks, in order
    std::vector<int> ranks;
    for (int k = 0; k < block; ++k) ranks.push_back(stage * block + k);
    absl::StatusOr<std::unique_ptr<Collectives>> group = world.NewSubgroup(ranks, absl::StrCat("stage[pp=", stage, "]"));
    if (!group.ok()) return group.status();
    if (*group != nullptr) mesh->stage_ = *std::move(group);
  }
  return mesh;
}

}  // namespace lmf::distributed
