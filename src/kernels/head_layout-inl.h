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
inline size_t KeyPanelIndex(size_t dim, size_t key, size_t head_dim, size_t block) {
  return key / block * head_dim * block + dim * block + key % block;
}

template <class D>
HWY_INLINE void SplitKeysTransposed(D /*d*/, const float* HWY_RESTRICT src,
                                    size_t src_stride, size_t first, size_t rows,
                                    size_t zero_end, size_t head_dim,
                                    float* HWY_RESTRICT panel, size_t block) {
  constexpr size_t kChunk = 16;  // keys per pass: one cache line of panel per dim
  for (size_t j0 = first; j0 < first + rows; j0 += kChunk) {
    const size_t j_end = std::min(first + rows, j0 + kChunk);
    for (size_t dim = 0; dim < head_dim; ++dim) {
      for (size_t j = j0; j < j_end; ++j) {
        panel[KeyPanelIndex(dim, j, head_dim, block)] =
            src[(j - first) * src_stride + dim];
      }
    }
  }
  for (size_t j = first + rows; j < zero_end; ++j) {
    for (size_t dim = 0; dim < head_dim; ++dim) {
      panel[KeyPanelIndex(dim, j, head_dim, block)] = 0.0f;
    }
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
