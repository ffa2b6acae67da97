// Per-target zero-point terms of int4 pages (the int4 kind: x ~ min + scale x
// code). The tile products take the scaled codes; what the minimums add is
// separable and added here:
//   q . k_t = sum_c q_c s_c code_ct + sum_c q_c min_c (one term per query row and
//   page: keys per channel share their minimums over the page's tokens);
//   sum_t p_t v_tc = sum_t p_t s_tg code_tc + sum_t p_t min_tg (one term per row and
//   value group g: every channel of the group shares it).

#if defined(MHA_KERNELS_ZERO_POINTS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_KERNELS_ZERO_POINTS_INL_H_
#undef MHA_KERNELS_ZERO_POINTS_INL_H_
#else
#define MHA_KERNELS_ZERO_POINTS_INL_H_
#endif

#include <algorithm>
#include <cstddef>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// sum a[i] b[i] over i < n (any n: a row of the caller's may end there).
template <class D>
HWY_INLINE float Dot(D d, const float* HWY_RESTRICT a, const float* HWY_RESTRICT b,
                     size_t n) {
  const size_t lanes = hn::Lanes(d);
  auto sum = hn::Zero(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    sum = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), sum);
  }
  float total = hn::GetLane(hn::SumOfLanes(d, sum));
  for (; i < n; ++i) total += a[i] * b[i];
  return total;
}

// row[0, n) += q . mins (n % Lanes(d) == 0): one page's key minimums.
template <class D>
HWY_INLINE void AddKeyZeroPoint(D d, const float* HWY_RESTRICT query,
                                const float* HWY_RESTRICT mins, size_t head_dim,
                                float* HWY_RESTRICT row, size_t n) {
  const auto term = hn::Set(d, Dot(d, query, mins, head_dim));
  for (size_t i = 0; i < n; i += hn::Lanes(d)) {
    hn::StoreU(hn::Add(hn::LoadU(d, row + i), term), d, row + i);
  }
}

// context[0, dim) += for each group g of `group` columns, p . mins[g x stride, +n):
// one page's value minimums (n and group multiples of Lanes(d)).
template <class D>
HWY_INLINE void AddValueZeroPoints(D d, const float* HWY_RESTRICT probabilities,
                                   const float* HWY_RESTRICT mins, size_t n, size_t group,
                                   size_t stride, float* HWY_RESTRICT context,
                                   size_t dim) {
  for (size_t first = 0, g = 0; first < dim; first += group, ++g) {
    const auto term = hn::Set(d, Dot(d, probabilities, mins + g * stride, n));
    for (size_t c = first; c < std::min(dim, first + group); c += hn::Lanes(d)) {
      hn::StoreU(hn::Add(hn::LoadU(d, context + c), term), d, context + c);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_ZERO_POINTS_INL_H_
