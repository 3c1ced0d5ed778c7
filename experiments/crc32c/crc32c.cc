// CRC-32C (see crc32c.h).
#include "experiments/crc32c/crc32c.h"

#include <cstring>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace lmf::experiments {
namespace {

#if !defined(__SSE4_2__)
struct Table {
  uint32_t entries[256];
  Table() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      entries[i] = c;
    }
  }
};
#endif

}  // namespace

uint32_t Crc32c(std::string_view data, uint32_t crc) {
  uint32_t c = ~crc;
  const char* p = data.data();
  size_t n = data.size();
#if defined(__SSE4_2__)
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c64 = _mm_crc32_u64(c64, word);
    p += 8;
    n -= 8;
  }
  c = static_cast<uint32_t>(c64);
  while (n > 0) {
    c = _mm_crc32_u8(c, static_cast<unsigned char>(*p++));
    --n;
  }
#else
  static const Table table;
  while (n > 0) {
    c = table.entries[(c ^ static_cast<unsigned char>(*p++)) & 0xFF] ^ (c >> 8);
    --n;
  }
#endif
  return ~c;
}

}  // namespace lmf::experiments
