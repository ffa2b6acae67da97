// Per-target softmax of one row of attention scores, for kernels compiled with
// Highway's foreach_target. Subtracts the row max before a vectorised exp; a row
// whose scores are all -inf (every key masked) becomes zeros instead of NaN.
//
// Accuracy: Highway's Exp has a maximum error of 1 ULP on [-FLT_MAX, 104]; after
// max-subtraction every argument is <= 0, and arguments below -104 give 0, as
// float's exp does to within its smallest subnormal.

// Include guard toggled per target, as Highway's own -inl.h headers do.
#if defined(MHA_KERNELS_SOFTMAX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_KERNELS_SOFTMAX_INL_H_
#undef MHA_KERNELS_SOFTMAX_INL_H_
#else
#define MHA_KERNELS_SOFTMAX_INL_H_
#endif

#include <cstddef>
#include <limits>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Calls func(pointer) for each whole vector of row[0, n), then once for the tail
// through a stack buffer padded with `pad`, copying the tail's results back. Lets
// every pass use full vectors without reading or writing past the row.
template <class D, class Func>
HWY_INLINE void ForEachVector(D d, float* HWY_RESTRICT row, size_t n, float pad,
                              const Func& func) {
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) func(row + i);
  if (i == n) return;
  HWY_ALIGN float tail[hn::MaxLanes(D())];
  const size_t remaining = n - i;
  for (size_t j = 0; j < lanes; ++j) tail[j] = j < remaining ? row[i + j] : pad;
  func(tail);
  for (size_t j = 0; j < remaining; ++j) row[i + j] = tail[j];
}

// Turns row[0, n) into softmax probabilities in place. Returns false, with the row
// zeroed, when every score is -inf.
template <class D>
HWY_INLINE bool SoftmaxRow(D d, float* HWY_RESTRICT row, size_t n) {
  using V = hn::Vec<D>;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  V max = hn::Set(d, kNegInf);
  ForEachVector(d, row, n, kNegInf,
                [&](float* p) { max = hn::Max(max, hn::LoadU(d, p)); });
  const float row_max = hn::GetLane(hn::MaxOfLanes(d, max));
  if (row_max == kNegInf) {
    ForEachVector(d, row, n, 0.0f, [&](float* p) { hn::StoreU(hn::Zero(d), d, p); });
    return false;
  }
  // Clamping keeps -inf out of Exp (its integer conversion); Exp(-200) is 0.
  const V neg_max = hn::Set(d, -row_max);
  const V lowest = hn::Set(d, -200.0f);
  V sum = hn::Zero(d);
  ForEachVector(d, row, n, kNegInf, [&](float* p) {
    const V shifted = hn::Max(hn::Add(hn::LoadU(d, p), neg_max), lowest);
    const V e = hn::Exp(d, shifted);
    sum = hn::Add(sum, e);
    hn::StoreU(e, d, p);
  });
  const V inverse = hn::Set(d, 1.0f / hn::GetLane(hn::SumOfLanes(d, sum)));
  ForEachVector(d, row, n, 0.0f,
                [&](float* p) { hn::StoreU(hn::Mul(hn::LoadU(d, p), inverse), d, p); });
  return true;
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_SOFTMAX_INL_H_
