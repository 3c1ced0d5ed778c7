// Damaged copies of a valid input, for tests that a parser of user files (tokenizer files, token files,
// safetensors, configs, CSV tables, logs) answers each with an error or a valid result: never a crash, a
// read out of bounds (run them under --config=asan too), a hang or an error that does not say where.
//
//   for (const std::string& bad : DamagedCopies(valid, /*seed=*/7)) {
//     auto parsed = Parse(bad, "x.tok");
//     if (!parsed.ok()) EXPECT_THAT(parsed.status().message(), HasSubstr("x.tok")) << Escaped(bad);
//   }
//
// The copies: truncations (every prefix of a short input; an even spread of `max_prefixes` of a long one),
// then `edits` seeded single edits: a byte replaced (by a random byte, or by one that parsers key on: digits,
// signs, quotes, brackets, separators, line ends, NUL, 0xff), a byte deleted, a span repeated, a span
// removed. Deterministic for a seed.
#ifndef LMFORGE_BASE_DAMAGED_COPIES_H_
#define LMFORGE_BASE_DAMAGED_COPIES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lmf {

std::vector<std::string> DamagedCopies(std::string_view valid, uint64_t seed, int edits = 2000,
                                       size_t max_prefixes = 2048);

// `bytes` with anything outside printable ASCII as \xNN, cut to `max_chars` (for a failing case's message).
std::string Escaped(std::string_view bytes, size_t max_chars = 300);

}  // namespace lmf

#endif  // LMFORGE_BASE_DAMAGED_COPIES_H_
