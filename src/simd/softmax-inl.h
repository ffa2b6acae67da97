// Per-target online softmax for attention rows processed one key step at a time
// (flash-attention style): each step is exponentiated against the running row max
// and the running sum rescaled, so a row's probabilities never need all keys at once.
// A row whose keys are all masked (-inf) keeps sum 0 and ends as zeros, never NaN.
//
// The running max lags: it moves only when a step's max exceeds it by more than
// kMaxExpArgument (8, exp-inl.h). Softmax is invariant under the shift, so the
// result is the same up to rounding; every exp argument stays <= 8, so an
// unnormalised probability is at most e^8 = 2981 and a row's sum under 3e3 x its
// keys (finite for any key count below 1e34); and steps whose max grew less than
// that (after the first few, nearly all) leave the context rows unscaled.
//
// Accuracy: exp-inl.h's SoftmaxExp: within 2e-7 relative down to exp(-86), 0 below;
// for probabilities rounded to bfloat16 (ExpAndSumToBf16), 6e-6 before the rounding.
//
// Non-finite scores: a NaN or +inf score makes its row's max non-finite, and the
// whole row NaN from then on (every x - max would be NaN or exp(NaN)), so that a
// non-finite input shows in every output it reaches; the exp never sees a NaN.

// Include guard toggled per target, as Highway's own -inl.h headers do.
#if defined(MHA_KERNELS_SOFTMAX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_KERNELS_SOFTMAX_INL_H_
#undef MHA_KERNELS_SOFTMAX_INL_H_
#else
#define MHA_KERNELS_SOFTMAX_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "hwy/highway.h"
#include "src/simd/bf16_round-inl.h"
#include "src/simd/bf16_round_avx512bf16-inl.h"
#include "src/simd/exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Rows are padded to whole vectors by the caller: n % Lanes(d) == 0.

// row[0, begin) and row[end, n) = -inf (begin <= end <= n). Whole-vector stores:
// scalar ones would stall the vector loads that follow (failed store-to-load
// forwarding).
template <class D>
HWY_INLINE void MaskOutside(D d, float* HWY_RESTRICT row, size_t begin, size_t end,
                            size_t n) {
  const size_t lanes = hn::Lanes(d);
  HWY_DASSERT(begin <= end && end <= n && n % lanes == 0);
  const auto neg_inf = hn::Set(d, kNegInf);
  for (size_t i = 0; i < begin; i += lanes) {
    const auto masked = hn::FirstN(d, begin - i);
    hn::StoreU(hn::IfThenElse(masked, neg_inf, hn::LoadU(d, row + i)), d, row + i);
  }
  for (size_t i = end / lanes * lanes; i < n; i += lanes) {
    const auto keep = hn::FirstN(d, end > i ? end - i : 0);
    hn::StoreU(hn::IfThenElse(keep, hn::LoadU(d, row + i), neg_inf), d, row + i);
  }
}

// The row's max, or NaN when it holds a NaN (x86's max drops NaN operands, so they
// are tracked apart).
template <class D>
HWY_INLINE float RowMax(D d, const float* HWY_RESTRICT row, size_t n) {
  auto max = hn::Set(d, kNegInf);
  auto nan = hn::Zero(d);
  for (size_t i = 0; i < n; i += hn::Lanes(d)) {
    const auto v = hn::LoadU(d, row + i);
    max = hn::Max(max, v);
    nan = hn::Or(nan, hn::VecFromMask(d, hn::IsNaN(v)));
  }
  if (!hn::AllFalse(d, hn::MaskFromVec(nan)))
    return std::numeric_limits<float>::quiet_NaN();
  return hn::GetLane(hn::MaxOfLanes(d, max));
}

// row = exp(row - max), returning the sum; max is finite and >= every score minus
// kMaxExpArgument.
template <class D>
HWY_INLINE float ExpAndSum(D d, float* HWY_RESTRICT row, size_t n, float max) {
  const auto neg_max = hn::Set(d, -max);
  auto sum = hn::Zero(d);
  for (size_t i = 0; i < n; i += hn::Lanes(d)) {
    const auto e = SoftmaxExp(d, hn::Add(hn::LoadU(d, row + i), neg_max));
    sum = hn::Add(sum, e);
    hn::StoreU(e, d, row + i);
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

// bits = exp(row - max) rounded to bfloat16, returning the sum of the rounded
// values: the weights P V multiplies are then exactly those the sum normalises. The
// exp needs only bfloat16's precision (exp-inl.h). On AVX-512 targets the kernel
// calls it only where the CPU has AVX512_BF16 (its bf16 products need it), which
// rounds in one instruction; an exp is never subnormal (at least exp(-86)), so the
// bits are RoundToBf16's.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#define MHA_EXP_TO_BF16_ATTR MHA_AVX512_BF16
#else
#define MHA_EXP_TO_BF16_ATTR HWY_INLINE
#endif
template <class D>
MHA_EXP_TO_BF16_ATTR float ExpAndSumToBf16(D d, const float* HWY_RESTRICT row, size_t n,
                                           float max, uint16_t* HWY_RESTRICT bits) {
  const hn::Rebind<uint16_t, D> du16;
  const hn::Rebind<uint32_t, D> du32;
  const auto neg_max = hn::Set(d, -max);
  auto sum = hn::Zero(d);
  for (size_t i = 0; i < n; i += hn::Lanes(d)) {
    const auto e =
        SoftmaxExp<ExpPrecision::kBfloat16>(d, hn::Add(hn::LoadU(d, row + i), neg_max));
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    const auto rounded = RoundToBf16Avx512Bf16(d, e);
#else
    const auto rounded = RoundToBf16(d, e);
#endif
    hn::StoreU(rounded, du16, bits + i);
    sum = hn::Add(sum, hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du32, rounded))));
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}
#undef MHA_EXP_TO_BF16_ATTR

template <class D>
HWY_INLINE void ScaleRow(D d, float* HWY_RESTRICT row, size_t n, float factor) {
  const auto f = hn::Set(d, factor);
  for (size_t i = 0; i < n; i += hn::Lanes(d)) {
    hn::StoreU(hn::Mul(hn::LoadU(d, row + i), f), d, row + i);
  }
}

// row[i] *= factors[i]: an int8 cache's per-key scales.
template <class D>
HWY_INLINE void MulRow(D d, float* HWY_RESTRICT row, const float* HWY_RESTRICT factors,
                       size_t n) {
  for (size_t i = 0; i < n; i += hn::Lanes(d)) {
    hn::StoreU(hn::Mul(hn::LoadU(d, row + i), hn::LoadU(d, factors + i)), d, row + i);
  }
}

// Probabilities times per-key factors (a cache's value scales), where a
// probability of exactly 0 (a masked key) stays 0 even when its factor is NaN (a
// token with no scaled form): masked keys affect no output.
template <class D>
HWY_INLINE hn::Vec<D> WeighProbabilities(D d, hn::Vec<D> p, hn::Vec<D> factors) {
  return hn::IfThenZeroElse(hn::Eq(p, hn::Zero(d)), hn::Mul(p, factors));
}
// out[i] = probabilities[i] x factors[i], the same rule, to a whole vector past n
// (a value group's scales), into out or in place over a row (an int8 cache's value
// scales per token).
template <class D>
HWY_INLINE void ScaleProbabilities(D d, const float* probabilities,
                                   const float* HWY_RESTRICT factors, size_t n,
                                   float* out) {
  for (size_t i = 0; i < n; i += hn::Lanes(d)) {
    hn::StoreU(
        WeighProbabilities(d, hn::LoadU(d, probabilities + i), hn::LoadU(d, factors + i)),
        d, out + i);
  }
}
template <class D>
HWY_INLINE void ScaleProbabilities(D d, float* HWY_RESTRICT row,
                                   const float* HWY_RESTRICT factors, size_t n) {
  ScaleProbabilities(d, row, factors, n, row);
}

// Turns one step of masked scores into unnormalised probabilities against the
// updated running max: in place, or (bits given) rounded to bfloat16 into bits.
// step_max is RowMax of the row (taken apart, so that a caller can take every row's
// first: short rows then overlap their reductions instead of waiting on each).
// Returns the factor by which everything accumulated from earlier steps (the sum,
// already applied here, and the context row) must be multiplied.
// running_max starts at -inf and running_sum at 0 for each row.
template <class D>
HWY_INLINE float OnlineSoftmaxStep(D d, float* HWY_RESTRICT row, size_t n, float step_max,
                                   float& running_max, float& running_sum,
                                   uint16_t* HWY_RESTRICT bits = nullptr) {
  HWY_DASSERT(n % hn::Lanes(d) == 0);
  // A NaN max (from a NaN score) must not be dropped: it would read as "every key
  // masked" and zero the row.
  const float new_max = std::isnan(step_max) || running_max == kNegInf ||
                                step_max > running_max + kMaxExpArgument
                            ? step_max
                            : running_max;
  if (new_max == kNegInf || !std::isfinite(new_max)) {
    // Every key so far masked: zeros. A NaN or +inf score: the row is NaN.
    const float fill =
        new_max == kNegInf ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    for (size_t i = 0; i < n; i += hn::Lanes(d)) hn::StoreU(hn::Set(d, fill), d, row + i);
    if (bits) std::fill(bits, bits + n, fill == 0.0f ? uint16_t{0} : uint16_t{0x7FC0});
    if (fill != 0.0f) running_max = running_sum = fill;
    return fill == 0.0f ? 1.0f : fill;
  }
  // Unchanged max: factor exactly 1, without the scalar exp.
  const float rescale = running_max == new_max   ? 1.0f
                        : running_max == kNegInf ? 0.0f
                                                 : std::exp(running_max - new_max);
  const float step_sum =
      bits ? ExpAndSumToBf16(d, row, n, new_max, bits) : ExpAndSum(d, row, n, new_max);
  running_sum = running_sum * rescale + step_sum;
  running_max = new_max;
  return rescale;
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_SOFTMAX_INL_H_
