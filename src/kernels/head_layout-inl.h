// Per-target head split: copies one head's rows out of a projection matrix
// [S, num_heads * head_dim] (row stride `src_stride`) into a contiguous panel
// [S, head_dim], so the attention loops stream through memory. The head merge needs
// no copy: the attention kernel writes each context row straight into its head's
// columns of the matrix the output projection reads.

#if defined(MHA_KERNELS_HEAD_LAYOUT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_KERNELS_HEAD_LAYOUT_INL_H_
#undef MHA_KERNELS_HEAD_LAYOUT_INL_H_
#else
#define MHA_KERNELS_HEAD_LAYOUT_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/contrib/algo/copy-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D>
HWY_INLINE void SplitHead(D d, const float* HWY_RESTRICT src, int64_t src_stride,
                          int64_t rows, int64_t head_dim, float* HWY_RESTRICT panel) {
  for (int64_t row = 0; row < rows; ++row) {
    hn::Copy(d, src + row * src_stride, static_cast<size_t>(head_dim),
             panel + row * head_dim);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_HEAD_LAYOUT_INL_H_
