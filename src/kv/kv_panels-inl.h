// Per-target K/V panels: copies one head's key and value rows (projection rows, or
// the core API's tensors) into pages shaped for the tile products
// (src/kv/kv_pages.h): K^T in pages of [head_dim, page_size] (scores = Q K^T
// streams one page) and V in pages of [page_size, padded head_dim]. Padding is zero so
// padded lanes add nothing. Panels hold float, or bfloat16 for bf16 KV caches. Q
// needs no copy (the tile product broadcasts its elements in place), and the head
// merge needs none either: context rows are written straight into their head's
// columns of the matrix the output projection reads. bfloat16 tiles pair their rows
// (kv_pages.h).

#if defined(MHA_KERNELS_KV_PANELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_KERNELS_KV_PANELS_INL_H_
#undef MHA_KERNELS_KV_PANELS_INL_H_
#else
#define MHA_KERNELS_KV_PANELS_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "src/kv/kv_pages.h"
#include "src/simd/bf16_convert.h"
#include "src/simd/bf16_round-inl.h"
#include "src/simd/head_norm-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

inline void StoreAs(float value, float* out) { *out = value; }
inline void StoreAs(float value, hwy::bfloat16_t* out) {
  out->bits = internal::RoundToBf16Bits(value);
}

// Key j (a row of head_dim floats, or null: zeros) into a paired K^T tile's column
// `column`: dims 2i and 2i + 1 form one 32-bit word, stored 2 kPanelWidth elements
// apart. The row is rounded a vector at a time into `words` (a chunk of dims), then
// stored a word at a time; an odd head_dim ends in a zero half.
template <class D>
HWY_INLINE void StorePairedKey(D d, const float* HWY_RESTRICT key, size_t head_dim,
                               hwy::bfloat16_t* HWY_RESTRICT column) {
  constexpr size_t kChunk = 64;  // dims: a whole number of vectors on every target
  const hn::Rebind<uint16_t, D> du16;
  const size_t lanes = hn::Lanes(d);
  HWY_ALIGN uint16_t rounded[kChunk];
  for (size_t chunk = 0; chunk < head_dim; chunk += kChunk) {
    const size_t dims = std::min(kChunk, head_dim - chunk);
    size_t k = 0;
    if (key) {
      for (; k + lanes <= dims; k += lanes) {
        hn::StoreU(RoundToBf16(d, hn::LoadU(d, key + chunk + k)), du16, rounded + k);
      }
    }
    for (; k < internal::RoundUp(dims, 2); ++k) {
      rounded[k] = key && k < dims ? internal::RoundToBf16Bits(key[chunk + k]) : 0;
    }
    for (size_t pair = 0; pair < (dims + 1) / 2; ++pair) {
      std::memcpy(column + (chunk / 2 + pair) * 2 * internal::kPanelWidth,
                  rounded + 2 * pair, 2 * sizeof(uint16_t));
    }
  }
}

// Eight keys (rows of src, `stride` apart) into eight adjacent columns of a float
// K^T panel (`columns`: the first key's), 8 x 8 blocks transposed in registers: a
// store per dim and eight keys, where one key at a time stores every float apart
// (11% of the dense head_dim-64 core benchmark on Zen 5). Needs 8-lane vectors.
template <class D8>
HWY_INLINE void StoreEightKeys(D8 d8, const float* HWY_RESTRICT src, size_t stride,
                               size_t head_dim, float* HWY_RESTRICT columns) {
  constexpr size_t kWidth = internal::kPanelWidth;
  const hn::Repartition<double, D8> dd;
  using V = hn::Vec<D8>;
  size_t dim = 0;
  for (; dim + 8 <= head_dim; dim += 8) {
    V r[8];
    for (size_t k = 0; k < 8; ++k) r[k] = hn::LoadU(d8, src + k * stride + dim);
    // Pairs of keys, then quads, per 128-bit block; then the blocks' halves.
    V pairs[8];
    for (size_t k = 0; k < 8; k += 2) {
      pairs[k] = hn::InterleaveLower(d8, r[k], r[k + 1]);
      pairs[k + 1] = hn::InterleaveUpper(d8, r[k], r[k + 1]);
    }
    V quads[8];
    for (size_t k = 0; k < 8; k += 4) {
      for (size_t half = 0; half < 2; ++half) {
        const auto a = hn::BitCast(dd, pairs[k + half]);
        const auto b = hn::BitCast(dd, pairs[k + 2 + half]);
        quads[k + 2 * half] = hn::BitCast(d8, hn::InterleaveLower(dd, a, b));
        quads[k + 2 * half + 1] = hn::BitCast(d8, hn::InterleaveUpper(dd, a, b));
      }
    }
    for (size_t k = 0; k < 4; ++k) {
      hn::StoreU(hn::ConcatLowerLower(d8, quads[4 + k], quads[k]), d8,
                 columns + (dim + k) * kWidth);
      hn::StoreU(hn::ConcatUpperUpper(d8, quads[4 + k], quads[k]), d8,
                 columns + (dim + 4 + k) * kWidth);
    }
  }
  for (; dim < head_dim; ++dim) {
    for (size_t k = 0; k < 8; ++k) columns[dim * kWidth + k] = src[k * stride + dim];
  }
}

// Key-blocked K^T panel: keys in blocks of `block`, each block a [head_dim, block]
// tile in column panels (src/kv/kv_pages.h; bfloat16 pairs its rows), so that
// the tile product streams contiguous memory. Writes keys [first, first + rows) from
// src (row r is key first + r) and zeros keys [first + rows, zero_end).
template <class D, typename T>
HWY_INLINE void SplitKeysTransposed(D d, const float* HWY_RESTRICT src, size_t src_stride,
                                    size_t first, size_t rows, size_t zero_end,
                                    size_t head_dim, T* HWY_RESTRICT panel,
                                    size_t block) {
  constexpr size_t kWidth = internal::kPanelWidth;
  HWY_DASSERT(first + rows <= zero_end && block % kWidth == 0);
  HWY_DASSERT(rows == 0 || src_stride >= head_dim);
  const size_t copy_end = first + rows;
  const size_t stored_dims = internal::StoredRows<T>(head_dim);
  // One panel of kWidth keys at a time: its rows are contiguous runs of keys.
  for (size_t begin = first; begin < zero_end;) {
    const size_t block_start = begin / block * block;
    const size_t panel_start = begin / kWidth * kWidth;
    const size_t end = std::min(zero_end, panel_start + kWidth);
    T* tile = panel + block_start * stored_dims +
              internal::TileOffset<T>(0, panel_start - block_start, head_dim);
    size_t j = begin;
    if constexpr (std::is_same_v<T, float>) {
      const hn::CappedTag<float, 8> d8;
      if (hn::Lanes(d8) == 8) {
        for (; j + 8 <= std::min(end, copy_end); j += 8) {
          StoreEightKeys(d8, src + (j - first) * src_stride, src_stride, head_dim,
                         tile + (j - panel_start));
        }
      }
    }
    // Key by key: each source row is read in order (it may sit in a wide projection
    // row), while the panel's strided stores stay within a few KiB.
    for (; j < end; ++j) {
      const float* key = j < copy_end ? src + (j - first) * src_stride : nullptr;
      if constexpr (internal::PairsRows<T>()) {
        StorePairedKey(d, key, head_dim, tile + (j - panel_start) * 2);
      } else {
        T* column = tile + (j - panel_start);  // column[dim * kWidth]
        for (size_t dim = 0; dim < head_dim; ++dim) {
          StoreAs(key ? key[dim] : 0.0f, column + dim * kWidth);
        }
      }
    }
    begin = end;
  }
}

// How keys are rotated as they are split: key j sits at position
// positions[j - positions_first], or at j without positions. `scratch` holds
// scratch_rows * head_dim floats.
struct KeyRotation {
  const RotaryEmbedding* rotary = nullptr;
  internal::HeadNorm norm;  // QK-norm before the rotation
  const int64_t* positions = nullptr;
  int64_t positions_first = 0;
  float* scratch = nullptr;
  size_t scratch_rows = 0;

  int64_t Position(size_t key) const {
    const int64_t j = static_cast<int64_t>(key);
    return positions ? positions[j - positions_first] : j;
  }
};

// SplitKeysTransposed with each key rotated first (through rotation.scratch, a
// bounded number of rows at a time).
template <class D, typename T>
HWY_INLINE void SplitRotatedKeys(D d, const float* HWY_RESTRICT src, size_t src_stride,
                                 size_t first, size_t rows, size_t zero_end,
                                 size_t head_dim, T* HWY_RESTRICT panel, size_t block,
                                 const KeyRotation& rotation) {
  if (!rotation.rotary && !rotation.norm.enabled()) {
    return SplitKeysTransposed(d, src, src_stride, first, rows, zero_end, head_dim, panel,
                               block);
  }
  const size_t end = first + rows;
  if (rows == 0) {  // only padding to zero
    return SplitKeysTransposed(d, src, src_stride, first, 0, zero_end, head_dim, panel,
                               block);
  }
  for (size_t begin = first; begin < end; begin += rotation.scratch_rows) {
    const size_t count = std::min(rotation.scratch_rows, end - begin);
    for (size_t r = 0; r < count; ++r) {
      NormRotateRow(d, src + (begin - first + r) * src_stride, head_dim, rotation.norm,
                    rotation.rotary, rotation.rotary ? rotation.Position(begin + r) : 0,
                    1.0f, rotation.scratch + r * head_dim);
    }
    SplitKeysTransposed(d, rotation.scratch, head_dim, begin, count,
                        begin + count < end ? begin + count : zero_end, head_dim, panel,
                        block);
  }
}

// Tokens j and j + 1 (rows 2i and 2i + 1 of a paired V tile, both copied, head_dim
// >= col + kPanelWidth) into the panel row at `out`: each 32-bit word holds column
// c of both tokens, the first in its low half.
template <class D>
HWY_INLINE void StoreValuePair(D d, const float* HWY_RESTRICT first,
                               const float* HWY_RESTRICT second,
                               hwy::bfloat16_t* HWY_RESTRICT out) {
  const hn::RebindToUnsigned<D> du;
  uint32_t* words = reinterpret_cast<uint32_t*>(out);
  for (size_t c = 0; c < internal::kPanelWidth; c += hn::Lanes(d)) {
    const auto low = hn::ShiftRight<16>(RoundedBf16High(d, hn::LoadU(d, first + c)));
    const auto high = RoundedBf16High(d, hn::LoadU(d, second + c));
    hn::StoreU(hn::Or(low, high), du, words + c);
  }
}

// Token j's columns [col, col + kPanelWidth) into its panel row at `out` (elements
// kStep apart), from `value` (null: zeros), zero at and beyond `copied` columns.
template <typename T>
HWY_INLINE void StoreValueRow(const float* HWY_RESTRICT value, size_t col, size_t copied,
                              T* HWY_RESTRICT out) {
  constexpr size_t kWidth = internal::kPanelWidth;
  // A paired tile's columns are two elements apart (the other token between them).
  constexpr size_t kStep = internal::PairsRows<T>() ? 2 : 1;
  const size_t n = std::min(kWidth, copied > col ? copied - col : 0);
  if (n == kWidth) {  // a fixed count, which the compiler turns into vectors
    for (size_t k = 0; k < kWidth; ++k) StoreAs(value[col + k], out + k * kStep);
    return;
  }
  // Straight into the page: staging it on the stack cost a failed store-to-load
  // forwarding per row (a third of this function's time in small calls).
  for (size_t k = 0; k < kWidth; ++k) {
    StoreAs(k < n ? value[col + k] : 0.0f, out + k * kStep);
  }
}

// Values in pages of `page_rows` tokens, each a [page_rows, padded_head_dim] tile
// in column panels (bfloat16: token pairs): writes tokens [first, first + rows) from
// src (row r is token first + r), zero beyond head_dim, and zeros tokens
// [first + rows, zero_end).
template <class D, typename T>
HWY_INLINE void SplitValues(D d, const float* HWY_RESTRICT src, size_t src_stride,
                            size_t first, size_t rows, size_t zero_end, size_t head_dim,
                            size_t padded_head_dim, T* HWY_RESTRICT pages,
                            size_t page_rows) {
  constexpr size_t kWidth = internal::kPanelWidth;
  HWY_DASSERT(first + rows <= zero_end && head_dim <= padded_head_dim);
  HWY_DASSERT(padded_head_dim % kWidth == 0 && page_rows % kWidth == 0);
  const size_t copy_end = first + rows;
  // Token j is row `row` of page `page`, stepped without a division per token.
  size_t page = first / page_rows, row = first % page_rows;
  for (size_t j = first; j < zero_end; ++j, ++row) {
    if (row == page_rows) row = 0, ++page;
    T* tile = pages + page * page_rows * padded_head_dim;
    const float* value = src + (j - first) * src_stride;
    const size_t copied = j < copy_end ? head_dim : 0;
    if constexpr (internal::PairsRows<T>()) {
      // A whole pair of copied tokens: whole panels a word per column; the rest
      // (a half pair, the last partial panel) element by element.
      if (row % 2 == 0 && j + 1 < copy_end) {
        for (size_t col = 0; col < padded_head_dim; col += kWidth) {
          T* out = tile + internal::TileOffset<T>(row, col, page_rows);
          if (col + kWidth <= head_dim) {
            StoreValuePair(d, value + col, value + src_stride + col, out);
          } else {
            StoreValueRow(value, col, copied, out);
            StoreValueRow(value + src_stride, col, copied, out + 1);
          }
        }
        ++j, ++row;
        continue;
      }
    }
    for (size_t col = 0; col < padded_head_dim; col += kWidth) {
      T* out = tile + internal::TileOffset<T>(row, col, page_rows);
      if constexpr (std::is_same_v<T, float>) {
        if (col + kWidth <= copied) {  // vectors: GCC left this copy scalar
          for (size_t c = 0; c < kWidth; c += hn::Lanes(d)) {
            hn::StoreU(hn::LoadU(d, value + col + c), d, out + c);
          }
          continue;
        }
      }
      StoreValueRow(value, col, copied, out);
    }
  }
}

// SplitValues with each value RMS-normalised first (Gemma 3n's v_norm), through
// `scratch` (scratch_rows rows of head_dim floats) a bounded number of rows at a time.
template <class D, typename T>
HWY_INLINE void SplitNormalizedValues(D d, const float* HWY_RESTRICT src,
                                      size_t src_stride, size_t first, size_t rows,
                                      size_t zero_end, size_t head_dim,
                                      size_t padded_head_dim, T* HWY_RESTRICT pages,
                                      size_t page_rows, const internal::HeadNorm& norm,
                                      float* scratch, size_t scratch_rows) {
  if (!norm.enabled() || rows == 0) {
    return SplitValues(d, src, src_stride, first, rows, zero_end, head_dim,
                       padded_head_dim, pages, page_rows);
  }
  const size_t end = first + rows;
  for (size_t begin = first; begin < end; begin += scratch_rows) {
    const size_t count = std::min(scratch_rows, end - begin);
    for (size_t r = 0; r < count; ++r) {
      NormRotateRow(d, src + (begin - first + r) * src_stride, head_dim, norm, nullptr, 0,
                    1.0f, scratch + r * head_dim);
    }
    SplitValues(d, scratch, head_dim, begin, count,
                begin + count < end ? begin + count : zero_end, head_dim, padded_head_dim,
                pages, page_rows);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_KV_PANELS_INL_H_
