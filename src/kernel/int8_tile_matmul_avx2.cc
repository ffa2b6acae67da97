// Int8TileMatMulAvx2 (int8_tile_matmul.h): the AVX512_VNNI kernel's sums on AVX2.
// vpmaddwd multiplies 16-bit integers and adds each 32-bit lane's two products
// (vpdpwssd without its accumulate): a lane must hold one column's two consecutive
// depth rows (a key's two channels; a value channel's two keys), as a panel row pair
// of int8 pages does (kv_pages.h): vpmovsxbw widens 8 columns of 2 rows from
// memory. (Pages of one depth row per panel row cost two interleaves a step more:
// 1.34x the kernel's time in cache, Zen 3.)
// 4-bit codes (int8_tile_matmul.h) widen to the same pairs: a byte per column widened
// to 16 bits, its nibbles split and interleaved (the columns in a lane order the sums
// undo once, not per step).
// 4 x 2 accumulators, 2 column vectors and a broadcast fit the 16 registers.
#include <algorithm>
#include <cstring>

#include "hwy/base.h"
#include "src/kernel/int8_tile_matmul.h"
#include "src/kv/tile_sizes.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define MHA_AVX2_TARGET __attribute__((target("avx2,f16c")))  // Highway's AVX2 has F16C

namespace mha::internal {
namespace {

constexpr size_t kLaneChannels = 2;  // 16-bit products per 32-bit lane
constexpr size_t kRowBlock = 4;
constexpr size_t kHalf = kPanelWidth / 2;  // keys per vector

// 16 columns' 4-bit pairs from 16 bytes, less their zero: each byte b widened to 16
// bits, its nibbles split (b & 15, b >> 4) and interleaved to 32-bit lanes. In-lane
// interleaves leave the columns in lane order: [0, 4) and [8, 12) to low, [4, 8) and
// [12, 16) to high (InColumnOrder restores it). Seven operations, where widening 8
// bytes to 32-bit lanes first took five per 8 columns (the kernel 1.07x as long in
// cache, AMX Xeon capped at AVX2).
MHA_AVX2_TARGET HWY_INLINE void SpreadNibbles(const int8_t* at, __m256i zero,
                                              __m256i& low, __m256i& high) {
  const __m256i bytes =
      _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
  const __m256i even = _mm256_sub_epi16(
      _mm256_and_si256(bytes, _mm256_set1_epi16(0x000F)), zero);  // rows 2i
  const __m256i odd = _mm256_sub_epi16(_mm256_srli_epi16(bytes, 4), zero);
  low = _mm256_unpacklo_epi16(even, odd);
  high = _mm256_unpackhi_epi16(even, odd);
}

// Sums of 16 columns in SpreadNibbles's lane order back in column order (and the
// reverse: the same exchange of 128-bit halves).
MHA_AVX2_TARGET HWY_INLINE void InColumnOrder(__m256i (&sums)[2]) {
  const __m256i low = _mm256_permute2x128_si256(sums[0], sums[1], 0x20);
  sums[1] = _mm256_permute2x128_si256(sums[0], sums[1], 0x31);
  sums[0] = low;
}

// A chunk's rows k and k + 1 (k even) as 16-bit pairs, a column to a 32-bit lane:
// int8 codes sign-extended, columns [0, 8) to low, [8, 16) to high; 4-bit codes in
// SpreadNibbles's lane order.
template <bool kNibbles>
MHA_AVX2_TARGET HWY_INLINE void LoadPairs(const int8_t* chunk, size_t k, __m256i zero,
                                          __m256i& low, __m256i& high) {
  const int8_t* at = chunk + k / 2 * PanelPairBytes(kNibbles);
  if constexpr (kNibbles) {
    SpreadNibbles(at, zero, low, high);
  } else {
    (void)zero;
    low = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
    high = _mm256_cvtepi8_epi16(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + kHalf * kLaneChannels)));
  }
}

// sums[r] += A's kRows rows against chunks [first, end) of panel `panel` of B (A's
// columns from `a`, B's rows to `depth`); each chunk's ahead sent on to L2 as the
// chunk is read when `prefetch`. Not inlined: inlined into its caller, GCC 12 kept
// every accumulator on the stack (a store and a reload per step; as slow as the fp32
// products). Out of line, on register copies, it needs no register pin either: an
// empty asm holding the accumulators made GCC compute each sum in a spare register
// and copy it back (9 register moves a step; the kernel about 10% slower in cache,
// Zen 3). One call takes all the panel's chunks when they are unscaled: a call per
// chunk loaded and stored the accumulators every 8 steps over 16-key pages (P V 1.12x
// as long in cache).
template <size_t kRows, bool kNibbles>
MHA_AVX2_TARGET HWY_NOINLINE void AddChunks(size_t depth, const int16_t* a, size_t lda,
                                            const Int8Panels& b, size_t panel,
                                            size_t first, size_t end, bool prefetch,
                                            __m256i (&sums)[kRows][2]) {
  __m256i acc[kRows][2];  // a copy the loop keeps in registers (sums stay in memory)
  const __m256i zero = _mm256_set1_epi16(b.zero_code);
  HWY_UNROLL(4)
  for (size_t r = 0; r < kRows; ++r) acc[r][0] = sums[r][0], acc[r][1] = sums[r][1];
  for (size_t q = first; q < end; ++q) {
    const size_t index = panel * b.chunk_count + q, begin = q * b.chunk_depth;
    const int8_t* chunk = b.chunks[index];
    const int8_t* ahead = prefetch ? b.aheads[index] : nullptr;
    const int16_t* a_chunk = a + begin;
    const size_t rows = std::min(b.chunk_depth, depth - begin);
    for (size_t k = 0; k < rows; k += kLaneChannels) {
      const size_t offset = k / 2 * PanelPairBytes(kNibbles);  // bytes into the chunk
      if (ahead && offset % 64 == 0) {                         // a line every 64 bytes
        _mm_prefetch(reinterpret_cast<const char*>(ahead + offset), _MM_HINT_T1);
      }
      __m256i low, high;
      LoadPairs<kNibbles>(chunk, k, zero, low, high);
      HWY_UNROLL(4)
      for (size_t r = 0; r < kRows; ++r) {
        int32_t pair;  // two codes of A, as one lane
        std::memcpy(&pair, a_chunk + r * lda + k, sizeof(pair));
        const __m256i codes = _mm256_set1_epi32(pair);
        acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(low, codes));
        acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(high, codes));
      }
    }
  }
  HWY_UNROLL(4)
  for (size_t r = 0; r < kRows; ++r) sums[r][0] = acc[r][0], sums[r][1] = acc[r][1];
}

// AddChunks for B's codes, from sums of zero (4-bit codes' sums are in lane order
// until they are whole), the sums in column order.
template <size_t kRows>
MHA_AVX2_TARGET void AddCodes(size_t depth, const int16_t* a, size_t lda,
                              const Int8Panels& b, size_t panel, size_t first, size_t end,
                              bool prefetch, __m256i (&sums)[kRows][2]) {
  if (b.nibbles) {
    AddChunks<kRows, true>(depth, a, lda, b, panel, first, end, prefetch, sums);
    HWY_UNROLL(4)
    for (size_t r = 0; r < kRows; ++r) InColumnOrder(sums[r]);
  } else {
    AddChunks<kRows, false>(depth, a, lda, b, panel, first, end, prefetch, sums);
  }
}

// The float sums of kRows rows against panel `panel` of B: the integer sums
// converted, or with chunk scales, each chunk's converted and scaled, added in chunk
// order (two roundings each: this file builds without FP contraction).
template <size_t kRows>
MHA_AVX2_TARGET void PanelSums(size_t depth, const int16_t* a, size_t lda,
                               const Int8Panels& b, size_t panel, bool prefetch,
                               __m256 (&sums)[kRows][2]) {
  const size_t chunks = (depth + b.chunk_depth - 1) / b.chunk_depth;
  __m256i acc[kRows][2];
  HWY_UNROLL(4)
  for (size_t r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  if (!b.chunk_scales) {
    AddCodes<kRows>(depth, a, lda, b, panel, 0, chunks, prefetch, acc);
    HWY_UNROLL(4)
    for (size_t r = 0; r < kRows; ++r) {
      sums[r][0] = _mm256_cvtepi32_ps(acc[r][0]);
      sums[r][1] = _mm256_cvtepi32_ps(acc[r][1]);
    }
    return;
  }
  HWY_UNROLL(4)
  for (size_t r = 0; r < kRows; ++r) sums[r][0] = sums[r][1] = _mm256_setzero_ps();
  for (size_t q = 0; q < chunks; ++q) {
    AddCodes<kRows>(depth, a, lda, b, panel, q, q + 1, prefetch, acc);
    const uint16_t* scales = b.chunk_scales[panel * b.chunk_count + q];
    __m256 scale[2];
    for (size_t half = 0; half < 2; ++half) {
      scale[half] = _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + half * kHalf)));
    }
    HWY_UNROLL(4)
    for (size_t r = 0; r < kRows; ++r) {
      for (size_t half = 0; half < 2; ++half) {
        sums[r][half] = _mm256_add_ps(
            sums[r][half], _mm256_mul_ps(_mm256_cvtepi32_ps(acc[r][half]), scale[half]));
        acc[r][half] = _mm256_setzero_si256();
      }
    }
  }
}

// kRows rows of C against panel `panel` of B; the chunks' aheads prefetched when
// `prefetch`.
template <size_t kRows>
MHA_AVX2_TARGET void MicroTile(size_t depth, const int16_t* a, size_t lda,
                               const float* row_scales, const Int8Panels& b, size_t panel,
                               bool prefetch, float* c, size_t ldc, bool accumulate) {
  __m256 sums[kRows][2];
  PanelSums<kRows>(depth, a, lda, b, panel, prefetch, sums);
  HWY_UNROLL(4)
  for (size_t r = 0; r < kRows; ++r) {
    const __m256 scale = _mm256_set1_ps(row_scales[r]);
    for (size_t half = 0; half < 2; ++half) {
      float* out = c + r * ldc + half * kHalf;
      const __m256 scaled = _mm256_mul_ps(sums[r][half], scale);
      _mm256_storeu_ps(out,
                       accumulate ? _mm256_add_ps(_mm256_loadu_ps(out), scaled) : scaled);
    }
  }
}

}  // namespace

MHA_AVX2_TARGET void Int8TileMatMulAvx2(size_t rows, size_t panels, size_t depth,
                                        const int16_t* a, size_t lda,
                                        const float* row_scales, const Int8Panels& b,
                                        float* c, size_t ldc, bool accumulate) {
  for (size_t p = 0; p < panels; ++p) {
    for (size_t r = 0; r < rows; r += kRowBlock) {
      const int16_t* a_rows = a + r * lda;
      float* c_rows = c + r * ldc + p * kPanelWidth;
      const float* scales = row_scales + r;
      const bool first = r == 0;  // the first row block streams the panel in
      switch (std::min(kRowBlock, rows - r)) {
        case 4:
          MicroTile<4>(depth, a_rows, lda, scales, b, p, first, c_rows, ldc, accumulate);
          break;
        case 3:
          MicroTile<3>(depth, a_rows, lda, scales, b, p, first, c_rows, ldc, accumulate);
          break;
        case 2:
          MicroTile<2>(depth, a_rows, lda, scales, b, p, first, c_rows, ldc, accumulate);
          break;
        default:
          MicroTile<1>(depth, a_rows, lda, scales, b, p, first, c_rows, ldc, accumulate);
      }
    }
  }
}

}  // namespace mha::internal

#else  // not x86: never called

namespace mha::internal {

void Int8TileMatMulAvx2(size_t, size_t, size_t, const int16_t*, size_t, const float*,
                        const Int8Panels&, float*, size_t, bool) {}

}  // namespace mha::internal

#endif
