// A run's process layout (run.parallel): how many processes it has, and the fields that say so, for the
// messages of every part that counts them (the trainer, its launchers, the sweep executors).
#ifndef LMFORGE_CONFIG_PARALLEL_LAYOUT_H_
#define LMFORGE_CONFIG_PARALLEL_LAYOUT_H_

#include <string>

#include "config/experiment.pb.h"

namespace lmf::config {

// data x pipeline x expert: the processes a run has (each is one rank of the mesh, distributed/mesh.h).
int ProcessCount(const ParallelConfig& parallel);

// "run.parallel.data=2", then " x run.parallel.pipeline=P" and " x run.parallel.expert=E" where above 1.
std::string LayoutFields(const ParallelConfig& parallel);

}  // namespace lmf::config

#endif  // LMFORGE_CONFIG_PARALLEL_LAYOUT_H_
