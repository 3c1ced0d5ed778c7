#include "experiments/sweep/sweep_testing.h"

#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tokenizer/token_file.h"

namespace lmf::sweep::testing {
namespace {

std::string WriteRandomTokens(const std::string& name, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> ids(n);
  for (uint32_t& id : ids) id = rng() % 512;
  const std::string path = TmpDir() + "/" + name;
  auto writer = tokenizer::TokenFileWriter::Create(path, 512, /*tokenizer_hash=*/1);
  EXPECT_TRUE(writer.ok()) << writer.status();
  if (!writer.ok()) return path;
  EXPECT_TRUE(writer->Append(ids.data(), ids.size()).ok());
  EXPECT_TRUE(writer->Commit().ok());
  return path;
}

}  // namespace

absl::StatusOr<ModelSize> SimpleSizer(const config::Experiment& e) {
  const auto& m = e.model();
  ModelSize s;
  s.non_embedding_params = 12.0 * m.n_layers() * m.d_model() * m.d_model();
  s.params = s.non_embedding_params + 2.0 * m.vocab_size() * m.d_model();
  s.training_flops_per_token = 6.0 * s.params;
  return s;
}

std::string TmpDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  EXPECT_NE(dir, nullptr) << "TEST_TMPDIR is not set (run the test with bazel test)";
  return dir != nullptr ? dir : "/tmp";
}

const TinyTokenFiles& TinyTokens() {
  static const TinyTokenFiles files{WriteRandomTokens("train.tok", 8000, 1), WriteRandomTokens("val.tok", 2000, 2)};
  return files;
}

}  // namespace lmf::sweep::testing
