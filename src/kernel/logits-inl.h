// Per-target transforms of one row of attention logits before the softmax:
// soft-capping (Gemma 2) and ALiBi's linear position bias (BLOOM, MPT).
//
// Accuracy: Highway's Tanh has a maximum error of 4 ULP over all floats, so a
// soft-capped logit is within 4 ULP of cap * tanh(score / cap) before the final
// multiply (about 5e-7 relative).

#if defined(MHA_KERNELS_LOGITS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_KERNELS_LOGITS_INL_H_
#undef MHA_KERNELS_LOGITS_INL_H_
#else
#define MHA_KERNELS_LOGITS_INL_H_
#endif

#include <cstddef>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// row = cap * tanh(row / cap); n % Lanes(d) == 0.
template <class D>
HWY_INLINE void SoftCap(D d, float* HWY_RESTRICT row, size_t n, float cap) {
  HWY_DASSERT(n % hn::Lanes(d) == 0 && cap > 0.0f);
  const auto scale = hn::Set(d, cap), inverse = hn::Set(d, 1.0f / cap);
  for (size_t i = 0; i < n; i += hn::Lanes(d)) {
    const auto x = hn::Mul(hn::LoadU(d, row + i), inverse);
    hn::StoreU(hn::Mul(hn::Tanh(d, x), scale), d, row + i);
  }
}

// row[k] += slope * (distance + k): ALiBi for keys first_key + k of a query at
// position p, with distance = first_key - p; n % Lanes(d) == 0.
template <class D>
HWY_INLINE void AddAlibi(D d, float* HWY_RESTRICT row, size_t n, float slope,
                         int64_t distance) {
  const size_t lanes = hn::Lanes(d);
  HWY_DASSERT(n % lanes == 0);
  auto offsets = hn::Add(hn::Iota(d, 0.0f), hn::Set(d, static_cast<float>(distance)));
  const auto step = hn::Set(d, static_cast<float>(lanes)), slopes = hn::Set(d, slope);
  for (size_t i = 0; i < n; i += lanes) {
    hn::StoreU(hn::MulAdd(slopes, offsets, hn::LoadU(d, row + i)), d, row + i);
    offsets = hn::Add(offsets, step);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_LOGITS_INL_H_
