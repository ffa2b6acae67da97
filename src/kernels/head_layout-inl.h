// Per-target head split: copies one head's key and value rows out of the projection
// matrices [S, num_heads * head_dim] into contiguous per-head panels shaped for the
// tile products: K^T in key blocks of [head_dim, block] (scores = Q K^T streams one
// block) and V as [padded Sk, padded head_dim]. Padding is zero so padded lanes add
// nothing. Q needs no copy (the tile product broadcasts its elements in place), and the
// head merge needs none either: context rows are written straight into their head's
// columns of the matrix the output projection reads.

#if defined(MHA_KERNELS_HEAD_LAYOUT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_KERNELS_HEAD_LAYOUT_INL_H_
#undef MHA_KERNELS_HEAD_LAYOUT_INL_H_
#else
#define MHA_KERNELS_HEAD_LAYOUT_INL_H_
#endif

#include <algorithm>
#include <cstddef>

#include "hwy/contrib/algo/copy-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Key-blocked K^T panel: keys in blocks of `block`, each block a [head_dim, block]
// row-major tile, so that the tile product for one key block streams one contiguous
// run of memory. Writes keys [first, first + rows) from src (row r is key first + r)
// and zeros keys [first + rows, zero_end).
template <class D>
HWY_INLINE void SplitKeysTransposed(D /*d*/, const float* HWY_RESTRICT src,
                                    size_t src_stride, size_t first, size_t rows,
                                    size_t zero_end, size_t head_dim,
                                    float* HWY_RESTRICT panel, size_t block) {
  const size_t copy_end = first + rows;
  // One key block at a time, so addressing needs no division per element.
  for (size_t begin = first; begin < zero_end;) {
    const size_t block_start = begin / block * block;
    const size_t end = std::min(zero_end, block_start + block);
    const size_t copied = std::min(end, copy_end);
    float* tile = panel + block_start * head_dim;  // [head_dim, block]
    for (size_t dim = 0; dim < head_dim; ++dim) {
      float* row = tile + dim * block - block_start;  // row[j] for j in this block
      for (size_t j = begin; j < copied; ++j)
        row[j] = src[(j - first) * src_stride + dim];
      for (size_t j = std::max(begin, copied); j < end; ++j) row[j] = 0.0f;
    }
    begin = end;
  }
}

// panel[j * panel_stride + d] = src[j * src_stride + d], zero for d >= head_dim and
// for rows in [rows, padded_rows).
template <class D>
HWY_INLINE void SplitHead(D d, const float* HWY_RESTRICT src, size_t src_stride,
                          size_t rows, size_t padded_rows, size_t head_dim,
                          float* HWY_RESTRICT panel, size_t panel_stride) {
  for (size_t j = 0; j < rows; ++j) {
    hn::Copy(d, src + j * src_stride, head_dim, panel + j * panel_stride);
    std::fill(panel + j * panel_stride + head_dim, panel + (j + 1) * panel_stride, 0.0f);
  }
  std::fill(panel + rows * panel_stride, panel + padded_rows * panel_stride, 0.0f);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_HEAD_LAYOUT_INL_H_
