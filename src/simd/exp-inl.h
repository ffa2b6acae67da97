// Per-target exp of the softmax's arguments: scores minus their row's running max,
// which lags the true max by at most kMaxExpArgument (softmax-inl.h), so
// x <= kMaxExpArgument or -inf, never NaN (the softmax handles non-finite maxima
// before it gets here).
// Cheaper than Highway's general Exp (14 vector ops on AVX-512, 17 elsewhere, against
// its 22): no positive range, no sign handling, and on AVX-512 one `vscalefps` where
// Highway builds 2^n from integers in two halves.
//
// exp(x) = 2^n e^r with n = round(x / ln 2) and r = x - n ln 2 in [-ln2/2, ln2/2]
// (ln 2 in two parts, so r is exact to about 1e-12). e^r is a polynomial fitted for
// least relative error on that interval, of the degree the result needs
// (ExpPrecision): degree 6 for a float (3e-9 in exact arithmetic), degree 4 for a
// probability rounded to bfloat16 next (5.3e-6: 2^-17.5, under a 2^-9 rounding by
// 2^8.5: one random argument in about 2,400 rounds to the other neighbouring
// bfloat16; two multiply-adds fewer).
//
// Accuracy (tests/simd/exp_test.cc, every target): within 2e-7 relative of exp
// (6e-6 for kBfloat16) for -86 <= x <= kMaxExpArgument; exactly 1 at 0; below -86,
// exactly 0, an absolute error under 4.5e-38 (exp(-86)), far below what a
// probability next to the row max's exp(0) = 1 can show.

#if defined(MHA_KERNELS_EXP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_KERNELS_EXP_INL_H_
#undef MHA_KERNELS_EXP_INL_H_
#else
#define MHA_KERNELS_EXP_INL_H_
#endif

#include "hwy/highway.h"

#ifndef MHA_KERNELS_EXP_ARGUMENT_
#define MHA_KERNELS_EXP_ARGUMENT_
namespace mha {
// The largest argument the softmax passes: e^8 = 2981 keeps every intermediate far
// from overflow.
constexpr float kMaxExpArgument = 8.0f;
}  // namespace mha
#endif  // MHA_KERNELS_EXP_ARGUMENT_

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// How close to exp a result must be: a float's precision, or only what survives
// rounding to bfloat16 (the probabilities bf16 products multiply).
enum class ExpPrecision { kFloat, kBfloat16 };

// e^r on [-ln2/2, ln2/2], Horner's rule; the last two coefficients 1, so e^0 is 1.
template <ExpPrecision kPrecision, class D>
HWY_INLINE hn::Vec<D> ExpOfReduced(D d, hn::Vec<D> r) {
  constexpr bool kFull = kPrecision == ExpPrecision::kFloat;
  auto p = hn::Set(d, kFull ? 1.3814434641972184e-3f : 4.127734899520874e-2f);
  if constexpr (kFull) {
    p = hn::MulAdd(p, r, hn::Set(d, 8.368668146431446e-3f));
    p = hn::MulAdd(p, r, hn::Set(d, 4.166838526725769e-2f));
    p = hn::MulAdd(p, r, hn::Set(d, 1.666652113199234e-1f));
    p = hn::MulAdd(p, r, hn::Set(d, 4.999999403953552e-1f));
  } else {
    p = hn::MulAdd(p, r, hn::Set(d, 1.6753600537776947e-1f));
    p = hn::MulAdd(p, r, hn::Set(d, 5.000512599945068e-1f));
  }
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  return hn::MulAdd(p, r, hn::Set(d, 1.0f));
}

// exp(x) for full vectors of x <= kMaxExpArgument or -inf.
template <ExpPrecision kPrecision = ExpPrecision::kFloat, class D>
HWY_INLINE hn::Vec<D> SoftmaxExp(D d, hn::Vec<D> x) {
  const auto log2e = hn::Set(d, 1.44269504088896341f);
  const auto minus_ln2_high = hn::Set(d, -0.693145751953125f);
  const auto minus_ln2_low = hn::Set(d, -1.428606765330187045e-6f);
  // Below -86, 0. The clamp keeps every intermediate normal (n >= -124): on x86 a
  // subnormal or underflowing result costs a microcode assist per lane, and masked
  // and padded keys (-inf) are common.
  const auto lowest = hn::Set(d, -86.0f);
  const auto clamped = hn::Max(x, lowest);
  const auto n = hn::Round(hn::Mul(clamped, log2e));
  const auto r = hn::MulAdd(n, minus_ln2_low, hn::MulAdd(n, minus_ln2_high, clamped));
#if HWY_TARGET <= HWY_AVX3
  const hn::Vec<D> scaled{_mm512_scalef_ps(ExpOfReduced<kPrecision>(d, r).raw, n.raw)};
#else
  const hn::RebindToSigned<D> di;
  const auto two_to_n =
      hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127))));
  const auto scaled = hn::Mul(ExpOfReduced<kPrecision>(d, r), two_to_n);
#endif
  return hn::IfThenZeroElse(hn::Lt(x, lowest), scaled);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_EXP_INL_H_
