// Per-target QK-norm of one head row fused with its rotary embedding: the row's
// inverse RMS is a scalar, so it joins the row's scale, and the norm's weight is
// applied by the rotation's loads (rotary-inl.h). A staged row thus costs one extra
// read of the row, for its sum of squares.

#if defined(MHA_KERNELS_HEAD_NORM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_KERNELS_HEAD_NORM_INL_H_
#undef MHA_KERNELS_HEAD_NORM_INL_H_
#else
#define MHA_KERNELS_HEAD_NORM_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"
#include "src/simd/head_norm.h"
#include "src/simd/rotary-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// 1 / sqrt(mean(src^2) + eps), as transformers' RMSNorm computes it in float32.
template <class D>
HWY_INLINE float InverseRms(D d, const float* HWY_RESTRICT src, size_t n, float eps) {
  const size_t lanes = hn::Lanes(d);
  auto sum = hn::Zero(d);
  size_t k = 0;
  for (; k + lanes <= n; k += lanes) {
    const auto x = hn::LoadU(d, src + k);
    sum = hn::MulAdd(x, x, sum);
  }
  float total = hn::GetLane(hn::SumOfLanes(d, sum));
  for (; k < n; ++k) total += src[k] * src[k];
  return 1.0f / std::sqrt(total / static_cast<float>(n) + eps);
}

// dst = scale * rotate(norm(src)) for a row at `position`: RotateRow with QK-norm
// first when `norm` is enabled.
template <class D>
HWY_INLINE void NormRotateRow(D d, const float* HWY_RESTRICT src, size_t head_dim,
                              const internal::HeadNorm& norm,
                              const RotaryEmbedding* rotary, int64_t position,
                              float scale, float* HWY_RESTRICT dst) {
  if (norm.enabled()) scale *= InverseRms(d, src, head_dim, norm.eps);
  RotateRow(d, src, head_dim, rotary, position, scale, dst, norm.weight);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_HEAD_NORM_INL_H_
