// ZeRO-1 (Rajbhandari et al. 2020, stage 1): the optimizer state sharded over the data-parallel ranks. Each
// parameter's AdamW moments live on one rank, its owner; after the gradients are summed over the ranks
// (as plain data parallelism does), each rank updates the parameters it owns and broadcasts them, so every
// rank again holds the whole, equal model. The update of each parameter is the unsharded one bit for bit
// (same summed gradient, same global norm), and each rank keeps about 1/data of the moments. Parameters are
// the unit of the shard, as in torch's ZeroRedundancyOptimizer: no parameter is split. A model whose
// parameters are replicated over different groups shards each part over its own group, one owners map per
// part (expert parallelism: the dense parameters over every rank, the expert blocks over their replicas;
// a pipeline: each stage's parameters over that stage's data group; pipeline x expert: each stage's dense
// parameters over its data x expert ranks, its expert blocks over their data group); the calls below take
// only the parameters their map names.
//
//   std::map<std::string, int> owners = ShardOptimizerState(model, group.world_size());
//   model::AdamW adamw(config, model, OwnedBy(owners, group.rank()));
//   DataParallelStep step(group);  step.ShardOptimizerState(owners);   // broadcasts after each update
//   ConsolidateOptimizerState(group, owners, model, adamw);   // before a checkpoint: rank 0 holds all
//   ... rank 0 writes adamw's state ...;  adamw.DropAdopted();
#ifndef LMFORGE_DISTRIBUTED_ZERO_H_
#define LMFORGE_DISTRIBUTED_ZERO_H_

#include <functional>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "distributed/collectives.h"
#include "model/language_model/language_model.h"
#include "model/optimizer/adamw.h"

namespace lmf::distributed {

// Each parameter's owner among `ranks` (only those `which` accepts; null: every one): largest first, each
// to the rank holding the fewest elements so far (the lowest such rank on a tie), so every rank computes the
// same map.
using ParameterFilter = std::function<bool(const model::Parameter&)>;
std::map<std::string, int> ShardOptimizerState(const model::LanguageModel& model, int ranks,
                                               const ParameterFilter& which = nullptr);

// AdamW's ownership predicate for `rank`.
model::AdamW::Owns OwnedBy(const std::map<std::string, int>& owners, int rank);

// Every rank of `group` calls it: the owners send their moments to rank 0, which adopts them
// (AdamW::AdoptState). Parameters `owners` does not name are left alone.
absl::Status ConsolidateOptimizerState(Collectives& group, const std::map<std::string, int>& owners,
                                       const model::LanguageModel& model, model::AdamW& optimizer);

// Every rank of `group` calls it: each parameter `owners` names broadcast from its owner (after the owners'
// update), all as one op (BroadcastManyAsync), waited for within the group's timeout. A model on a GPU
// passes a group of device memory (an NcclGroup): the broadcasts run in place on the device (one NCCL group),
// queued on the model's stream after the update's kernels.
absl::Status BroadcastFromOwners(Collectives& group, const std::map<std::string, int>& owners,
                                 model::LanguageModel& model);

}  // namespace lmf::distributed

#endif  // LMFORGE_DISTRIBUTED_ZERO_H_
