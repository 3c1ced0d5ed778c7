// Self-test of the emulation's wgmma (fake/kernels/attention/wgmma.cuh), compiled by emulated_test.sh against
// fake headers and called from attention_check.cc: the descriptor bits and operand addresses on
// hand-computed examples for the layouts the attention kernel uses (K-major and MN-major, 128B swizzle),
// then small m64n64k16 products on fibers against a plain matrix product, with tiles laid out by this file's
// own formula (chunk j of row r stored at chunk j ^ (r % 8)), and the semantics that make kernel bugs
// fail: accumulators are NaN between the issue and the wait, operands are read at the wait, and cp.async
// data not passed through fence.proxy.async reads as NaN.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/cuda/mma.cuh"
#include "kernels/attention/wgmma.cuh"
#include "kernels/cuda/emulation/cuemu.h"

namespace lmf::kernels {
namespace {

namespace kc = ::lmf::kernels::cuda;

int failures = 0;

void Expect(bool ok, const char* what) {
  if (!ok) ++failures;
  std::printf("%s wgmma emulation: %s\n", ok ? "ok  " : "FAIL", what);
}

// Byte offset of bf16 element (r, col), col < 64, in a 128B-swizzled tile of 128-byte rows.
uint32_t TileOffset(int r, int col) { return r * 128 + (((col / 8) ^ (r % 8)) * 16) + (col % 8) * 2; }

float Bf16Value(int i) { return static_cast<float>((i * 37 % 17) - 8) / 8.0f; }  // exact in bf16
uint16_t Bf16Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>(u >> 16);  // exact: the values above have few significant bits
}

// What the test kernels saw: the products (row-major 64 x 64) and whether an accumulator read between
// issue and wait was NaN.
struct Results {
  float d[64 * 64];
  bool nan_before_wait = true;
};

enum class Mode { kSharedA, kRegisterA, kOverwriteBeforeWait, kNoProxyFence };

// Tiles: A (64 x 16, K-major) at window offset 1024-aligned, B at +8 KiB: for kSharedA / kOverwrite /
// kNoProxyFence B is N x K (K-major, 64 x 16 of a 64-wide row), for kRegisterA B is K x N (MN-major, 16
// rows).
void ProductKernel(Mode mode, const uint16_t* a_host, const uint16_t* b_host, Results* out) {
  unsigned char* raw = static_cast<unsigned char*>(::cuemu::DynamicShared());
  const uint32_t raw_address = kc::SharedAddress(raw);
  unsigned char* base = raw + (1024 - raw_address % 1024) % 1024;
  const uint32_t a_addr = kc::SharedAddress(base), b_addr = a_addr + 8192;
  const int t = threadIdx.x, warp = t >> 5, lane = t & 31, g = lane >> 2, c = lane & 3;
  if (mode == Mode::kNoProxyFence) {
    for (int i = t; i < 2 * 8192 / 16; i += 128)
      kc::CpAsync16(base + i * 16,
                    reinterpret_cast<const unsigned char*>(i < 512 ? a_host : b_host) + (i % 512) * 16, true);
    kc::CpAsyncCommit();
    kc::CpAsyncWait<0>();
  } else if (t == 0) {
    std::memcpy(base, a_host, 8192);
    std::memcpy(base + 8192, b_host, 8192);
  }
  __syncthreads();
  float d[32];
  for (float& x : d) x = 1.0f;
  kc::WgmmaFence();
  if (mode == Mode::kRegisterA) {
    // A's fragment from the row-major copy in a_host's first 64 x 16 (TileOffset layout).
    uint32_t a[4];
    for (int i = 0; i < 4; ++i) {
      const int row = 16 * warp + g + 8 * (i & 1), col = 2 * c + 8 * (i >> 1);
      uint16_t lo, hi;
      std::memcpy(&lo, base + TileOffset(row, col), 2);
      std::memcpy(&hi, base + TileOffset(row, col + 1), 2);
      a[i] = lo | (static_cast<uint32_t>(hi) << 16);
    }
    kc::WgmmaM64N64K16<true>(d, a, kc::WgmmaDescriptor(b_addr, 8192, 1024, kc::WgmmaSwizzle::k128B), true);
  } else {
    kc::WgmmaM64N64K16<false>(d, kc::WgmmaDescriptor(a_addr, 16, 1024, kc::WgmmaSwizzle::k128B),
                              kc::WgmmaDescriptor(b_addr, 16, 1024, kc::WgmmaSwizzle::k128B), false);
  }
  kc::WgmmaCommit();
  bool nan = true;
  for (float x : d) nan = nan && std::isnan(x);
  if (!nan) out->nan_before_wait = false;
  if (mode == Mode::kOverwriteBeforeWait && t == 0) std::memset(base + 8192, 0, 8192);
  __syncthreads();
  kc::WgmmaWait<0>();
  for (int i = 0; i < 32; ++i)
    out->d[(16 * warp + g + 8 * ((i >> 1) & 1)) * 64 + 8 * (i >> 2) + 2 * c + (i & 1)] = d[i];
}

void CheckProducts() {
  // A: 64 x 16 values a(m, k); B: b(k, n). Stored for kSharedA as A K-major and B as N x K K-major (B^T
  // rows); for kRegisterA as B K x N MN-major (rows k).
  std::vector<float> a(64 * 16), b(16 * 64), want(64 * 64);
  for (int i = 0; i < 64 * 16; ++i) a[i] = Bf16Value(i), b[i] = Bf16Value(3 * i + 1);
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 64; ++n) {
      float s = 0;
      for (int k = 0; k < 16; ++k) s += a[m * 16 + k] * b[k * 64 + n];
      want[m * 64 + n] = s;
    }
  std::vector<uint16_t> a_tile(4096, 0), bt_tile(4096, 0), b_mn(4096, 0);
  for (int m = 0; m < 64; ++m)
    for (int k = 0; k < 16; ++k) a_tile[TileOffset(m, k) / 2] = Bf16Bits(a[m * 16 + k]);
  for (int n = 0; n < 64; ++n)
    for (int k = 0; k < 16; ++k) bt_tile[TileOffset(n, k) / 2] = Bf16Bits(b[k * 64 + n]);
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 64; ++n) b_mn[TileOffset(k, n) / 2] = Bf16Bits(b[k * 64 + n]);

  auto run = [&](Mode mode, const std::vector<uint16_t>& bt) {
    Results* r = new Results;
    for (float& x : r->d) x = NAN;
    ::cuemu::Launch(&ProductKernel, dim3(1), dim3(128), 3 * 8192)(mode, a_tile.data(), bt.data(), r);
    return r;
  };
  auto matches = [&](const Results* r, float plus) {
    for (int i = 0; i < 64 * 64; ++i)
      if (!(std::fabs(r->d[i] - (want[i] + plus)) <= 1e-6f * (1 + std::fabs(want[i])))) return false;
    return true;
  };
  Results* shared_a = run(Mode::kSharedA, bt_tile);
  Expect(matches(shared_a, 0.0f), "m64n64k16, A and B from shared memory (K-major, 128B swizzle), D = A B");
  Expect(shared_a->nan_before_wait, "accumulators read between issue and wait are NaN");
  Results* register_a = run(Mode::kRegisterA, b_mn);
  Expect(matches(register_a, 1.0f), "m64n64k16, A from registers, B MN-major (transpose bit), D += A B");
  Results* overwrite = run(Mode::kOverwriteBeforeWait, bt_tile);
  Expect(!matches(overwrite, 0.0f), "B overwritten before the wait: the product sees the new B");
  Results* unfenced = run(Mode::kNoProxyFence, bt_tile);
  bool all_nan = true;
  for (float x : unfenced->d) all_nan = all_nan && std::isnan(x);
  Expect(all_nan, "cp.async tiles read without fence.proxy.async: NaN");
  delete shared_a, delete register_a, delete overwrite, delete unfenced;
}

void CheckAddresses() {
  using kc::wgmma_emulation::ElementAddress;
  const uint64_t k_major = kc::WgmmaDescriptor(0x400, 16, 1024, kc::WgmmaSwizzle::k128B);
  const uint64_t k_major_step1 = kc::WgmmaDescriptor(0x420, 16, 1024, kc::WgmmaSwizzle::k128B);
  const uint64_t mn_major = kc::WgmmaDescriptor(0x2800, 8192, 1024, kc::WgmmaSwizzle::k128B);
  // By hand: row r of a K-major tile at 0x400 + (r / 8) * 1024 + (r % 8) * 128, its 16-byte chunk j at chunk
  // j ^ (r % 8); an MN-major tile's k row likewise, n in place of the column.
  struct Case {
    uint64_t desc;
    bool mn_major;
    int mn, k;
    uint32_t want;
    const char* what;
  } cases[] = {
      {k_major, false, 0, 0, 0x400, "K-major (0, 0)"},
      {k_major, false, 1, 0, 0x490, "K-major row 1: chunk 0 -> 1"},
      {k_major, false, 3, 9, 0x5a2, "K-major (3, 9): chunk 1 -> 2"},
      {k_major, false, 10, 5, 0x92a, "K-major row 10: second 8-row group (SBO), chunk 0 -> 2"},
      {k_major_step1, false, 1, 0, 0x4b0, "K-major k-step 1 (+32 bytes), row 1: chunk 2 -> 3"},
      {mn_major, true, 0, 0, 0x2800, "MN-major (0, 0)"},
      {mn_major, true, 9, 1, 0x2882, "MN-major n 9, k 1: chunk 1 -> 0"},
      {mn_major, true, 63, 15, 0x2f8e, "MN-major n 63, k 15: SBO group, chunk 7 -> 0"},
  };
  for (const Case& c : cases) {
    const uint32_t got = ElementAddress(c.desc, c.mn_major, c.mn, c.k);
    char line[160];
    std::snprintf(line, sizeof(line), "address of %s: 0x%x (want 0x%x)", c.what, got, c.want);
    Expect(got == c.want, line);
  }
  const auto d = kc::wgmma_emulation::Decode(mn_major);
  Expect(d.start == 0x2800 && d.lbo == 8192 && d.sbo == 1024 && d.swizzle == kc::WgmmaSwizzle::k128B &&
             d.base_offset == 0,
         "descriptor fields decode back");
}

}  // namespace

int CheckWgmmaEmulation() {
  failures = 0;
  CheckAddresses();
  CheckProducts();
  return failures;
}

}  // namespace lmf::kernels
