// Per-target register-blocked matrix multiply for the attention tiles:
// C[rows, n] (+)= A[rows, depth] B[depth, n], A and C row-major with their own
// strides, B a KV page tile in column panels (src/kernels/kv_pages.h), n a multiple of
// kPanelWidth. One kernel serves both tile products: scores = Q K^T (B = a K^T page)
// and context += P V (B = a V page).
//
// Each micro-tile keeps kRows x kCols vectors of C in registers and streams one row
// of B per step, broadcasting one element of A per row: the classic outer-product
// GEMM kernel, sized to the target's register file.

#if defined(MHA_KERNELS_TILE_MATMUL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_KERNELS_TILE_MATMUL_INL_H_
#undef MHA_KERNELS_TILE_MATMUL_INL_H_
#else
#define MHA_KERNELS_TILE_MATMUL_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "src/kernels/kv_pages.h"
#include "src/kernels/tile_sizes.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using mha::internal::kTileRows;
// 6 x 4 accumulators + 4 B vectors + 1 broadcast fit AVX-512's 32 registers;
// 6 x 2 + 2 + 1 fit the 16 of AVX2 and SSE4.
constexpr size_t kTileCols = HWY_TARGET <= HWY_AVX3 ? 4 : 2;

// B rows prefetched ahead of the loads (0: none). A decode step streams KV pages from
// memory in panels only 4-8 KiB long, too short for the hardware prefetchers to ramp
// up. With AVX-512's four panels per strip, 32 rows ahead (1-2 KiB) made decoding
// 1.15-1.24x faster on a Zen 5; the AVX2 kernel's two panels per strip gained nothing
// there (docs/performance.md).
constexpr size_t kPrefetchRows = HWY_TARGET <= HWY_AVX3 ? 32 : 0;

// The address may lie past the tile (the last strip's next one): a prefetch never
// faults, and integer arithmetic keeps the pointer arithmetic defined.
template <typename T>
HWY_INLINE void PrefetchAt(const T* base, size_t offset) {
  hwy::Prefetch(
      reinterpret_cast<const T*>(reinterpret_cast<uintptr_t>(base) + offset * sizeof(T)));
}

template <class D>
HWY_INLINE hn::Vec<D> LoadRow(D d, const float* HWY_RESTRICT p) {
  return hn::LoadU(d, p);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadRow(D d, const hwy::bfloat16_t* HWY_RESTRICT p) {
  return hn::PromoteTo(d, hn::LoadU(hn::Rebind<hwy::bfloat16_t, D>(), p));
}

template <class D>
HWY_INLINE hn::Vec<D> LoadRow(D d, const int8_t* HWY_RESTRICT p) {
  const hn::Rebind<int32_t, D> di32;
  return hn::ConvertTo(d, hn::PromoteTo(di32, hn::LoadU(hn::Rebind<int8_t, D>(), p)));
}

// B's tile: its data, its rows (>= depth: the product may use the first rows only)
// and the strip's first column.
template <typename TB>
struct BandOf {
  const TB* tile;
  size_t rows;
  size_t first_col;
};

template <size_t kRows, size_t kCols, class D, typename TB>
HWY_INLINE void MicroTile(D d, const float* HWY_RESTRICT a, size_t lda, BandOf<TB> b,
                          size_t depth, float* HWY_RESTRICT c, size_t ldc,
                          bool accumulate) {
  using V = hn::Vec<D>;
  const size_t lanes = hn::Lanes(d);
  const TB* HWY_RESTRICT band[kCols];  // row 0 of each vector's columns
  HWY_UNROLL(4)
  for (size_t col = 0; col < kCols; ++col) {
    band[col] = b.tile + internal::PanelOffset(0, b.first_col + col * lanes, b.rows);
  }
  V acc[kRows][kCols];
  HWY_UNROLL(6)
  for (size_t r = 0; r < kRows; ++r) {
    HWY_UNROLL(4)
    for (size_t col = 0; col < kCols; ++col) {
      acc[r][col] = accumulate ? hn::LoadU(d, c + r * ldc + col * lanes) : hn::Zero(d);
    }
  }
  // Past the band's last row, the prefetch moves on to the next strip's panels.
  const size_t next_strip = (kCols - 1) * b.rows * internal::kPanelWidth;
  for (size_t k = 0; k < depth; ++k) {
    if constexpr (kPrefetchRows > 0) {
      const size_t ahead = k + kPrefetchRows;
      const size_t offset =
          ahead * internal::kPanelWidth + (ahead >= b.rows ? next_strip : 0);
      HWY_UNROLL(4)
      for (size_t col = 0; col < kCols; ++col) PrefetchAt(band[col], offset);
    }
    V row[kCols];
    HWY_UNROLL(4)
    for (size_t col = 0; col < kCols; ++col)
      row[col] = LoadRow(d, band[col] + k * internal::kPanelWidth);
    HWY_UNROLL(6)
    for (size_t r = 0; r < kRows; ++r) {
      const V broadcast = hn::Set(d, a[r * lda + k]);
      HWY_UNROLL(4)
      for (size_t col = 0; col < kCols; ++col) {
        acc[r][col] = hn::MulAdd(broadcast, row[col], acc[r][col]);
      }
    }
  }
  HWY_UNROLL(6)
  for (size_t r = 0; r < kRows; ++r) {
    HWY_UNROLL(4)
    for (size_t col = 0; col < kCols; ++col) {
      hn::StoreU(acc[r][col], d, c + r * ldc + col * lanes);
    }
  }
}

// All rows of one column strip of kCols vectors.
template <size_t kCols, class D, typename TB>
HWY_INLINE void TileStrip(D d, size_t rows, const float* HWY_RESTRICT a, size_t lda,
                          BandOf<TB> b, size_t depth, float* HWY_RESTRICT c, size_t ldc,
                          bool accumulate) {
  size_t r = 0;
  for (; r + kTileRows <= rows; r += kTileRows) {
    MicroTile<kTileRows, kCols>(d, a + r * lda, lda, b, depth, c + r * ldc, ldc,
                                accumulate);
  }
  a += r * lda;
  c += r * ldc;
  switch (rows - r) {
    case 5:
      return MicroTile<5, kCols>(d, a, lda, b, depth, c, ldc, accumulate);
    case 4:
      return MicroTile<4, kCols>(d, a, lda, b, depth, c, ldc, accumulate);
    case 3:
      return MicroTile<3, kCols>(d, a, lda, b, depth, c, ldc, accumulate);
    case 2:
      return MicroTile<2, kCols>(d, a, lda, b, depth, c, ldc, accumulate);
    case 1:
      return MicroTile<1, kCols>(d, a, lda, b, depth, c, ldc, accumulate);
    default:
      return;
  }
}

// C[rows, n] = (accumulate ? C : 0) + A[rows, depth] B[depth, n]; n % kPanelWidth == 0.
// B: the first depth rows of a [b_rows, >= n] tile in column panels; float, or
// bfloat16 or int8 (a KV cache) widened to float as it is loaded.
template <class D, typename TB>
HWY_INLINE void TileMatMul(D d, size_t rows, size_t n, size_t depth,
                           const float* HWY_RESTRICT a, size_t lda,
                           const TB* HWY_RESTRICT b, size_t b_rows, float* HWY_RESTRICT c,
                           size_t ldc, bool accumulate) {
  const size_t lanes = hn::Lanes(d);
  HWY_DASSERT(n % internal::kPanelWidth == 0 && internal::kPanelWidth % lanes == 0);
  HWY_DASSERT(lda >= depth && ldc >= n && b_rows >= depth);
  const size_t vectors = n / lanes;
  size_t v = 0;
  for (; v + kTileCols <= vectors; v += kTileCols) {
    TileStrip<kTileCols>(d, rows, a, lda, BandOf<TB>{b, b_rows, v * lanes}, depth,
                         c + v * lanes, ldc, accumulate);
  }
  const BandOf<TB> rest{b, b_rows, v * lanes};
  c += v * lanes;
  // Fewer than kTileCols vectors remain; only strips narrower than kTileCols exist.
  const size_t remaining = vectors - v;
  if constexpr (kTileCols > 3) {
    if (remaining == 3)
      return TileStrip<3>(d, rows, a, lda, rest, depth, c, ldc, accumulate);
  }
  if constexpr (kTileCols > 2) {
    if (remaining == 2)
      return TileStrip<2>(d, rows, a, lda, rest, depth, c, ldc, accumulate);
  }
  if (remaining == 1) {
    TileStrip<1>(d, rows, a, lda, rest, depth, c, ldc, accumulate);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_TILE_MATMUL_INL_H_
