// Per-target head split: copies one head's key and value rows out of the projection
// matrices [S, num_heads * head_dim] into contiguous per-head panels shaped for the
// tile products: K^T in key blocks of [head_dim, block] (scores = Q K^T streams one
// block) and V as [padded Sk, padded head_dim]. Padding is zero so padded lanes add
// nothing. Panels hold float, or bfloat16 for bf16 KV caches. Q needs no copy (the
// tile product broadcasts its elements in place), and the head merge needs none
// either: context rows are written straight into their head's columns of the matrix
// the output projection reads.

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
#include "src/kernels/bf16_convert.h"
#include "src/kernels/rotary-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

inline void StoreAs(float value, float* out) { *out = value; }
inline void StoreAs(float value, hwy::bfloat16_t* out) {
  out->bits = internal::RoundToBf16Bits(value);
}

// Key-blocked K^T panel: keys in blocks of `block`, each block a [head_dim, block]
// row-major tile, so that the tile product for one key block streams one contiguous
// run of memory. Writes keys [first, first + rows) from src (row r is key first + r)
// and zeros keys [first + rows, zero_end).
template <class D, typename T>
HWY_INLINE void SplitKeysTransposed(D /*d*/, const float* HWY_RESTRICT src,
                                    size_t src_stride, size_t first, size_t rows,
                                    size_t zero_end, size_t head_dim,
                                    T* HWY_RESTRICT panel, size_t block) {
  const size_t copy_end = first + rows;
  // One key block at a time, so addressing needs no division per element.
  for (size_t begin = first; begin < zero_end;) {
    const size_t block_start = begin / block * block;
    const size_t end = std::min(zero_end, block_start + block);
    const size_t copied = std::min(end, copy_end);
    T* tile = panel + block_start * head_dim;  // [head_dim, block]
    for (size_t dim = 0; dim < head_dim; ++dim) {
      T* row = tile + dim * block - block_start;  // row[j] for j in this block
      for (size_t j = begin; j < copied; ++j) {
        StoreAs(src[(j - first) * src_stride + dim], row + j);
      }
      for (size_t j = std::max(begin, copied); j < end; ++j) StoreAs(0.0f, row + j);
    }
    begin = end;
  }
}

// How keys are rotated as they are split: key j sits at position
// positions[j - positions_first], or at j without positions. `scratch` holds
// scratch_rows * head_dim floats.
struct KeyRotation {
  const RotaryEmbedding* rotary = nullptr;
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
  if (!rotation.rotary) {
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
      RotateRow(d, src + (begin - first + r) * src_stride, head_dim, rotation.rotary,
                rotation.Position(begin + r), 1.0f, rotation.scratch + r * head_dim);
    }
    SplitKeysTransposed(d, rotation.scratch, head_dim, begin, count,
                        begin + count < end ? begin + count : zero_end, head_dim, panel,
                        block);
  }
}

// panel[j * panel_stride + d] = src[j * src_stride + d], zero for d >= head_dim and
// for rows in [rows, padded_rows).
template <class D, typename T>
HWY_INLINE void SplitHead(D d, const float* HWY_RESTRICT src, size_t src_stride,
                          size_t rows, size_t padded_rows, size_t head_dim,
                          T* HWY_RESTRICT panel, size_t panel_stride) {
  for (size_t j = 0; j < padded_rows; ++j) {
    T* row = panel + j * panel_stride;
    size_t k = 0;
    if constexpr (std::is_same_v<T, float>) {
      if (j < rows) hn::Copy(d, src + j * src_stride, head_dim, row);
      k = j < rows ? head_dim : 0;
    } else {
      for (; j < rows && k < head_dim; ++k) StoreAs(src[j * src_stride + k], row + k);
    }
    for (; k < panel_stride; ++k) StoreAs(0.0f, row + k);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_HEAD_LAYOUT_INL_H_
