// The dp x pp x ep layout, and the groups of 2 x 2 meshes on 4 real processes: each group's all-reduce sums
// exactly its members, groups may run at once from different threads, and subgroups name world ranks.
#include "distributed/mesh.h"

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "distributed/test_ranks.h"
#include "gtest/gtest.h"

namespace lmf::distributed {
namespace {

using testing::Checks;
using testing::ExpectAllPassed;
using testing::RunRanks;

TEST(MeshLayout, ExpertVariesFastestThenDataThenPipeline) {
  const MeshShape shape{/*data=*/2, /*pipeline=*/3, /*expert=*/2};
  EXPECT_EQ(MeshRank(shape, {/*data=*/0, /*pipeline=*/0, /*expert=*/1}), 1);
  EXPECT_EQ(MeshRank(shape, {/*data=*/1, /*pipeline=*/0, /*expert=*/0}), 2);
  EXPECT_EQ(MeshRank(shape, {/*data=*/0, /*pipeline=*/1, /*expert=*/0}), 4);
  EXPECT_EQ(MeshRank(shape, {/*data=*/1, /*pipeline=*/2, /*expert=*/1}), 11);
  for (int rank = 0; rank < shape.size(); ++rank) {
    EXPECT_EQ(MeshRank(shape, MeshCoordinatesOf(shape, rank)), rank);
  }
}

// Each rank contributes 1 << its world rank to an all-reduce in each of its groups (the stage's data x
// expert group too): the sum is exactly the set of the group's members as the layout says, and each
// member's rank there is its coordinate.
int CheckGroups(Collectives& world, const MeshShape& shape) {
  Checks checks(world.rank());
  absl::StatusOr<std::unique_ptr<ParallelMesh>> mesh = ParallelMesh::Build(world, shape);
  if (!checks.Ok(mesh.status(), absl::StrCat("mesh ", shape.ToString()))) return checks.exit_code();
  const MeshCoordinates at = MeshCoordinatesOf(shape, world.rank());
  checks.Expect((*mesh)->coordinates() == at, "coordinates");
  struct Dimension {
    Collectives* group;
    int MeshCoordinates::*coordinate;
    int size;
    std::string name;
  };
  const Dimension dimensions[] = {
      {&(*mesh)->data(), &MeshCoordinates::data, shape.data,
       absl::StrCat("dp[pp=", at.pipeline, ",ep=", at.expert, "]")},
      {&(*mesh)->pipeline(), &MeshCoordinates::pipeline, shape.pipeline,
       absl::StrCat("pp[dp=", at.data, ",ep=", at.expert, "]")},
      {&(*mesh)->expert(), &MeshCoordinates::expert, shape.expert,
       absl::StrCat("ep[pp=", at.pipeline, ",dp=", at.data, "]")},
  };
  for (const Dimension& d : dimensions) {
    checks.Expect(d.group->name() == d.name,
                  absl::StrCat("group name ", d.group->name(), ", expected ", d.name));
    checks.Expect(d.group->world_size() == d.size && d.group->rank() == at.*d.coordinate,
                  absl::StrCat(d.name, ": rank ", d.group->rank(), " of ", d.group->world_size()));
    int64_t members = 0;
    for (int k = 0; k < d.size; ++k) {
      MeshCoordinates member = at;
      member.*d.coordinate = k;
      members |= int64_t{1} << MeshRank(shape, member);
    }
    int64_t sum = int64_t{1} << world.rank();
    checks.Ok(d.group->AllReduce(Buffer::Host(&sum, 1), ReduceOp::kSum), d.name);
    checks.Expect(sum == members, absl::StrCat(d.name, ": the sum is ", sum, ", its members' ", members));
  }
  // The stage group: the data x expert ranks at this rank's pipeline index, one contiguous block.
  const int block = shape.data * shape.expert;
  int64_t stage_members = 0;
  for (int k = 0; k < block; ++k) stage_members |= int64_t{1} << (at.pipeline * block + k);
  int64_t stage_sum = int64_t{1} << world.rank();
  checks.Ok((*mesh)->stage().AllReduce(Buffer::Host(&stage_sum, 1), ReduceOp::kSum), "stage");
  checks.Expect(stage_sum == stage_members && (*mesh)->stage().world_size() == block,
                absl::StrCat("stage group ", (*mesh)->stage().name(), ": the sum is ", stage_sum, ", its members' ",
                             stage_members));
  // Two groups used at once from two threads: each keeps its own order and sums.
  std::vector<int64_t> data_sums(20), pipeline_sums(20);
  std::thread other([&] {
    for (int64_t& x : pipeline_sums) {
      x = world.rank();
      checks.Ok((*mesh)->pipeline().AllReduce(Buffer::Host(&x, 1), ReduceOp::kMax), "concurrent pipeline");
    }
  });
  for (int64_t& x : data_sums) {
    x = 1;
    checks.Ok((*mesh)->data().AllReduce(Buffer::Host(&x, 1), ReduceOp::kSum), "concurrent data");
  }
  other.join();
  MeshCoordinates last_stage = at;
  last_stage.pipeline = shape.pipeline - 1;
  for (int k = 0; k < 20; ++k) {
    checks.Expect(data_sums[k] == shape.data, absl::StrCat("concurrent data sum ", data_sums[k]));
    checks.Expect(pipeline_sums[k] == MeshRank(shape, last_stage),
                  absl::StrCat("concurrent pipeline max ", pipeline_sums[k]));
  }
  return checks.exit_code();
}

TEST(Mesh, DataByPipeline) {
  ExpectAllPassed(RunRanks(4, [](Collectives& world) { return CheckGroups(world, {2, 2, 1}); }));
}

TEST(Mesh, DataByExpert) {
  ExpectAllPassed(RunRanks(4, [](Collectives& world) { return CheckGroups(world, {2, 1, 2}); }));
}

TEST(Mesh, PipelineByExpert) {
  ExpectAllPassed(RunRanks(4, [](Collectives& world) { return CheckGroups(world, {1, 2, 2}); }));
}

// A subgroup takes its ranks in the order given and names world ranks in its errors; a mesh whose shape is
// not the world's size is refused.
TEST(Mesh, SubgroupsNameWorldRanksAndTheShapeMustFit) {
  ExpectAllPassed(RunRanks(4, [](Collectives& world) {
    Checks checks(world.rank());
    absl::StatusOr<std::unique_ptr<ParallelMesh>> mesh = ParallelMesh::Build(world, {2, 1, 1});
    checks.FailsWith(mesh.status(),
                     {"mesh data=2 x pipeline=1 x expert=1: each must be at least 1 and their product 2 must "
                      "be the 4 ranks of group 'world'"},
                     "shape");
    absl::StatusOr<std::unique_ptr<Collectives>> pair = world.NewSubgroup({3, 1}, "pair");
    if (!checks.Ok(pair.status(), "NewSubgroup")) return checks.exit_code();
    if (world.rank() != 3 && world.rank() != 1) {
      checks.Expect(*pair == nullptr, "a rank outside the subgroup got one");
      return checks.exit_code();
    }
    Collectives& group = **pair;
    checks.Expect(group.rank() == (world.rank() == 3 ? 0 : 1), "rank order in the subgroup");
    int32_t x = world.rank();
    checks.Ok(group.AllReduce(Buffer::Host(&x, 1), ReduceOp::kSum), "subgroup all-reduce");
    checks.Expect(x == 4, absl::StrCat("subgroup sum ", x));
    const std::string me = world.rank() == 3 ? "rank 0 (world rank 3)" : "rank 1 (world rank 1)";
    const std::string peer = world.rank() == 3 ? "rank 1 (world rank 1)" : "rank 0 (world rank 3)";
    checks.FailsWith(group.Send(Buffer::Host(&x, 1), 1 - group.rank(), Collectives::kMaxTag + 1),
                     {"gloo group 'pair' " + me + " of 2: send of 1 x i32 to " + peer}, "named world ranks");
    return checks.exit_code();
  }));
}

}  // namespace
}  // namespace lmf::distributed
