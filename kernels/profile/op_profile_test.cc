// SumOpTimes and FormatOpProfile: per-op sums, order, per-step division and shares of the window.
#include "kernels/profile/op_profile.h"

#include "gtest/gtest.h"

namespace lmf::kernels {
namespace {

TEST(SumOpTimes, SumsCallsAndTimePerNameLargestFirstTiesByName) {
  const std::vector<OpTime> ops =
      SumOpTimes({"Matmul", "Cast", "Matmul", "Zeta", "Alpha"}, {1.5, 0.25, 2.0, 0.25, 0.25});
  ASSERT_EQ(ops.size(), 4u);
  EXPECT_EQ(ops[0].op, "Matmul");
  EXPECT_EQ(ops[0].calls, 2);
  EXPECT_DOUBLE_EQ(ops[0].total_ms, 3.5);
  EXPECT_EQ(ops[1].op, "Alpha");
  EXPECT_EQ(ops[2].op, "Cast");
  EXPECT_EQ(ops[3].op, "Zeta");
  EXPECT_EQ(ops[3].calls, 1);
  EXPECT_TRUE(SumOpTimes({}, {}).empty());
}

TEST(FormatOpProfile, RowsPerStepWithSharesOfTheWindow) {
  OpProfile profile;
  profile.ops = SumOpTimes({"Matmul", "Matmul", "Cast"}, {6.0, 6.0, 4.0});
  profile.outside_ops_ms = 4.0;
  profile.window_ms = 20.0;
  const std::string table = FormatOpProfile(profile, 2);
  EXPECT_NE(table.find("Matmul                              1.0      6.000   60.0%"), std::string::npos)
      << table;
  EXPECT_NE(table.find("Cast                                0.5      2.000   20.0%"), std::string::npos)
      << table;
  EXPECT_NE(table.find("(outside the ops)                            2.000   20.0%"), std::string::npos)
      << table;
  EXPECT_NE(table.find("window                                      10.000  100.0%"), std::string::npos)
      << table;
  EXPECT_LT(table.find("Matmul"), table.find("Cast"));
}

TEST(FormatLargestOps, TheFirstNOpsWithTheirShares) {
  OpProfile profile;
  profile.ops = SumOpTimes({"Matmul", "Matmul", "Cast", "Zeta"}, {6.0, 6.0, 4.0, 1.0});
  profile.window_ms = 20.0;
  EXPECT_EQ(FormatLargestOps(profile, 2), "Matmul 60.0%, Cast 20.0%");
  EXPECT_EQ(FormatLargestOps(profile, 9), "Matmul 60.0%, Cast 20.0%, Zeta 5.0%");
  EXPECT_EQ(FormatLargestOps(profile, 0), "");
  EXPECT_EQ(FormatLargestOps(OpProfile{}, 4), "");
}

TEST(FormatOpProfile, EmptyWindowHasNoShares) {
  const std::string table = FormatOpProfile(OpProfile{}, 0);
  EXPECT_NE(table.find("window                                       0.000    0.0%"), std::string::npos)
      << table;
}

}  // namespace
}  // namespace lmf::kernels
