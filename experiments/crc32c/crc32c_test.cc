// CRC-32C against published check values (RFC 3720 appendix B.4 and the CRC catalogue's "123456789").
#include "experiments/crc32c/crc32c.h"

#include <string>

#include "gtest/gtest.h"

namespace lmf::experiments {
namespace {

TEST(Crc32c, MatchesPublishedCheckValues) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<char>(i);
  EXPECT_EQ(Crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(Crc32c, ContinuesAcrossPieces) {
  const std::string text = "The quick brown fox jumps over the lazy dog, twice over.";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    EXPECT_EQ(Crc32c(text.substr(cut), Crc32c(text.substr(0, cut))), Crc32c(text)) << cut;
  }
}

TEST(Crc32c, MaskIsTfRecordsRotation) {
  // (crc >> 15 | crc << 17) + 0xa282ead8, modulo 2^32.
  EXPECT_EQ(MaskCrc32c(0), 0xa282ead8u);
  EXPECT_EQ(MaskCrc32c(0x00008000u), 0xa282ead9u);
  EXPECT_EQ(MaskCrc32c(0xE3069283u), ((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xa282ead8u);
}

}  // namespace
}  // namespace lmf::experiments
