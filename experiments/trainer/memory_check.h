// The check that a model fits in the machine before anything is allocated: a clear error up front instead
// of the CPU allocator's abort ("out of memory allocating 13 TB") or a process that grows until the kernel
// kills it. train checks the model, its AdamW moments and one micro-batch's activations; eval the model and
// one forward's; generate the model. What they need is model::CountModelMemory's count
// (model/accounting/training_memory.h), a lower bound: a model refused here could not have run, and the
// check never refuses one that could.
#ifndef LMFORGE_EXPERIMENTS_TRAINER_MEMORY_CHECK_H_
#define LMFORGE_EXPERIMENTS_TRAINER_MEMORY_CHECK_H_

#include <string>

#include "absl/status/status.h"
#include "model/accounting/training_memory.h"

namespace lmf::experiments {

// The machine's memory in bytes, physical and swap (sysinfo); 0 where it cannot be read.
double MemoryBytes();

// ResourceExhausted when `processes` copies of `need` take more than `available` bytes (0: unknown, no
// check), naming `what` (the config's fields and the batch), the bytes needed and each part.
absl::Status CheckFitsInMemory(const model::ModelMemory& need, int processes, double available,
                               const std::string& what);

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_TRAINER_MEMORY_CHECK_H_
