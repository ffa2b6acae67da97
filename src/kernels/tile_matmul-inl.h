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
#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "src/kernels/fp8_widen-inl.h"
#include "src/kernels/kv_pages.h"
#include "src/kernels/prefetch_rule.h"
#include "src/kernels/tile_sizes.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using mha::internal::kTileRows;
// 6 x 4 accumulators + 4 B vectors + 1 broadcast fit AVX-512's 32 registers;
// 6 x 2 + 2 + 1 fit the 16 of AVX2 and SSE4.
constexpr size_t kTileCols = HWY_TARGET <= HWY_AVX3 ? 4 : 2;

// float and bfloat16 rows are prefetched into L2, int8 rows (four to a cache line)
// into L1 (where: prefetch_rule.h). On a Zen 4, decoding fp32 with L1 prefetches ran
// 1.2x slower than without any, and 1.5x faster with L2 ones; int8 gained most from
// L1 ones (docs/performance.md).
template <typename T>
HWY_INLINE void PrefetchAt(uintptr_t address) {
  if (address == 0) return;
#if HWY_ARCH_X86
  const char* line = reinterpret_cast<const char*>(address);
  if constexpr (sizeof(T) == 1) {
    _mm_prefetch(line, _MM_HINT_T0);
  } else {
    _mm_prefetch(line, _MM_HINT_T1);
  }
#else
  hwy::Prefetch(reinterpret_cast<const T*>(address));
#endif
}

template <class D>
HWY_INLINE hn::Vec<D> LoadRow(D d, const float* HWY_RESTRICT p) {
  return hn::LoadU(d, p);
}
// Rows k and k + 1 of a bfloat16 tile (paired rows: kv_pages.h): each 32-bit lane
// holds row k's element in its low half and row k + 1's in its high half, and a
// bfloat16 is the high half of its float.
template <class D>
HWY_INLINE void LoadRowPair(D d, const hwy::bfloat16_t* HWY_RESTRICT p, hn::Vec<D>& even,
                            hn::Vec<D>& odd) {
  const hn::RebindToUnsigned<D> du;
  const auto pairs = hn::LoadU(du, reinterpret_cast<const uint32_t*>(p));
  even = hn::BitCast(d, hn::ShiftLeft<16>(pairs));
  odd = hn::BitCast(d, hn::And(pairs, hn::Set(du, 0xFFFF0000u)));
}

// Rows k and k + 1 of an int4 tile (Int4Pair: kv_pages.h): the low and high nibbles
// of lanes bytes, unsigned codes 0..15.
template <class D>
HWY_INLINE void LoadRowPair(D d, const internal::Int4Pair* HWY_RESTRICT p,
                            hn::Vec<D>& even, hn::Vec<D>& odd) {
  const hn::Rebind<uint8_t, D> d8;
  const hn::Rebind<int32_t, D> di32;
  const auto pairs = hn::LoadU(d8, reinterpret_cast<const uint8_t*>(p));
  even = hn::ConvertTo(d, hn::PromoteTo(di32, hn::And(pairs, hn::Set(d8, uint8_t{15}))));
  odd = hn::ConvertTo(d, hn::PromoteTo(di32, hn::ShiftRight<4>(pairs)));
}

template <class D>
HWY_INLINE hn::Vec<D> LoadRow(D d, const int8_t* HWY_RESTRICT p) {
  const hn::Rebind<int32_t, D> di32;
  return hn::ConvertTo(d, hn::PromoteTo(di32, hn::LoadU(hn::Rebind<int8_t, D>(), p)));
}
template <class D>
HWY_INLINE hn::Vec<D> LoadRow(D d, const internal::Fp8E4M3* HWY_RESTRICT p) {
  return WidenFp8(d, p);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadRow(D d, const internal::Fp8E5M2* HWY_RESTRICT p) {
  return WidenFp8(d, p);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadRow(D d, const internal::Fp8E4M3Finite* HWY_RESTRICT p) {
  return WidenFp8(d, p);
}

// B's tile: its data, its rows (>= depth: the product may use the first rows only)
// and the strip's first column. `after`: on the tile's last strip, what is read
// next (another page), where its prefetches continue; null elsewhere.
// B may instead be pages side by side (`pages`: page i holds columns [i * page_cols,
// (i + 1) * page_cols), page_cols dividing the strip's width, `afters[i]` read after
// it): one strip then spans several pages (a decode step's Q K^T over 16-token
// pages: 4 x 4 accumulators instead of a chain of 4 waiting on the FMA latency).
// Or pages one below the other (`depth_pages`: page i holds depth rows
// [i * rows, (i + 1) * rows)): the accumulators stay in registers from page to page
// (a decode step's P V over 16-token pages). Each element's products are added in
// the same order every way. int8 and int4 B may have their rows scaled as they load:
// row k of the tile (of page i, side by side or one below the other) times
// row_scales[k] (page_row_scales[i][k]): keys per channel (channel_keys.h); with scale
// groups, a scale per row and group of scale_group_cols columns, group g's scales
// scale_group_stride floats after group g - 1's (int4 values, value_groups.h).
template <typename TB>
struct BandOf {
  const TB* tile;
  size_t rows;
  size_t first_col;
  const TB* after;
  const TB* const* pages = nullptr;
  const TB* const* afters = nullptr;
  size_t page_cols = 0;
  const TB* const* depth_pages = nullptr;
  const float* row_scales = nullptr;
  const float* const* page_row_scales = nullptr;
  size_t scale_group_cols = 0, scale_group_stride = 0;

  // The band of depth page i (of `count`), as a tile of its own.
  BandOf DepthPage(size_t i, size_t count) const {
    BandOf page{depth_pages[i], rows, first_col,
                i + 1 < count ? depth_pages[i + 1] : after};
    page.row_scales = page_row_scales ? page_row_scales[i] : nullptr;
    page.scale_group_cols = scale_group_cols;
    page.scale_group_stride = scale_group_stride;
    return page;
  }
};

// acc[r] += a[r * lda + k] * row, for every row r of the micro-tile.
template <size_t kRows, size_t kCols, class D>
HWY_INLINE void AddOuterProduct(D d, const float* HWY_RESTRICT a, size_t lda, size_t k,
                                const hn::Vec<D>* row, hn::Vec<D> (*acc)[kCols]) {
  HWY_UNROLL(6)
  for (size_t r = 0; r < kRows; ++r) {
    const hn::Vec<D> broadcast = hn::Set(d, a[r * lda + k]);
    HWY_UNROLL(4)
    for (size_t col = 0; col < kCols; ++col) {
      acc[r][col] = hn::MulAdd(broadcast, row[col], acc[r][col]);
    }
  }
}

// acc += A[kRows, depth] B[depth, kCols vectors] over one tile (or pages side by
// side) of B.
template <size_t kRows, size_t kCols, bool kScaled, class D, typename TB>
HWY_INLINE void AccumulateBand(D d, const float* HWY_RESTRICT a, size_t lda,
                               const BandOf<TB>& b, size_t depth,
                               hn::Vec<D> (*acc)[kCols]) {
  using V = hn::Vec<D>;
  constexpr bool kInt4 = std::is_same_v<TB, internal::Int4Pair>;
  constexpr bool kPaired = kInt4 || internal::PairsRows(sizeof(TB));
  constexpr size_t kStep = kPaired ? 2 : 1;  // rows of B per step
  // Elements of TB from one pair of rows of a panel to the next.
  constexpr size_t kPairRow = kInt4 ? internal::kPanelWidth : 2 * internal::kPanelWidth;
  const size_t lanes = hn::Lanes(d);
  const TB* HWY_RESTRICT band[kCols];  // row 0 of each vector's columns
  const float* HWY_RESTRICT scales[kCols];
  HWY_UNROLL(4)
  for (size_t col = 0; col < kCols; ++col) {
    const size_t column = b.first_col + col * lanes;
    band[col] = b.pages ? b.pages[column / b.page_cols] +
                              internal::TileOffset<TB>(0, column % b.page_cols, b.rows)
                        : b.tile + internal::TileOffset<TB>(0, column, b.rows);
    if constexpr (kScaled) {
      scales[col] =
          b.page_row_scales ? b.page_row_scales[column / b.page_cols] : b.row_scales;
      if (b.scale_group_cols)
        scales[col] += column / b.scale_group_cols * b.scale_group_stride;
    }
  }
  // One prefetch per panel of the strip (AVX2's two vectors share one) per cache line
  // of its rows: a line holds 4 panel rows of int8 and fp8, and one prefetch per row
  // outnumbered the FMAs. (Row k of a paired tile is within a line of k panel rows
  // from its start, as unpaired.) Pages side by side: each panel is the single-panel
  // strip of its own page, chosen here, not in the loop over k.
  constexpr size_t kRowBytes = internal::kPanelWidth * sizeof(TB) / (kInt4 ? 2 : 1);
  constexpr size_t kLineRows = HWY_MAX(size_t{1}, internal::kCacheLineBytes / kRowBytes);
  const size_t rows = kPaired ? internal::RoundUp(b.rows, 2) : b.rows;
  const size_t panels = HWY_MAX(size_t{1}, kCols * lanes / internal::kPanelWidth);
  const size_t stream_panels = b.pages ? 1 : panels;
  const TB* stream[kCols];
  const TB* stream_after[kCols];
  size_t stream_panel[kCols];
  for (size_t panel = 0; panel < panels; ++panel) {
    const size_t col = panel * internal::kPanelWidth / lanes;
    stream[panel] = b.pages ? band[col] : band[0];
    stream_after[panel] =
        b.pages ? b.afters[(b.first_col + col * lanes) / b.page_cols] : b.after;
    stream_panel[panel] = b.pages ? 0 : panel;
  }
  size_t k = 0;
  for (; k + kStep <= depth; k += kStep) {
    if (k % kLineRows == 0) {
      HWY_UNROLL(4)
      for (size_t panel = 0; panel < panels; ++panel) {
        PrefetchAt<TB>(internal::PrefetchAddress(stream[panel], stream_panel[panel],
                                                 stream_panels, rows, kRowBytes, k,
                                                 stream_after[panel], kLineRows));
      }
    }
    V row[kCols];
    if constexpr (kPaired) {
      V odd[kCols];
      HWY_UNROLL(4)
      for (size_t col = 0; col < kCols; ++col) {
        LoadRowPair(d, band[col] + k / 2 * kPairRow, row[col], odd[col]);
      }
      if constexpr (kScaled) {
        HWY_UNROLL(4)
        for (size_t col = 0; col < kCols; ++col) {
          row[col] = hn::Mul(row[col], hn::Set(d, scales[col][k]));
          odd[col] = hn::Mul(odd[col], hn::Set(d, scales[col][k + 1]));
        }
      }
      AddOuterProduct<kRows, kCols>(d, a, lda, k, row, acc);
      AddOuterProduct<kRows, kCols>(d, a, lda, k + 1, odd, acc);
    } else {
      HWY_UNROLL(4)
      for (size_t col = 0; col < kCols; ++col)
        row[col] = LoadRow(d, band[col] + k * internal::kPanelWidth);
      if constexpr (kScaled) {
        HWY_UNROLL(4)
        for (size_t col = 0; col < kCols; ++col)
          row[col] = hn::Mul(row[col], hn::Set(d, scales[col][k]));
      }
      AddOuterProduct<kRows, kCols>(d, a, lda, k, row, acc);
    }
  }
  if constexpr (kPaired) {
    if (k < depth) {  // an odd last row: the low halves alone
      V row[kCols], odd[kCols];
      HWY_UNROLL(4)
      for (size_t col = 0; col < kCols; ++col) {
        LoadRowPair(d, band[col] + k / 2 * kPairRow, row[col], odd[col]);
        if constexpr (kScaled) row[col] = hn::Mul(row[col], hn::Set(d, scales[col][k]));
      }
      AddOuterProduct<kRows, kCols>(d, a, lda, k, row, acc);
    }
  }
}

template <size_t kRows, size_t kCols, bool kScaled, class D, typename TB>
HWY_INLINE void MicroTile(D d, const float* HWY_RESTRICT a, size_t lda, BandOf<TB> b,
                          size_t depth, float* HWY_RESTRICT c, size_t ldc,
                          bool accumulate) {
  using V = hn::Vec<D>;
  const size_t lanes = hn::Lanes(d);
  V acc[kRows][kCols];
  HWY_UNROLL(6)
  for (size_t r = 0; r < kRows; ++r) {
    HWY_UNROLL(4)
    for (size_t col = 0; col < kCols; ++col) {
      acc[r][col] = accumulate ? hn::LoadU(d, c + r * ldc + col * lanes) : hn::Zero(d);
    }
  }
  const size_t segment = b.depth_pages ? b.rows : depth;  // depth rows per band
  const size_t count = b.depth_pages ? (depth + segment - 1) / segment : 1;
  for (size_t i = 0; i < count; ++i) {
    AccumulateBand<kRows, kCols, kScaled>(d, a + i * segment, lda,
                                          b.depth_pages ? b.DepthPage(i, count) : b,
                                          HWY_MIN(segment, depth - i * segment), acc);
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
template <size_t kCols, bool kScaled, class D, typename TB>
HWY_INLINE void TileStrip(D d, size_t rows, const float* HWY_RESTRICT a, size_t lda,
                          BandOf<TB> b, size_t depth, float* HWY_RESTRICT c, size_t ldc,
                          bool accumulate) {
  size_t r = 0;
  for (; r + kTileRows <= rows; r += kTileRows) {
    MicroTile<kTileRows, kCols, kScaled>(d, a + r * lda, lda, b, depth, c + r * ldc, ldc,
                                         accumulate);
  }
  a += r * lda;
  c += r * ldc;
  switch (rows - r) {
    case 5:
      return MicroTile<5, kCols, kScaled>(d, a, lda, b, depth, c, ldc, accumulate);
    case 4:
      return MicroTile<4, kCols, kScaled>(d, a, lda, b, depth, c, ldc, accumulate);
    case 3:
      return MicroTile<3, kCols, kScaled>(d, a, lda, b, depth, c, ldc, accumulate);
    case 2:
      return MicroTile<2, kCols, kScaled>(d, a, lda, b, depth, c, ldc, accumulate);
    case 1:
      return MicroTile<1, kCols, kScaled>(d, a, lda, b, depth, c, ldc, accumulate);
    default:
      return;
  }
}

// The strips of C[rows, n] over `band` (a tile or pages, first_col 0): whole strips
// of kTileCols vectors, then one narrower strip. Out of line: its micro-tiles are
// compiled once per element type and target, not once per call site (inlined at
// each, they made attention_head.cc a 12-minute sanitized compile), and a call per
// tile costs nothing next to the tile's work. kScaled: B's rows scaled as they load.
template <bool kScaled, class D, typename TB>
HWY_NOINLINE void TileStripsOf(D d, size_t rows, size_t n, size_t depth,
                               const float* HWY_RESTRICT a, size_t lda, BandOf<TB> band,
                               float* HWY_RESTRICT c, size_t ldc, bool accumulate) {
  const size_t lanes = hn::Lanes(d);
  HWY_DASSERT(n % internal::kPanelWidth == 0 && internal::kPanelWidth % lanes == 0);
  HWY_DASSERT(lda >= depth && ldc >= n && (band.depth_pages || band.rows >= depth));
  const TB* after = band.after;
  const size_t vectors = n / lanes;
  size_t v = 0;
  for (; v + kTileCols <= vectors; v += kTileCols) {
    band.first_col = v * lanes;
    band.after = v + kTileCols == vectors ? after : nullptr;
    TileStrip<kTileCols, kScaled>(d, rows, a, lda, band, depth, c + v * lanes, ldc,
                                  accumulate);
  }
  band.first_col = v * lanes;
  band.after = after;
  c += v * lanes;
  // Fewer than kTileCols vectors remain; only strips narrower than kTileCols exist.
  const size_t remaining = vectors - v;
  if constexpr (kTileCols > 3) {
    if (remaining == 3)
      return TileStrip<3, kScaled>(d, rows, a, lda, band, depth, c, ldc, accumulate);
  }
  if constexpr (kTileCols > 2) {
    if (remaining == 2)
      return TileStrip<2, kScaled>(d, rows, a, lda, band, depth, c, ldc, accumulate);
  }
  if (remaining == 1) {
    TileStrip<1, kScaled>(d, rows, a, lda, band, depth, c, ldc, accumulate);
  }
}

// Scaled rows (int8, int4) are a second copy of the strips, not a branch in the
// depth loop: the branch cost unscaled int8 decode 3%.
template <class D, typename TB>
HWY_INLINE void TileStrips(D d, size_t rows, size_t n, size_t depth,
                           const float* HWY_RESTRICT a, size_t lda, BandOf<TB> band,
                           float* HWY_RESTRICT c, size_t ldc, bool accumulate) {
  if constexpr (std::is_same_v<TB, int8_t> || std::is_same_v<TB, internal::Int4Pair>) {
    if (band.row_scales || band.page_row_scales) {
      return TileStripsOf<true>(d, rows, n, depth, a, lda, band, c, ldc, accumulate);
    }
  }
  TileStripsOf<false>(d, rows, n, depth, a, lda, band, c, ldc, accumulate);
}

// C[rows, n] = (accumulate ? C : 0) + A[rows, depth] B[depth, n]; n % kPanelWidth == 0.
// B: the first depth rows of a [b_rows, >= n] tile in column panels; float, or
// bfloat16 (paired rows), int8, fp8 or int4 (paired rows; a KV cache) widened to
// float as it is loaded.
// `after`: the tile read next, if known; the last strip prefetches its start.
// int8 and int4 B: row k times row_scales[k] when given.
template <class D, typename TB>
HWY_INLINE void TileMatMul(D d, size_t rows, size_t n, size_t depth,
                           const float* HWY_RESTRICT a, size_t lda,
                           const TB* HWY_RESTRICT b, size_t b_rows, float* HWY_RESTRICT c,
                           size_t ldc, bool accumulate, const TB* after = nullptr,
                           const float* row_scales = nullptr) {
  BandOf<TB> band{b, b_rows, 0, after};
  band.row_scales = row_scales;
  TileStrips(d, rows, n, depth, a, lda, band, c, ldc, accumulate);
}

// Columns a strip spans on this target: pages of fewer columns that divide it can
// share strips (TilePagesMatMul).
template <class D>
constexpr size_t StripColumns(D d) {
  return kTileCols * hn::MaxLanes(d);
}

// The same product with B as pages of page_cols columns side by side (page i: a
// [b_rows, page_cols] tile, read before afters[i]); page_cols divides StripColumns,
// and C's n columns end in the last page. int8 and int4 pages: page i's row k times
// row_scales[i][k] when given.
template <class D, typename TB>
HWY_INLINE void TilePagesMatMul(D d, size_t rows, size_t n, size_t depth,
                                const float* HWY_RESTRICT a, size_t lda,
                                const TB* const* pages, const TB* const* afters,
                                size_t page_cols, size_t b_rows, float* HWY_RESTRICT c,
                                size_t ldc, bool accumulate,
                                const float* const* row_scales = nullptr) {
  HWY_DASSERT(StripColumns(d) % page_cols == 0);
  BandOf<TB> band{nullptr, b_rows, 0, nullptr};
  band.pages = pages;
  band.page_row_scales = row_scales;
  band.afters = afters;
  band.page_cols = page_cols;
  TileStrips(d, rows, n, depth, a, lda, band, c, ldc, accumulate);
}

// The same product with B as pages one below the other: page i holds B's rows
// [i * page_rows, (i + 1) * page_rows) as a [page_rows, >= n] tile, and `after` is
// read after the last. int8 and int4 pages: page i's row k times row_scales[i][k]
// when given, or with scale groups row_scales[i][k + group x group_stride] (group:
// column / group_cols).
template <class D, typename TB>
HWY_INLINE void TileDepthPagesMatMul(D d, size_t rows, size_t n, size_t depth,
                                     const float* HWY_RESTRICT a, size_t lda,
                                     const TB* const* pages, size_t page_rows,
                                     float* HWY_RESTRICT c, size_t ldc, bool accumulate,
                                     const TB* after,
                                     const float* const* row_scales = nullptr,
                                     size_t group_cols = 0, size_t group_stride = 0) {
  BandOf<TB> band{nullptr, page_rows, 0, after};
  band.depth_pages = pages;
  band.page_row_scales = row_scales;
  band.scale_group_cols = group_cols;
  band.scale_group_stride = group_stride;
  TileStrips(d, rows, n, depth, a, lda, band, c, ldc, accumulate);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_TILE_MATMUL_INL_H_
