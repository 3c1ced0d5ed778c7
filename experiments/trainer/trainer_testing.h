// What the multi-process trainer tests share (data_parallel_test, data_parallel_cuda_test, pipeline_test,
// expert_parallel_test): a path in the test's temporary folder, a token file of uniformly random ids, written
// once per process, and a checkpoint's weights.
#ifndef LMFORGE_EXPERIMENTS_TRAINER_TRAINER_TESTING_H_
#define LMFORGE_EXPERIMENTS_TRAINER_TRAINER_TESTING_H_

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "experiments/checkpoint/checkpoint.h"
#include "gtest/gtest.h"
#include "tokenizer/token_file.h"

namespace lmf::experiments::testing {

inline std::string TempPath(const std::string& name) { return std::string(std::getenv("TEST_TMPDIR")) + "/" + name; }

// Writes 20,000 ids drawn uniformly from [0, 512) by mt19937(seed) to TempPath(name); returns its path.
inline std::string WriteRandomTokens(const std::string& name, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> ids(20000);
  for (uint32_t& id : ids) id = rng() % 512;
  const std::string p = TempPath(name);
  auto writer = tokenizer::TokenFileWriter::Create(p, 512, /*tokenizer_hash=*/1);
  EXPECT_TRUE(writer.ok()) << writer.status();
  EXPECT_TRUE(writer->Append(ids.data(), ids.size()).ok());
  EXPECT_TRUE(writer->Commit().ok());
  return p;
}

// Every weight of the checkpoint folder `checkpoint`, tensor after tensor in the file's order.
inline std::vector<float> CheckpointWeights(const std::string& checkpoint) {
  auto loaded = LoadCheckpoint(checkpoint);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  std::vector<float> all;
  if (!loaded.ok()) return all;
  for (const auto& [name, tensor] : loaded->model.tensors()) {
    auto values = loaded->model.ReadFloat(name);
    EXPECT_TRUE(values.ok()) << values.status();
    if (values.ok()) all.insert(all.end(), values->begin(), values->end());
  }
  return all;
}

}  // namespace lmf::experiments::testing

#endif  // LMFORGE_EXPERIMENTS_TRAINER_TRAINER_TESTING_H_
