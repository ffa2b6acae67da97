// Per-target register-blocked matrix multiply for the attention tiles:
// C[rows, n] (+)= A[rows, depth] B[depth, n], A and C row-major with their own
// strides, B a KV page tile in column panels (src/kv/kv_pages.h), n a multiple of
// kPanelWidth. One kernel serves both tile products: scores = Q K^T (B = a K^T page)
// and context += P V (B = a V page).
//
// Each micro-tile keeps kRows x kCols vectors of C in registers and streams one row
// of B per step, broadcasting one element of A per row: the classic outer-product
// GEMM kernel, sized to the target's register file. B's rows come through a loader
// (tile_loaders-inl.h), which the KV storage kind picks: the product never asks what
// B's codes are or how they are scaled.

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
#include "src/kv/kv_pages.h"
#include "src/kv/tile_loaders-inl.h"
#include "src/kv/tile_sizes.h"
#include "src/simd/prefetch_rule.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using mha::internal::kTileRows;
// 6 x 4 accumulators + 4 B vectors + 1 broadcast fit AVX-512's 32 registers;
// 6 x 2 + 2 + 1 fit the 16 of AVX2 and SSE4.
constexpr size_t kTileCols = HWY_TARGET <= HWY_AVX3 ? 4 : 2;

// float and bfloat16 rows are prefetched into L2, int8 rows (four to a cache line)
// into L1 (where: prefetch_rule.h): L1 prefetches of float rows slow decoding down,
// int8 rows gain most from them (docs/fast_path.md).
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

// B's tile: its data, its rows (>= depth: the product may use the first rows only)
// and the strip's first column, read through `loader`. `after`: on the tile's last
// strip, what is read next (another page), where its prefetches continue; null
// elsewhere. B may instead be pages side by side (`pages`: page i holds columns
// [i * page_cols, (i + 1) * page_cols), page_cols dividing the strip's width,
// `afters[i]` read after it): one strip then spans several pages (a decode step's
// Q K^T over 16-token pages: 4 x 4 accumulators instead of a chain of 4 waiting on
// the FMA latency). Or pages one below the other (`depth_pages`: page i holds depth
// rows [i * rows, (i + 1) * rows)): the accumulators stay in registers from page to
// page (a decode step's P V over 16-token pages). Each element's products are added
// in the same order every way.
template <class Loader>
struct BandOf {
  using Code = typename Loader::Code;
  const Loader* loader;
  const Code* tile;
  size_t rows;
  size_t first_col;
  const Code* after;
  const Code* const* pages = nullptr;
  const Code* const* afters = nullptr;
  size_t page_cols = 0;
  const Code* const* depth_pages = nullptr;
  // What is read a key tile later in this band's place, laid out alike (null: not
  // known), and for pages side by side or one below the other, each page's: the band
  // prefetches it at the offsets it loads, so that memory streams a whole tile ahead
  // of the products.
  const Code* ahead = nullptr;
  const Code* const* aheads = nullptr;
  const Code* const* depth_aheads = nullptr;
  // Whether the micro-tile prefetches: the first of a strip streams B in, and the
  // others below it find B in the caches (a prefetch per row and panel, otherwise,
  // costs issue slots the FMAs need).
  bool prefetch = true;

  // The band of depth page i (of `count`), as a tile of its own.
  BandOf DepthPage(size_t i, size_t count) const {
    BandOf page{loader, depth_pages[i], rows, first_col,
                i + 1 < count ? depth_pages[i + 1] : after};
    page.prefetch = prefetch;
    page.ahead = depth_aheads ? depth_aheads[i] : nullptr;
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
template <size_t kRows, size_t kCols, class D, class Loader>
HWY_INLINE void AccumulateBand(D d, const float* HWY_RESTRICT a, size_t lda,
                               const BandOf<Loader>& b, size_t depth,
                               hn::Vec<D> (*acc)[kCols]) {
  using V = hn::Vec<D>;
  using Code = typename Loader::Code;
  constexpr size_t kStep = Loader::kRowsPerLoad;  // rows of B per load
  const size_t lanes = hn::Lanes(d);
  using Column = decltype(b.loader->At(d, b.tile, 0, 0));
  Column band[kCols];  // each vector's columns
  HWY_UNROLL(4)
  for (size_t col = 0; col < kCols; ++col) {
    const size_t column = b.first_col + col * lanes;
    band[col] = b.pages ? b.loader->At(d, b.pages[column / b.page_cols],
                                       column % b.page_cols, b.rows)
                        : b.loader->At(d, b.tile, column, b.rows);
  }
  // One prefetch per panel of the strip (AVX2's two vectors share one) per cache line
  // of its rows: a line holds 4 panel rows of int8 and fp8, and one prefetch per row
  // outnumbered the FMAs. (Row k of a paired tile is within a line of k panel rows
  // from its start, as unpaired.) Pages side by side: each panel is the single-panel
  // strip of its own page, chosen here, not in the loop over k.
  constexpr size_t kRowBytes = Loader::kPanelRowBytes;
  constexpr size_t kLineRows = HWY_MAX(size_t{1}, internal::kCacheLineBytes / kRowBytes);
  const size_t rows = kStep == 2 ? internal::RoundUp(b.rows, 2) : b.rows;
  const size_t panels = HWY_MAX(size_t{1}, kCols * lanes / internal::kPanelWidth);
  const size_t stream_panels = b.pages ? 1 : panels;
  const Code* stream[kCols];
  const Code* stream_after[kCols];
  const Code* stream_ahead[kCols];  // the codes at the stream's offset a tile later
  size_t stream_panel[kCols];
  for (size_t panel = 0; panel < panels; ++panel) {
    const size_t col = panel * internal::kPanelWidth / lanes;
    const size_t column = b.first_col + col * lanes;
    stream[panel] = b.pages ? band[col].codes : band[0].codes;
    stream_after[panel] = b.pages ? b.afters[column / b.page_cols] : b.after;
    stream_panel[panel] = b.pages ? 0 : panel;
    const Code* ahead =
        b.pages ? (b.aheads ? b.aheads[column / b.page_cols] : nullptr) : b.ahead;
    stream_ahead[panel] =
        ahead
            ? b.loader->At(d, ahead, b.pages ? column % b.page_cols : b.first_col, b.rows)
                  .codes
            : nullptr;
  }
  size_t k = 0;
  for (; k + kStep <= depth; k += kStep) {
    if (b.prefetch && k % kLineRows == 0) {
      HWY_UNROLL(4)
      for (size_t panel = 0; panel < panels; ++panel) {
        if (stream_ahead[panel]) {  // into L2 (float rows' hint), not evicting this tile
          PrefetchAt<float>(internal::AheadAddress(
              stream_ahead[panel], stream_panel[panel], rows, kRowBytes, k));
        } else {
          PrefetchAt<Code>(internal::PrefetchAddress(stream[panel], stream_panel[panel],
                                                     stream_panels, rows, kRowBytes, k,
                                                     stream_after[panel], kLineRows));
        }
      }
    }
    V row[kCols];
    if constexpr (kStep == 2) {
      V odd[kCols];
      HWY_UNROLL(4)
      for (size_t col = 0; col < kCols; ++col) band[col].Load(d, k, row[col], odd[col]);
      AddOuterProduct<kRows, kCols>(d, a, lda, k, row, acc);
      AddOuterProduct<kRows, kCols>(d, a, lda, k + 1, odd, acc);
    } else {
      HWY_UNROLL(4)
      for (size_t col = 0; col < kCols; ++col) row[col] = band[col].Load(d, k);
      AddOuterProduct<kRows, kCols>(d, a, lda, k, row, acc);
    }
  }
  if constexpr (kStep == 2) {
    if (k < depth) {  // an odd last row: the even rows alone
      V row[kCols], odd[kCols];
      HWY_UNROLL(4)
      for (size_t col = 0; col < kCols; ++col) band[col].Load(d, k, row[col], odd[col]);
      AddOuterProduct<kRows, kCols>(d, a, lda, k, row, acc);
    }
  }
}

template <size_t kRows, size_t kCols, class D, class Loader>
HWY_INLINE void MicroTile(D d, const float* HWY_RESTRICT a, size_t lda, BandOf<Loader> b,
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
    AccumulateBand<kRows, kCols>(d, a + i * segment, lda,
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
template <size_t kCols, class D, class Loader>
HWY_INLINE void TileStrip(D d, size_t rows, const float* HWY_RESTRICT a, size_t lda,
                          BandOf<Loader> b, size_t depth, float* HWY_RESTRICT c,
                          size_t ldc, bool accumulate) {
  size_t r = 0;
  for (; r + kTileRows <= rows; r += kTileRows) {
    MicroTile<kTileRows, kCols>(d, a + r * lda, lda, b, depth, c + r * ldc, ldc,
                                accumulate);
    b.prefetch = false;
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

// The strips of C[rows, n] over `band` (a tile or pages, first_col 0): whole strips
// of kTileCols vectors, then one narrower strip. Out of line: its micro-tiles are
// compiled once per loader and target, not once per call site (inlined at each, they
// made the kernel a 12-minute sanitized compile), and a call per tile costs nothing
// next to the tile's work.
template <class D, class Loader>
HWY_NOINLINE void TileStrips(D d, size_t rows, size_t n, size_t depth,
                             const float* HWY_RESTRICT a, size_t lda, BandOf<Loader> band,
                             float* HWY_RESTRICT c, size_t ldc, bool accumulate) {
  const size_t lanes = hn::Lanes(d);
  HWY_DASSERT(n % internal::kPanelWidth == 0 && internal::kPanelWidth % lanes == 0);
  HWY_DASSERT(lda >= depth && ldc >= n && (band.depth_pages || band.rows >= depth));
  const auto* after = band.after;
  const size_t vectors = n / lanes;
  size_t v = 0;
  for (; v + kTileCols <= vectors; v += kTileCols) {
    band.first_col = v * lanes;
    band.after = v + kTileCols == vectors ? after : nullptr;
    TileStrip<kTileCols>(d, rows, a, lda, band, depth, c + v * lanes, ldc, accumulate);
  }
  band.first_col = v * lanes;
  band.after = after;
  c += v * lanes;
  // Fewer than kTileCols vectors remain; only strips narrower than kTileCols exist.
  const size_t remaining = vectors - v;
  if constexpr (kTileCols > 3) {
    if (remaining == 3)
      return TileStrip<3>(d, rows, a, lda, band, depth, c, ldc, accumulate);
  }
  if constexpr (kTileCols > 2) {
    if (remaining == 2)
      return TileStrip<2>(d, rows, a, lda, band, depth, c, ldc, accumulate);
  }
  if (remaining == 1) TileStrip<1>(d, rows, a, lda, band, depth, c, ldc, accumulate);
}

// C[rows, n] = (accumulate ? C : 0) + A[rows, depth] B[depth, n]; n % kPanelWidth == 0.
// B: the first depth rows of a [b_rows, >= n] tile in column panels, read through
// `loader`. `after`: the tile read next, if known; the last strip prefetches its
// start. `ahead` (or null): the tile read a key tile later in B's place, prefetched
// instead, at the offsets B is read.
template <class D, class Loader>
HWY_INLINE void TileMatMul(D d, const Loader& loader, size_t rows, size_t n, size_t depth,
                           const float* HWY_RESTRICT a, size_t lda,
                           const typename Loader::Code* HWY_RESTRICT b, size_t b_rows,
                           float* HWY_RESTRICT c, size_t ldc, bool accumulate,
                           const typename Loader::Code* after = nullptr,
                           const typename Loader::Code* ahead = nullptr) {
  BandOf<Loader> band{&loader, b, b_rows, 0, after};
  band.ahead = ahead;
  TileStrips(d, rows, n, depth, a, lda, band, c, ldc, accumulate);
}

// The same with B's codes widened as they are (float, bfloat16, int8, fp8, int4).
template <class D, typename T>
HWY_INLINE void TileMatMul(D d, size_t rows, size_t n, size_t depth,
                           const float* HWY_RESTRICT a, size_t lda,
                           const T* HWY_RESTRICT b, size_t b_rows, float* HWY_RESTRICT c,
                           size_t ldc, bool accumulate, const T* after = nullptr) {
  TileMatMul(d, CodesLoader<T>(), rows, n, depth, a, lda, b, b_rows, c, ldc, accumulate,
             after);
}

// Columns a strip spans on this target: pages of fewer columns that divide it can
// share strips (TilePagesMatMul).
template <class D>
constexpr size_t StripColumns(D d) {
  return kTileCols * hn::MaxLanes(d);
}

// The same product with B as pages of page_cols columns side by side (page i: a
// [b_rows, page_cols] tile, read before afters[i]); page_cols divides StripColumns,
// and C's n columns end in the last page. aheads (or null): aheads[i] is read a tile
// later in page i's place (null: nothing), prefetched as page i is read.
template <class D, class Loader>
HWY_INLINE void TilePagesMatMul(D d, const Loader& loader, size_t rows, size_t n,
                                size_t depth, const float* HWY_RESTRICT a, size_t lda,
                                const typename Loader::Code* const* pages,
                                const typename Loader::Code* const* afters,
                                size_t page_cols, size_t b_rows, float* HWY_RESTRICT c,
                                size_t ldc, bool accumulate,
                                const typename Loader::Code* const* aheads = nullptr) {
  HWY_DASSERT(StripColumns(d) % page_cols == 0);
  BandOf<Loader> band{&loader, nullptr, b_rows, 0, nullptr};
  band.pages = pages;
  band.afters = afters;
  band.aheads = aheads;
  band.page_cols = page_cols;
  TileStrips(d, rows, n, depth, a, lda, band, c, ldc, accumulate);
}

// The same product with B as pages one below the other: page i holds B's rows
// [i * page_rows, (i + 1) * page_rows) as a [page_rows, >= n] tile, and `after` is
// read after the last. aheads (or null): aheads[i] is read a tile later in page i's
// place (null: nothing), prefetched as page i is read.
template <class D, class Loader>
HWY_INLINE void TileDepthPagesMatMul(
    D d, const Loader& loader, size_t rows, size_t n, size_t depth,
    const float* HWY_RESTRICT a, size_t lda, const typename Loader::Code* const* pages,
    size_t page_rows, float* HWY_RESTRICT c, size_t ldc, bool accumulate,
    const typename Loader::Code* after,
    const typename Loader::Code* const* aheads = nullptr) {
  BandOf<Loader> band{&loader, nullptr, page_rows, 0, after};
  band.depth_pages = pages;
  band.depth_aheads = aheads;
  TileStrips(d, rows, n, depth, a, lda, band, c, ldc, accumulate);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_TILE_MATMUL_INL_H_
