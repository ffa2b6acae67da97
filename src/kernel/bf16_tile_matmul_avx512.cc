// Bf16TileMatMulAvx512 on AVX512_BF16 (bf16_tile_matmul.h): the outer-product micro-tile
// of tile_matmul-inl.h, with one vdpbf16ps taking two rows of B (a pair-row of a
// paired panel: 16 columns x 2 rows in one zmm) against one broadcast pair of A.
// 6 x 4 accumulators + 4 B vectors + 1 broadcast fit the 32 registers.
#include "src/kernel/bf16_tile_matmul.h"

#include <cstring>

#include "hwy/base.h"
#include "src/kv/kv_pages.h"
#include "src/simd/prefetch_rule.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define MHA_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

namespace mha::internal {
namespace {

constexpr size_t kPairBytes = 4;                     // two bfloat16 rows of one column
constexpr size_t kPanelPairLanes = kPanelWidth * 2;  // bfloat16 per panel pair-row

struct Band {
  const uint16_t* tile;
  size_t stored_rows;  // even
  size_t first_col;
  const uint16_t* after;  // on the last strip: what is read next
  const uint16_t* ahead;  // read a key tile later in the tile's place, or null
};

template <size_t kRows, size_t kCols>
MHA_BF16_TARGET inline void MicroTile(const uint16_t* a, size_t lda, Band b, size_t depth,
                                      float* c, size_t ldc, bool accumulate) {
  const uint16_t* band[kCols];  // pair-row 0 of each panel
  HWY_UNROLL(4)
  for (size_t col = 0; col < kCols; ++col) {
    band[col] = b.tile + PairedOffset(0, b.first_col + col * kPanelWidth, b.stored_rows);
  }
  __m512 acc[kRows][kCols];
  HWY_UNROLL(6)
  for (size_t r = 0; r < kRows; ++r) {
    HWY_UNROLL(4)
    for (size_t col = 0; col < kCols; ++col) {
      acc[r][col] = accumulate ? _mm512_loadu_ps(c + r * ldc + col * kPanelWidth)
                               : _mm512_setzero_ps();
    }
  }
  constexpr size_t kRowBytes = kPanelWidth * 2;  // one bfloat16 panel row
  const uint16_t* ahead =
      b.ahead ? b.ahead + PairedOffset(0, b.first_col, b.stored_rows) : nullptr;
  const size_t pairs = (depth + 1) / 2;
  for (size_t pair = 0; pair < pairs; ++pair) {
    HWY_UNROLL(4)
    for (size_t panel = 0; panel < kCols; ++panel) {
      const uintptr_t line =
          ahead ? AheadAddress(ahead, panel, b.stored_rows, kRowBytes, 2 * pair)
                : PrefetchAddress(band[0], panel, kCols, b.stored_rows, kRowBytes,
                                  2 * pair, b.after);
      if (line) _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T1);
    }
    __m512i row[kCols];
    HWY_UNROLL(4)
    for (size_t col = 0; col < kCols; ++col) {
      row[col] = _mm512_loadu_si512(band[col] + pair * kPanelPairLanes);
    }
    HWY_UNROLL(6)
    for (size_t r = 0; r < kRows; ++r) {
      int32_t bits;  // A's two elements, as one lane
      std::memcpy(&bits, a + r * lda + 2 * pair, kPairBytes);
      const __m512bh broadcast = (__m512bh)_mm512_set1_epi32(bits);
      HWY_UNROLL(4)
      for (size_t col = 0; col < kCols; ++col) {
        acc[r][col] = _mm512_dpbf16_ps(acc[r][col], broadcast, (__m512bh)row[col]);
      }
    }
  }
  HWY_UNROLL(6)
  for (size_t r = 0; r < kRows; ++r) {
    HWY_UNROLL(4)
    for (size_t col = 0; col < kCols; ++col) {
      _mm512_storeu_ps(c + r * ldc + col * kPanelWidth, acc[r][col]);
    }
  }
}

// All rows of one strip of kCols panels.
template <size_t kCols>
MHA_BF16_TARGET void Strip(size_t rows, const uint16_t* a, size_t lda, Band b,
                           size_t depth, float* c, size_t ldc, bool accumulate) {
  constexpr size_t kTile = 6;
  size_t r = 0;
  for (; r + kTile <= rows; r += kTile) {
    MicroTile<kTile, kCols>(a + r * lda, lda, b, depth, c + r * ldc, ldc, accumulate);
  }
  a += r * lda;
  c += r * ldc;
  switch (rows - r) {
    case 5:
      return MicroTile<5, kCols>(a, lda, b, depth, c, ldc, accumulate);
    case 4:
      return MicroTile<4, kCols>(a, lda, b, depth, c, ldc, accumulate);
    case 3:
      return MicroTile<3, kCols>(a, lda, b, depth, c, ldc, accumulate);
    case 2:
      return MicroTile<2, kCols>(a, lda, b, depth, c, ldc, accumulate);
    case 1:
      return MicroTile<1, kCols>(a, lda, b, depth, c, ldc, accumulate);
    default:
      return;
  }
}

}  // namespace

MHA_BF16_TARGET void Bf16TileMatMulAvx512(size_t rows, size_t n, size_t depth,
                                          const uint16_t* a, size_t lda,
                                          const uint16_t* b, size_t b_rows, float* c,
                                          size_t ldc, bool accumulate,
                                          const uint16_t* after, const uint16_t* ahead) {
  constexpr size_t kCols = 4;  // panels per strip
  const size_t panels = n / kPanelWidth;
  Band band{b, RoundUp(b_rows, 2), 0, nullptr, ahead};
  size_t p = 0;
  for (; p + kCols <= panels; p += kCols) {
    band.first_col = p * kPanelWidth;
    band.after = p + kCols == panels ? after : nullptr;
    Strip<kCols>(rows, a, lda, band, depth, c + p * kPanelWidth, ldc, accumulate);
  }
  band.first_col = p * kPanelWidth;
  band.after = after;
  c += p * kPanelWidth;
  switch (panels - p) {
    case 3:
      return Strip<3>(rows, a, lda, band, depth, c, ldc, accumulate);
    case 2:
      return Strip<2>(rows, a, lda, band, depth, c, ldc, accumulate);
    case 1:
      return Strip<1>(rows, a, lda, band, depth, c, ldc, accumulate);
    default:
      return;
  }
}

}  // namespace mha::internal

#else  // not x86: never called

namespace mha::internal {

void Bf16TileMatMulAvx512(size_t, size_t, size_t, const uint16_t*, size_t,
                          const uint16_t*, size_t, float*, size_t, bool, const uint16_t*,
                          const uint16_t*) {}

}  // namespace mha::internal

#endif
