// Per-target rotary position embedding of one head row: the pairs of dimensions
// below rotary_dim are rotated by the table's angle for the row's position (half
// split, as Hugging Face's rotate_half, or interleaved, as GPT-J), the rest copied.
// Rows are rotated as the kernel copies them (the query tile, the K^T panel, the
// KV cache append), so rotation adds no pass over memory.

#if defined(MHA_KERNELS_ROTARY_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_KERNELS_ROTARY_INL_H_
#undef MHA_KERNELS_ROTARY_INL_H_
#else
#define MHA_KERNELS_ROTARY_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"
#include "mha/rotary.hpp"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// (x1, x2) -> scale * (x1 cos - x2 sin, x2 cos + x1 sin) for x1 = src[i], x2 =
// src[i + half] (half split).
template <class D>
HWY_INLINE void RotateHalves(D d, const float* HWY_RESTRICT src, const float* cos,
                             const float* sin, size_t half, float scale,
                             float* HWY_RESTRICT dst) {
  const size_t lanes = hn::Lanes(d);
  const auto s = hn::Set(d, scale);
  size_t i = 0;
  for (; i + lanes <= half; i += lanes) {
    const auto x1 = hn::LoadU(d, src + i), x2 = hn::LoadU(d, src + i + half);
    const auto c = hn::Mul(hn::LoadU(d, cos + i), s),
               n = hn::Mul(hn::LoadU(d, sin + i), s);
    hn::StoreU(hn::NegMulAdd(x2, n, hn::Mul(x1, c)), d, dst + i);
    hn::StoreU(hn::MulAdd(x1, n, hn::Mul(x2, c)), d, dst + i + half);
  }
  for (; i < half; ++i) {
    const float x1 = src[i], x2 = src[i + half];
    dst[i] = (x1 * cos[i] - x2 * sin[i]) * scale;
    dst[i + half] = (x2 * cos[i] + x1 * sin[i]) * scale;
  }
}

// dst = scale * rotate(src) for a row at `position` (no rotation without a table).
template <class D>
HWY_INLINE void RotateRow(D d, const float* HWY_RESTRICT src, size_t head_dim,
                          const RotaryEmbedding* rotary, int64_t position, float scale,
                          float* HWY_RESTRICT dst) {
  size_t rotated = 0;
  HWY_DASSERT(!rotary || (static_cast<size_t>(rotary->head_dim()) == head_dim &&
                          position >= 0 && position < rotary->max_positions()));
  if (rotary) {
    rotated = static_cast<size_t>(rotary->rotary_dim());
    const size_t half = rotated / 2;
    const float* cos = rotary->Cos(position);
    const float* sin = rotary->Sin(position);
    if (rotary->pairing() == RotaryPairing::kHalfSplit) {
      RotateHalves(d, src, cos, sin, half, scale, dst);
    } else {
      for (size_t i = 0; i < half; ++i) {
        const float x1 = src[2 * i], x2 = src[2 * i + 1];
        dst[2 * i] = (x1 * cos[i] - x2 * sin[i]) * scale;
        dst[2 * i + 1] = (x2 * cos[i] + x1 * sin[i]) * scale;
      }
    }
  }
  for (size_t k = rotated; k < head_dim; ++k) dst[k] = src[k] * scale;
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_ROTARY_INL_H_
