// LMF_CPU_ISA: each value it takes, the errors for the others, and the exit with the message where the
// kernels first read it.
#include "kernels/cpu/isa.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace lmf::kernels::vec {
namespace {

TEST(CpuIsa, ParsesEachValue) {
  std::string error;
  for (const bool has : {false, true}) {
    EXPECT_EQ(ParseCpuIsa(nullptr, has, &error), has);
    EXPECT_EQ(error, "");
    EXPECT_EQ(ParseCpuIsa("", has, &error), has);
    EXPECT_EQ(ParseCpuIsa("auto", has, &error), has);
    EXPECT_FALSE(ParseCpuIsa("avx2", has, &error));
    EXPECT_EQ(error, "");
  }
  EXPECT_TRUE(ParseCpuIsa("avx512", true, &error));
  EXPECT_EQ(error, "");
}

TEST(CpuIsa, RefusesUnknownValuesAndAnAvx512TheCpuLacks) {
  std::string error;
  EXPECT_FALSE(ParseCpuIsa("avx512", false, &error));
  EXPECT_NE(error.find("LMF_CPU_ISA=avx512, but this CPU"), std::string::npos) << error;
  EXPECT_FALSE(ParseCpuIsa("AVX2", true, &error));  // values are lower case
  EXPECT_EQ(error, "LMF_CPU_ISA=\"AVX2\" is not one of auto, avx2, avx512");
  EXPECT_FALSE(ParseCpuIsa("sse", true, &error));
  EXPECT_EQ(error, "LMF_CPU_ISA=\"sse\" is not one of auto, avx2, avx512");
}

TEST(CpuIsaDeathTest, ABadValueExitsWithItsMessage) {
  EXPECT_EXIT(
      {
        setenv("LMF_CPU_ISA", "avx3", 1);
        internal::g_use_avx512.store(-1);
        UseAvx512();
      },
      ::testing::ExitedWithCode(2), "error: LMF_CPU_ISA=\"avx3\" is not one of auto, avx2, avx512");
}

TEST(CpuIsa, Avx2IsAlwaysAvailableAndAvx512OnlyWhereTheCpuHasIt) {
  const bool before = SetUseAvx512ForTesting(false);
  EXPECT_FALSE(UseAvx512());
  EXPECT_STREQ(IsaName(), "AVX2");
  SetUseAvx512ForTesting(true);
  EXPECT_EQ(UseAvx512(), CpuHasAvx512());
  EXPECT_STREQ(IsaName(), CpuHasAvx512() ? "AVX-512" : "AVX2");
  SetUseAvx512ForTesting(before);
}

}  // namespace
}  // namespace lmf::kernels::vec
