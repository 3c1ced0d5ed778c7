// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum of TFRecord framing (TensorBoard event
// files) and of checkpoint files. Uses the SSE4.2 crc32 instruction where the build targets it
// (x86-64-v3 does), else a table.
#ifndef LMFORGE_EXPERIMENTS_CRC32C_CRC32C_H_
#define LMFORGE_EXPERIMENTS_CRC32C_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace lmf::experiments {

// CRC-32C of `data` continuing from `crc` (0 for a fresh checksum): Crc32c(ab) == Crc32c(b, Crc32c(a)).
uint32_t Crc32c(std::string_view data, uint32_t crc = 0);

// TFRecord's masked CRC: rotate right by 15 and add 0xa282ead8, so that CRCs of data that holds CRCs
// stay well distributed.
inline uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_CRC32C_CRC32C_H_
