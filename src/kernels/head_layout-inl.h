// Per-target head split: copies one head's key and value rows out of the projection
// matrices [S, num_heads * head_dim] into contiguous per-head panels shaped for the
// tile products: K^T as [head_dim, padded Sk] (scores = Q K^T streams its rows) and
// V as [padded Sk, padded head_dim]. Padding is zero so padded lanes add nothing.
// Q needs no copy (the tile product broadcasts its elements in place), and the head
// merge needs none either: context rows are written straight into their head's
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

// panel[d * panel_stride + j] = src[j * src_stride + d] for j < rows, zero for j in
// [rows, padded_rows).
template <class D>
HWY_INLINE void SplitHeadTransposed(D /*d*/, const float* HWY_RESTRICT src,
                                    size_t src_stride, size_t rows, size_t padded_rows,
                                    size_t head_dim, float* HWY_RESTRICT panel,
                                    size_t panel_stride) {
  constexpr size_t kBlock = 16;  // one cache line of panel per (d, block)
  for (size_t j0 = 0; j0 < rows; j0 += kBlock) {
    const size_t j_end = std::min(rows, j0 + kBlock);
    for (size_t dim = 0; dim < head_dim; ++dim) {
      for (size_t j = j0; j < j_end; ++j) {
        panel[dim * panel_stride + j] = src[j * src_stride + dim];
      }
    }
  }
  for (size_t dim = 0; dim < head_dim; ++dim) {
    std::fill(panel + dim * panel_stride + rows, panel + dim * panel_stride + padded_rows,
              0.0f);
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
