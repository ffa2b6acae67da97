// Int8TileMatMulVnni (int8_tile_matmul.h) on AVX512_VNNI. vpdpwssd sums, per 32-bit
// lane, two products of 16-bit integers: a lane must hold one column's two
// consecutive depth rows (a key's two channels; a value channel's two keys), as a
// panel row pair of int8 pages does (kv_pages.h): vpmovsxbw widens 16 columns of 2
// rows from 32 bytes; 4-bit codes (int8_tile_matmul.h) widen to the same pairs, a
// byte per column zero-extended to its lane, the high nibble moved to the upper 16
// bits (one vpternlogd). 4 x 4 accumulators, 4 key vectors and a broadcast fit the 32
// registers.
#include "src/kernel/int8_tile_matmul.h"

#include <algorithm>
#include <cstring>

#include "hwy/base.h"
#include "src/base/cpu_features.h"
#include "src/kv/tile_sizes.h"

namespace mha::internal {

bool Int8DotProducts(size_t head_dim) { return head_dim % 2 == 0 && CpuHasAvx512Vnni(); }

}  // namespace mha::internal

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define MHA_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

namespace mha::internal {
namespace {

constexpr size_t kLaneChannels = 2;  // 16-bit products per 32-bit lane
constexpr size_t kRowBlock = 4, kPanelBlock = 4;
// vcvtdq2ps, vcvtph2ps, vpmovzxbd and vpslld in their zero-masking form, every lane
// selected: GCC 12's plain intrinsics start from an "undefined" vector that
// -Werror=uninitialized rejects once inlined here.
constexpr __mmask16 kAll16 = 0xFFFF;

// A chunk's rows k and k + 1 (k even) as 16-bit pairs, a column to a 32-bit lane:
// int8 codes sign-extended; 4-bit codes (a byte per column b) spread to the lane's
// two halves, (b | b << 12) & 0x000F000F, less their zero.
template <bool kNibbles>
MHA_VNNI_TARGET HWY_INLINE __m512i LoadPairs(const int8_t* chunk, size_t k,
                                             __m512i zero) {
  const int8_t* at = chunk + k / 2 * PanelPairBytes(kNibbles);
  if constexpr (kNibbles) {
    const __m512i bytes = _mm512_maskz_cvtepu8_epi32(
        kAll16, _mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
    const __m512i pairs = _mm512_ternarylogic_epi32(  // (a | b) & c
        bytes, _mm512_maskz_slli_epi32(kAll16, bytes, 12), _mm512_set1_epi32(0x000F000F),
        0xA8);
    return _mm512_sub_epi16(pairs, zero);
  } else {
    (void)zero;
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at)));
  }
}

// sums[r][p] += A's kRows rows against chunks [first, end) of the strip of kPanels
// panels from first_panel (A's columns from `a`, B's rows to `depth`); each chunk's
// ahead sent on to L2 as the chunk is read when `prefetch`. Not inlined, its
// accumulators a local copy, and one call for all the strip's unscaled chunks, as on
// AVX2 (int8_tile_matmul_avx2.cc): inlined, GCC 12 kept them on the stack.
template <size_t kRows, size_t kPanels, bool kNibbles>
MHA_VNNI_TARGET HWY_NOINLINE void AddChunks(size_t depth, const int16_t* a, size_t lda,
                                            const Int8Panels& b, size_t first_panel,
                                            size_t first, size_t end, bool prefetch,
                                            __m512i (&sums)[kRows][kPanels]) {
  __m512i acc[kRows][kPanels];
  const __m512i zero = _mm512_set1_epi16(b.zero_code);
  HWY_UNROLL(4)
  for (size_t r = 0; r < kRows; ++r) {
    HWY_UNROLL(4)
    for (size_t p = 0; p < kPanels; ++p) acc[r][p] = sums[r][p];
  }
  for (size_t q = first; q < end; ++q) {
    const size_t begin = q * b.chunk_depth;
    const int8_t* chunks[kPanels];
    const int8_t* aheads[kPanels];
    HWY_UNROLL(4)
    for (size_t p = 0; p < kPanels; ++p) {
      const size_t index = (first_panel + p) * b.chunk_count + q;
      chunks[p] = b.chunks[index];
      aheads[p] = prefetch ? b.aheads[index] : nullptr;
    }
    const int16_t* a_chunk = a + begin;
    const size_t rows = std::min(b.chunk_depth, depth - begin);
    for (size_t k = 0; k < rows; k += kLaneChannels) {
      const size_t offset = k / 2 * PanelPairBytes(kNibbles);  // bytes into a chunk
      __m512i columns[kPanels];
      HWY_UNROLL(4)
      for (size_t p = 0; p < kPanels; ++p) {
        if (aheads[p] && offset % 64 == 0) {  // a line every 64 bytes
          _mm_prefetch(reinterpret_cast<const char*>(aheads[p] + offset), _MM_HINT_T1);
        }
        columns[p] = LoadPairs<kNibbles>(chunks[p], k, zero);
      }
      HWY_UNROLL(4)
      for (size_t r = 0; r < kRows; ++r) {
        int32_t pair;  // two codes of A, as one lane
        std::memcpy(&pair, a_chunk + r * lda + k, sizeof(pair));
        const __m512i codes = _mm512_set1_epi32(pair);
        HWY_UNROLL(4)
        for (size_t p = 0; p < kPanels; ++p) {
          acc[r][p] = _mm512_dpwssd_epi32(acc[r][p], columns[p], codes);
        }
      }
    }
  }
  HWY_UNROLL(4)
  for (size_t r = 0; r < kRows; ++r) {
    HWY_UNROLL(4)
    for (size_t p = 0; p < kPanels; ++p) sums[r][p] = acc[r][p];
  }
}

// AddChunks for B's codes.
template <size_t kRows, size_t kPanels>
MHA_VNNI_TARGET void AddCodes(size_t depth, const int16_t* a, size_t lda,
                              const Int8Panels& b, size_t first_panel, size_t first,
                              size_t end, bool prefetch,
                              __m512i (&sums)[kRows][kPanels]) {
  if (b.nibbles) {
    AddChunks<kRows, kPanels, true>(depth, a, lda, b, first_panel, first, end, prefetch,
                                    sums);
  } else {
    AddChunks<kRows, kPanels, false>(depth, a, lda, b, first_panel, first, end, prefetch,
                                     sums);
  }
}

// The float sums of kRows rows against the strip of kPanels panels from first_panel:
// the integer sums converted, or with chunk scales, each chunk's converted and
// scaled, added in chunk order (two roundings each, as on AVX2: this file builds
// without FP contraction).
template <size_t kRows, size_t kPanels>
MHA_VNNI_TARGET void StripSums(size_t depth, const int16_t* a, size_t lda,
                               const Int8Panels& b, size_t first_panel, bool prefetch,
                               __m512 (&sums)[kRows][kPanels]) {
  const size_t chunks = (depth + b.chunk_depth - 1) / b.chunk_depth;
  __m512i acc[kRows][kPanels];
  HWY_UNROLL(4)
  for (size_t r = 0; r < kRows; ++r) {
    HWY_UNROLL(4)
    for (size_t p = 0; p < kPanels; ++p) acc[r][p] = _mm512_setzero_si512();
  }
  if (!b.chunk_scales) {
    AddCodes<kRows, kPanels>(depth, a, lda, b, first_panel, 0, chunks, prefetch, acc);
    HWY_UNROLL(4)
    for (size_t r = 0; r < kRows; ++r) {
      HWY_UNROLL(4)
      for (size_t p = 0; p < kPanels; ++p)
        sums[r][p] = _mm512_maskz_cvtepi32_ps(kAll16, acc[r][p]);
    }
    return;
  }
  HWY_UNROLL(4)
  for (size_t r = 0; r < kRows; ++r) {
    HWY_UNROLL(4)
    for (size_t p = 0; p < kPanels; ++p) sums[r][p] = _mm512_setzero_ps();
  }
  for (size_t q = 0; q < chunks; ++q) {
    AddCodes<kRows, kPanels>(depth, a, lda, b, first_panel, q, q + 1, prefetch, acc);
    HWY_UNROLL(4)
    for (size_t p = 0; p < kPanels; ++p) {
      const __m512 scale = _mm512_maskz_cvtph_ps(
          kAll16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                      b.chunk_scales[(first_panel + p) * b.chunk_count + q])));
      HWY_UNROLL(4)
      for (size_t r = 0; r < kRows; ++r) {
        sums[r][p] = _mm512_add_ps(
            sums[r][p],
            _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(kAll16, acc[r][p]), scale));
        acc[r][p] = _mm512_setzero_si512();
      }
    }
  }
}

// kRows rows of C against the strip of kPanels panels from `first_panel`; the
// chunks' aheads prefetched when `prefetch`.
template <size_t kRows, size_t kPanels>
MHA_VNNI_TARGET void MicroTile(size_t depth, const int16_t* a, size_t lda,
                               const float* row_scales, const Int8Panels& b,
                               size_t first_panel, bool prefetch, float* c, size_t ldc,
                               bool accumulate) {
  __m512 sums[kRows][kPanels];
  StripSums<kRows, kPanels>(depth, a, lda, b, first_panel, prefetch, sums);
  // The scale and the add: two roundings, as on AVX2.
  HWY_UNROLL(4)
  for (size_t r = 0; r < kRows; ++r) {
    const __m512 scale = _mm512_set1_ps(row_scales[r]);
    HWY_UNROLL(4)
    for (size_t p = 0; p < kPanels; ++p) {
      float* out = c + r * ldc + p * kPanelWidth;
      const __m512 scaled = _mm512_mul_ps(sums[r][p], scale);
      _mm512_storeu_ps(out,
                       accumulate ? _mm512_add_ps(_mm512_loadu_ps(out), scaled) : scaled);
    }
  }
}

// All rows against the strip of kPanels panels from first_panel; the first row block
// prefetches.
template <size_t kPanels>
MHA_VNNI_TARGET void StripRows(size_t rows, size_t depth, const int16_t* a, size_t lda,
                               const float* row_scales, const Int8Panels& b,
                               size_t first_panel, float* c, size_t ldc,
                               bool accumulate) {
  for (size_t r = 0; r < rows; r += kRowBlock) {
    const int16_t* a_rows = a + r * lda;
    float* c_rows = c + r * ldc;
    const float* scales = row_scales + r;
    const bool first = r == 0;
    switch (std::min(kRowBlock, rows - r)) {
      case 4:
        MicroTile<4, kPanels>(depth, a_rows, lda, scales, b, first_panel, first, c_rows,
                              ldc, accumulate);
        break;
      case 3:
        MicroTile<3, kPanels>(depth, a_rows, lda, scales, b, first_panel, first, c_rows,
                              ldc, accumulate);
        break;
      case 2:
        MicroTile<2, kPanels>(depth, a_rows, lda, scales, b, first_panel, first, c_rows,
                              ldc, accumulate);
        break;
      default:
        MicroTile<1, kPanels>(depth, a_rows, lda, scales, b, first_panel, first, c_rows,
                              ldc, accumulate);
    }
  }
}

}  // namespace

MHA_VNNI_TARGET void Int8TileMatMulVnni(size_t rows, size_t panels, size_t depth,
                                        const int16_t* a, size_t lda,
                                        const float* row_scales, const Int8Panels& b,
                                        float* c, size_t ldc, bool accumulate) {
  for (size_t p = 0; p < panels; p += kPanelBlock) {
    float* c_strip = c + p * kPanelWidth;
    switch (std::min(kPanelBlock, panels - p)) {
      case 4:
        StripRows<4>(rows, depth, a, lda, row_scales, b, p, c_strip, ldc, accumulate);
        break;
      case 3:
        StripRows<3>(rows, depth, a, lda, row_scales, b, p, c_strip, ldc, accumulate);
        break;
      case 2:
        StripRows<2>(rows, depth, a, lda, row_scales, b, p, c_strip, ldc, accumulate);
        break;
      default:
        StripRows<1>(rows, depth, a, lda, row_scales, b, p, c_strip, ldc, accumulate);
    }
  }
}

}  // namespace mha::internal

#else  // not x86: never called

namespace mha::internal {

void Int8TileMatMulVnni(size_t, size_t, size_t, const int16_t*, size_t, const float*,
                        const Int8Panels&, float*, size_t, bool) {}

}  // namespace mha::internal

#endif
