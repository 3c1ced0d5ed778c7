// Damaged copies of a valid input (see damaged_copies.h).
#include "base/damaged_copies.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_format.h"

namespace lmf {

std::vector<std::string> DamagedCopies(std::string_view valid, uint64_t seed, int edits,
                                       size_t max_prefixes) {
  std::vector<std::string> copies;
  // Truncations: each prefix (the empty one included), or an even spread that keeps the first and last.
  const size_t n = valid.size();
  const size_t prefixes = std::min(n, std::max<size_t>(max_prefixes, 2));
  for (size_t i = 0; i < prefixes; ++i) {
    const size_t length = prefixes == n ? i : i * (n - 1) / (prefixes - 1);
    copies.emplace_back(valid.substr(0, length));
  }
  if (n == 0) return copies;

  static constexpr char kKeyBytes[] = "0123456789-+.eE\"'{}[]():,;=# \t\r\n\\/xX_";
  std::mt19937_64 rng(seed);
  auto below = [&rng](size_t bound) { return static_cast<size_t>(rng() % bound); };
  for (int e = 0; e < edits; ++e) {
    std::string copy(valid);
    const size_t at = below(n);
    // A span of 1 to 16 bytes from `at`, inside the input.
    const size_t span = std::min(n - at, 1 + below(16));
    switch (below(6)) {
      case 0:  // a random byte
        copy[at] = static_cast<char>(rng() & 0xff);
        break;
      case 1:
      case 2:  // a byte parsers key on (twice as likely: these reach the parsers' branches)
        copy[at] = kKeyBytes[below(sizeof(kKeyBytes) - 1)];
        break;
      case 3:  // NUL, 0xff, or the byte one off
        copy[at] = below(3) == 0   ? '\0'
                   : below(2) == 0 ? '\xff'
                                   : static_cast<char>(copy[at] + (below(2) ? 1 : -1));
        break;
      case 4:  // a span repeated
        copy.insert(at, valid.substr(at, span));
        break;
      default:  // a span removed
        copy.erase(at, span);
        break;
    }
    copies.push_back(std::move(copy));
  }
  return copies;
}

std::string Escaped(std::string_view bytes, size_t max_chars) {
  std::string out;
  for (const char c : bytes) {
    if (out.size() >= max_chars) {
      absl::StrAppendFormat(&out, "... (%d bytes)", bytes.size());
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '\\') {
      out.push_back(c);
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", u);
    }
  }
  return out;
}

}  // namespace lmf
