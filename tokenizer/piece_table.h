// PieceTable: an open-addressing hash table from short byte strings (pre-tokens) to a uint64, with the
// keys copied into one arena. It is the inner loop of both training (counting pre-tokens) and encoding
// (the cache of pre-token ids), where a std::string-keyed map spends its time allocating and comparing.
#ifndef LMFORGE_TOKENIZER_PIECE_TABLE_H_
#define LMFORGE_TOKENIZER_PIECE_TABLE_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace lmf::tokenizer {

// A fast 64-bit hash of a byte string (multiply-fold mixing of 8-byte words); never returns 0.
inline uint64_t HashPiece(const char* p, size_t n) {
  auto load64 = [](const char* q) {
    uint64_t v;
    std::memcpy(&v, q, 8);
    return v;
  };
  auto mix = [](uint64_t a, uint64_t b) {
    const unsigned __int128 r = static_cast<unsigned __int128>(a) * b;
    return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
  };
  constexpr uint64_t k0 = 0xa0761d6478bd642fULL, k1 = 0xe7037ed1a0b428dbULL, k2 = 0x8ebc6af09c88c6e3ULL;
  uint64_t h = k0 ^ (n * k1);
  uint64_t a = 0, b = 0;
  if (n <= 16) {
    if (n >= 8) {
      a = load64(p);
      b = load64(p + n - 8);
    } else if (n >= 4) {
      uint32_t x, y;
      std::memcpy(&x, p, 4);
      std::memcpy(&y, p + n - 4, 4);
      a = x;
      b = y;
    } else if (n > 0) {
      a = (uint64_t{static_cast<unsigned char>(p[0])} << 16) | (uint64_t{static_cast<unsigned char>(p[n >> 1])} << 8) |
          static_cast<unsigned char>(p[n - 1]);
    }
  } else {
    size_t i = 0;
    for (; i + 16 < n; i += 16) h = mix(load64(p + i) ^ k1, load64(p + i + 8) ^ h);
    a = load64(p + n - 16);
    b = load64(p + n - 8);
  }
  h = mix(a ^ k1, b ^ h ^ k2);
  h = mix(h ^ k0, n ^ k1);
  return h | 1;
}

class PieceTable {
 public:
  explicit PieceTable(size_t initial_slots = 1 << 12) { Reset(initial_slots); }

  size_t size() const { return size_; }
  size_t arena_bytes() const { return arena_.size(); }

  // The value of key, inserted as 0 when absent (*inserted says which). The pointer is valid until the
  // next insertion.
  uint64_t* FindOrInsert(std::string_view key, bool* inserted) {
    const uint64_t h = HashPiece(key.data(), key.size());
    const uint64_t prefix = Prefix(key);
    size_t i = h & mask_;
    while (true) {
      Slot& s = slots_[i];
      if (s.hash == 0) break;
      // Keys of up to 8 bytes are compared by their inline prefix alone.
      if (s.hash == h && s.length == key.size() && s.prefix == prefix &&
          (key.size() <= 8 || std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0)) {
        *inserted = false;
        return &s.value;
      }
      i = (i + 1) & mask_;
    }
    if (2 * (size_ + 1) > slots_.size()) {
      Grow();
      return FindOrInsert(key, inserted);
    }
    Slot& s = slots_[i];
    s.hash = h;
    s.offset = arena_.size();
    s.length = static_cast<uint32_t>(key.size());
    s.prefix = prefix;
    s.value = 0;
    arena_.append(key.data(), key.size());
    ++size_;
    *inserted = true;
    return &s.value;
  }

  // Empties the table, keeping its capacity.
  void Clear() {
    std::memset(static_cast<void*>(slots_.data()), 0, slots_.size() * sizeof(Slot));
    arena_.clear();
    size_ = 0;
  }

  // fn(key, value) for every entry.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (const Slot& s : slots_) {
      if (s.hash != 0) fn(std::string_view(arena_.data() + s.offset, s.length), s.value);
    }
  }

 private:
  struct Slot {
    uint64_t hash;    // 0: empty
    uint64_t offset;  // of the key in arena_
    uint64_t prefix;  // the key's first 8 bytes, zero-padded
    uint32_t length;  // of the key
    uint64_t value;
  };

  static uint64_t Prefix(std::string_view key) {
    uint64_t p = 0;
    std::memcpy(&p, key.data(), key.size() < 8 ? key.size() : 8);
    return p;
  }

  void Reset(size_t slots) {
    size_t n = 16;
    while (n < slots) n *= 2;
    slots_.assign(n, Slot{0, 0, 0, 0, 0});
    mask_ = n - 1;
    size_ = 0;
  }

  void Grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.size() * 2, Slot{0, 0, 0, 0, 0});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.hash == 0) continue;
      size_t i = s.hash & mask_;
      while (slots_[i].hash != 0) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  std::string arena_;
  size_t size_ = 0;
  size_t mask_ = 0;
};

}  // namespace lmf::tokenizer

#endif  // LMFORGE_TOKENIZER_PIECE_TABLE_H_
