// Int8TileMatMulVnni (int8_tile_matmul.h) on AVX512_VNNI. vpdpwssd sums, per 32-bit
// lane, two products of 16-bit integers: a lane must hold one key's two consecutive
// channels, where a K^T panel row holds one channel of 16 keys. So a 32-byte load
// takes two panel rows, vpermb (AVX512_VBMI) interleaves them into 16 keys of 2
// channels, and vpmovsxbw widens them to 16 bits. 4 x 4 accumulators, 4 key
// vectors, the permutation and a broadcast fit the 32 registers.
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

#define MHA_VNNI_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")))

namespace mha::internal {
namespace {

constexpr size_t kLaneChannels = 2;  // 16-bit products per 32-bit lane
constexpr size_t kRowBlock = 4, kPanelBlock = 4;
// vpermb and vcvtdq2ps in their zero-masking forms, every lane selected: GCC 12's
// plain intrinsics start from an "undefined" vector that -Werror=uninitialized
// rejects once inlined here.
constexpr __mmask32 kAll32 = ~__mmask32{0};
constexpr __mmask16 kAll16 = 0xFFFF;

// vpermb's indices: byte c * 2 + r of the result is row r's column c, byte r * 16 + c
// of two panel rows.
MHA_VNNI_TARGET inline __m256i PairIndices() {
  alignas(32) int8_t indices[32];
  for (size_t out = 0; out < 32; ++out) {
    indices[out] =
        static_cast<int8_t>(out % kLaneChannels * kPanelWidth + out / kLaneChannels);
  }
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(indices));
}

// A strip's panels, and the lines each prefetches as it reads its own.
struct Strip {
  const int8_t* const* panels;
  const int8_t* const* ahead;
};

template <size_t kRows, size_t kPanels>
MHA_VNNI_TARGET void MicroTile(size_t depth, const int16_t* a, size_t lda,
                               const float* row_scales, const Strip& strip, bool prefetch,
                               float* c, size_t ldc) {
  const __m256i indices = PairIndices();
  const int8_t* panels[kPanels];
  const int8_t* ahead[kPanels];
  __m512i acc[kRows][kPanels];
  HWY_UNROLL(4)
  for (size_t p = 0; p < kPanels; ++p) {
    panels[p] = strip.panels[p];
    ahead[p] = strip.ahead[p];
    HWY_UNROLL(4)
    for (size_t r = 0; r < kRows; ++r) acc[r][p] = _mm512_setzero_si512();
  }
  for (size_t k = 0; k < depth; k += kLaneChannels) {
    const size_t offset = k * kPanelWidth;  // bytes into a panel
    __m512i keys[kPanels];
    HWY_UNROLL(4)
    for (size_t p = 0; p < kPanels; ++p) {
      if (prefetch && offset % 64 == 0) {  // a line every other step
        _mm_prefetch(reinterpret_cast<const char*>(ahead[p] + offset), _MM_HINT_T1);
      }
      const __m256i pairs = _mm256_maskz_permutexvar_epi8(
          kAll32, indices,
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panels[p] + offset)));
      keys[p] = _mm512_cvtepi8_epi16(pairs);
    }
    HWY_UNROLL(4)
    for (size_t r = 0; r < kRows; ++r) {
      int32_t pair;  // two query codes, as one lane
      std::memcpy(&pair, a + r * lda + k, sizeof(pair));
      const __m512i query = _mm512_set1_epi32(pair);
      HWY_UNROLL(4)
      for (size_t p = 0; p < kPanels; ++p) {
        acc[r][p] = _mm512_dpwssd_epi32(acc[r][p], keys[p], query);
      }
    }
  }
  HWY_UNROLL(4)
  for (size_t r = 0; r < kRows; ++r) {
    const __m512 scale = _mm512_set1_ps(row_scales[r]);
    HWY_UNROLL(4)
    for (size_t p = 0; p < kPanels; ++p) {
      const __m512 sums = _mm512_maskz_cvtepi32_ps(kAll16, acc[r][p]);
      _mm512_storeu_ps(c + r * ldc + p * kPanelWidth, _mm512_mul_ps(sums, scale));
    }
  }
}

// All rows against one strip of kPanels panels; the first row block prefetches.
template <size_t kPanels>
MHA_VNNI_TARGET void StripRows(size_t rows, size_t depth, const int16_t* a, size_t lda,
                               const float* row_scales, const Strip& strip, float* c,
                               size_t ldc) {
  for (size_t r = 0; r < rows; r += kRowBlock) {
    const int16_t* a_rows = a + r * lda;
    float* c_rows = c + r * ldc;
    const float* scales = row_scales + r;
    const bool first = r == 0;
    switch (std::min(kRowBlock, rows - r)) {
      case 4:
        MicroTile<4, kPanels>(depth, a_rows, lda, scales, strip, first, c_rows, ldc);
        break;
      case 3:
        MicroTile<3, kPanels>(depth, a_rows, lda, scales, strip, first, c_rows, ldc);
        break;
      case 2:
        MicroTile<2, kPanels>(depth, a_rows, lda, scales, strip, first, c_rows, ldc);
        break;
      default:
        MicroTile<1, kPanels>(depth, a_rows, lda, scales, strip, first, c_rows, ldc);
    }
  }
}

}  // namespace

MHA_VNNI_TARGET void Int8TileMatMulVnni(size_t rows, size_t panels, size_t depth,
                                        const int16_t* a, size_t lda,
                                        const float* row_scales,
                                        const int8_t* const* b_panels,
                                        const int8_t* const* ahead, float* c,
                                        size_t ldc) {
  for (size_t p = 0; p < panels; p += kPanelBlock) {
    const Strip strip{b_panels + p, ahead + p};
    float* c_strip = c + p * kPanelWidth;
    switch (std::min(kPanelBlock, panels - p)) {
      case 4:
        StripRows<4>(rows, depth, a, lda, row_scales, strip, c_strip, ldc);
        break;
      case 3:
        StripRows<3>(rows, depth, a, lda, row_scales, strip, c_strip, ldc);
        break;
      case 2:
        StripRows<2>(rows, depth, a, lda, row_scales, strip, c_strip, ldc);
        break;
      default:
        StripRows<1>(rows, depth, a, lda, row_scales, strip, c_strip, ldc);
    }
  }
}

}  // namespace mha::internal

#else  // not x86: never called

namespace mha::internal {

void Int8TileMatMulVnni(size_t, size_t, size_t, const int16_t*, size_t, const float*,
                        const int8_t* const*, const int8_t* const*, float*, size_t) {}

}  // namespace mha::internal

#endif
