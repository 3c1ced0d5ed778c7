// The placement flags of eval and generate (--device, --cuda_device, --precision), read from a command line
// as the binaries read it: the default, a CUDA placement, and each bad value refused naming the flag.
#include "experiments/placement_flags.h"

#include <string>
#include <vector>

#include "absl/flags/reflection.h"
#include "base/flags.h"
#include "gtest/gtest.h"

namespace lmf::experiments {
namespace {

absl::StatusOr<ModelPlacement> Parse(std::vector<std::string> flags) {
  absl::FlagSaver saver;  // each command line starts from the defaults
  std::vector<char*> argv = {const_cast<char*>("eval")};
  for (std::string& flag : flags) argv.push_back(flag.data());
  absl::StatusOr<CommandLine> line = TryParseFlags(static_cast<int>(argv.size()), argv.data());
  if (!line.ok()) return line.status();
  return PlacementFromFlags();
}

TEST(ModelPlacementFlags, DefaultIsTheCpuInFp32) {
  auto placement = Parse({});
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_EQ(placement->device, config::RunConfig::CPU);
  EXPECT_EQ(placement->precision, config::RunConfig::FP32);
  EXPECT_EQ(PlacementFlags(*placement), "--device=cpu --precision=fp32");
}

TEST(ModelPlacementFlags, CudaTakesAnOrdinalAndBf16) {
  auto placement = Parse({"--device=cuda", "--cuda_device=3", "--precision=bf16"});
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_EQ(placement->device, config::RunConfig::CUDA);
  EXPECT_EQ(placement->cuda_device, 3);
  EXPECT_EQ(placement->precision, config::RunConfig::BF16);
  EXPECT_EQ(PlacementFlags(*placement), "--device=cuda --cuda_device=3 --precision=bf16");
  EXPECT_EQ(Parse({"--device=CUDA", "--precision=BF16"})->device, config::RunConfig::CUDA);
}

TEST(ModelPlacementFlags, BadValuesAreRefusedNamingTheFlag) {
  EXPECT_EQ(Parse({"--device=tpu"}).status().message(), "--device=tpu: expected cpu or cuda");
  EXPECT_EQ(Parse({"--precision=fp16"}).status().message(), "--precision=fp16: expected fp32 or bf16");
  EXPECT_EQ(Parse({"--precision=bf16"})->precision, config::RunConfig::BF16);  // on the CPU too
  EXPECT_EQ(Parse({"--cuda_device=1"}).status().message(), "--cuda_device needs --device=cuda");
  EXPECT_EQ(Parse({"--cuda_device=0"}).status().message(), "--cuda_device needs --device=cuda");
  EXPECT_EQ(Parse({"--device=cuda", "--cuda_device=-1"}).status().message(),
            "--cuda_device=-1: expected a CUDA device ordinal (0, 1, ...)");
  EXPECT_EQ(Parse({"--device=cuda", "--cuda_device=4294967296"}).status().message(),
            "--cuda_device=4294967296: expected a CUDA device ordinal (0, 1, ...)");
  EXPECT_EQ(Parse({"--device=cuda", "--cuda_device=one"}).status().message(),
            "--cuda_device=one: expected an integer");
}

}  // namespace
}  // namespace lmf::experiments
