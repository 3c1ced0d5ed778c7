// DamagedCopies: the truncations and seeded edits it promises, deterministic for a seed.
#include "base/damaged_copies.h"

#include <set>

#include "gtest/gtest.h"

namespace lmf {
namespace {

TEST(DamagedCopies, EveryPrefixOfAShortInputThenTheEdits) {
  const std::vector<std::string> copies =
      DamagedCopies("abcdef", /*seed=*/3, /*edits=*/50, /*max_prefixes=*/100);
  ASSERT_EQ(copies.size(), 6u + 50u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(copies[i], std::string("abcdef").substr(0, i));
  std::set<std::string> distinct(copies.begin() + 6, copies.end());
  EXPECT_GT(distinct.size(), 20u);  // the edits differ
  for (size_t i = 6; i < copies.size(); ++i) EXPECT_NE(copies[i], "") << i;
  EXPECT_EQ(copies, DamagedCopies("abcdef", /*seed=*/3, /*edits=*/50, /*max_prefixes=*/100));
  EXPECT_NE(copies, DamagedCopies("abcdef", /*seed=*/4, /*edits=*/50, /*max_prefixes=*/100));
}

TEST(DamagedCopies, LongInputsGetAnEvenSpreadOfPrefixes) {
  const std::string valid(10000, 'x');
  const std::vector<std::string> copies = DamagedCopies(valid, /*seed=*/1, /*edits=*/0, /*max_prefixes=*/11);
  ASSERT_EQ(copies.size(), 11u);
  EXPECT_EQ(copies.front().size(), 0u);
  EXPECT_EQ(copies[5].size(), 4999u);
  EXPECT_EQ(copies.back().size(), 9999u);
}

TEST(DamagedCopies, EditsChangeLengthsAndBytes) {
  const std::string valid = "0123456789abcdefghijklmnopqrstuvwxyz";
  bool longer = false, shorter = false, same_length_changed = false;
  const std::vector<std::string> copies = DamagedCopies(valid, /*seed=*/9, /*edits=*/300, /*max_prefixes=*/2);
  ASSERT_EQ(copies.size(), 2u + 300u);  // the empty prefix, the one without the last byte, the edits
  for (size_t i = 2; i < copies.size(); ++i) {
    const std::string& copy = copies[i];
    longer |= copy.size() > valid.size();
    shorter |= copy.size() + 1 < valid.size();  // a span of 2 or more removed
    same_length_changed |= copy.size() == valid.size() && copy != valid;
  }
  EXPECT_TRUE(longer);
  EXPECT_TRUE(shorter);
  EXPECT_TRUE(same_length_changed);
}

TEST(DamagedCopies, EscapedShowsControlBytesAndCuts) {
  EXPECT_EQ(Escaped(std::string("a\n\0\\\xff", 5)), "a\\x0a\\x00\\x5c\\xff");
  EXPECT_EQ(Escaped(std::string(10, 'z'), 4), "zzzz... (10 bytes)");
}

}  // namespace
}  // namespace lmf
