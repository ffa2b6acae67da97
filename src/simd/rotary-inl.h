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

// src[k] * weight[k] (weight null: src[k]), one lane or a vector at a time.
inline float Weighted(const float* src, const float* weight, size_t k) {
  return weight ? src[k] * weight[k] : src[k];
}
template <class D>
HWY_INLINE hn::Vec<D> LoadWeighted(D d, const float* src, const float* weight, size_t k) {
  const auto x = hn::LoadU(d, src + k);
  return weight ? hn::Mul(x, hn::LoadU(d, weight + k)) : x;
}

// (x1, x2) -> scale * (x1 cos - x2 sin, x2 cos + x1 sin) for x1 = src[i], x2 =
// src[i + half] (half split), each weighted first.
template <class D>
HWY_INLINE void RotateHalves(D d, const float* HWY_RESTRICT src, const float* weight,
                             const float* cos, const float* sin, size_t half, float scale,
                             float* HWY_RESTRICT dst) {
  const size_t lanes = hn::Lanes(d);
  const auto s = hn::Set(d, scale);
  size_t i = 0;
  for (; i + lanes <= half; i += lanes) {
    const auto x1 = LoadWeighted(d, src, weight, i),
               x2 = LoadWeighted(d, src, weight, i + half);
    const auto c = hn::Mul(hn::LoadU(d, cos + i), s),
               n = hn::Mul(hn::LoadU(d, sin + i), s);
    hn::StoreU(hn::NegMulAdd(x2, n, hn::Mul(x1, c)), d, dst + i);
    hn::StoreU(hn::MulAdd(x1, n, hn::Mul(x2, c)), d, dst + i + half);
  }
  for (; i < half; ++i) {
    const float x1 = Weighted(src, weight, i), x2 = Weighted(src, weight, i + half);
    dst[i] = (x1 * cos[i] - x2 * sin[i]) * scale;
    dst[i + half] = (x2 * cos[i] + x1 * sin[i]) * scale;
  }
}

// dst = scale * rotate(src * weight) for a row at `position` (no rotation without a
// table; weight null: all ones). The weight is QK-norm's (head_norm-inl.h), which
// comes before the rotation.
template <class D>
HWY_INLINE void RotateRow(D d, const float* HWY_RESTRICT src, size_t head_dim,
                          const RotaryEmbedding* rotary, int64_t position, float scale,
                          float* HWY_RESTRICT dst, const float* weight = nullptr) {
  size_t rotated = 0;
  HWY_DASSERT(!rotary || (static_cast<size_t>(rotary->head_dim()) == head_dim &&
                          position >= 0 && position < rotary->max_positions()));
  if (rotary) {
    rotated = static_cast<size_t>(rotary->rotary_dim());
    const size_t half = rotated / 2;
    const float* cos = rotary->Cos(position);
    const float* sin = rotary->Sin(position);
    if (rotary->pairing() == RotaryPairing::kHalfSplit) {
      RotateHalves(d, src, weight, cos, sin, half, scale, dst);
    } else {
      for (size_t i = 0; i < half; ++i) {
        const float x1 = Weighted(src, weight, 2 * i),
                    x2 = Weighted(src, weight, 2 * i + 1);
        dst[2 * i] = (x1 * cos[i] - x2 * sin[i]) * scale;
        dst[2 * i + 1] = (x2 * cos[i] + x1 * sin[i]) * scale;
      }
    }
  }
  const size_t lanes = hn::Lanes(d);
  const auto s = hn::Set(d, scale);
  size_t k = rotated;
  for (; k + lanes <= head_dim; k += lanes) {
    hn::StoreU(hn::Mul(LoadWeighted(d, src, weight, k), s), d, dst + k);
  }
  for (; k < head_dim; ++k) dst[k] = Weighted(src, weight, k) * scale;
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_ROTARY_INL_H_
