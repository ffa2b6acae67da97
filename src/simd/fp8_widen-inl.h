// Per-target widening of fp8 codes (src/simd/fp8.h) to float lanes, as the tile
// products read fp8 KV pages: sign-extend each byte, shift its magnitude bits onto
// the float's exponent and mantissa, multiply by 2^(127 - bias) (exact, subnormals
// included), and let the special codes through as infinities and NaNs.

#if defined(MHA_KERNELS_FP8_WIDEN_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_KERNELS_FP8_WIDEN_INL_H_
#undef MHA_KERNELS_FP8_WIDEN_INL_H_
#else
#define MHA_KERNELS_FP8_WIDEN_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"
#include "src/simd/fp8.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Lanes(d) codes of Format from p, as floats.
template <class Format, class D>
HWY_INLINE hn::Vec<D> WidenFp8(D d, const Format* HWY_RESTRICT p) {
  const hn::Rebind<int32_t, D> di32;
  const hn::Rebind<int8_t, D> di8;
  constexpr int kShift = internal::Fp8Shift<Format>();
  const auto codes =
      hn::PromoteTo(di32, hn::LoadU(di8, reinterpret_cast<const int8_t*>(p)));
  // The sign-extended byte's sign lands on bit 31 with ones above the magnitude.
  const auto bits =
      hn::And(hn::ShiftLeft<kShift>(codes),
              hn::Set(di32, static_cast<int32_t>(0x80000000u | (0x7Fu << kShift))));
  const auto special = hn::Eq(hn::And(codes, hn::Set(di32, Format::kSpecialMask)),
                              hn::Set(di32, Format::kSpecialMask));
  const auto value = hn::Mul(
      hn::BitCast(d, bits), hn::Set(d, internal::Fp8Rebias<Format>() * Format::kWidened));
  const auto infinite_or_nan = hn::BitCast(d, hn::Or(bits, hn::Set(di32, 0x7F800000)));
  return hn::IfThenElse(hn::RebindMask(d, special), infinite_or_nan, value);
}

#if HWY_TARGET <= HWY_AVX2
// Where F16C converts halves (vcvtph2ps), fewer operations: an fp8 code is a half
// whose exponent is 5 - (7 - kMantissaBits) bits short. e5m2 is exactly a half's high
// byte, infinities and NaNs included. e4m3 sits 2^(15 - 7) below its value and has
// no half NaN: only pages that hold no NaN code (Fp8E4M3Finite) take that path, and
// keep the 2^-8 (their scales make up for it).
template <class D>
HWY_INLINE hn::Vec<D> WidenFp8(D d, const internal::Fp8E5M2* HWY_RESTRICT p) {
  const auto codes = hn::PromoteTo(
      hn::Rebind<int16_t, D>(),
      hn::LoadU(hn::Rebind<int8_t, D>(), reinterpret_cast<const int8_t*>(p)));
  return hn::PromoteTo(
      d, hn::BitCast(hn::Rebind<hwy::float16_t, D>(), hn::ShiftLeft<8>(codes)));
}

template <class D>
HWY_INLINE hn::Vec<D> WidenFp8(D d, const internal::Fp8E4M3Finite* HWY_RESTRICT p) {
  const hn::Rebind<int16_t, D> di16;
  const auto codes = hn::PromoteTo(
      di16, hn::LoadU(hn::Rebind<int8_t, D>(), reinterpret_cast<const int8_t*>(p)));
  // The sign-extended byte's sign lands on bit 15; bit 14 (a copy of it) is cleared.
  const auto bits = hn::And(hn::ShiftLeft<7>(codes), hn::Set(di16, int16_t(-16512)));
  return hn::PromoteTo(d, hn::BitCast(hn::Rebind<hwy::float16_t, D>(), bits));
}
#endif  // HWY_TARGET <= HWY_AVX2

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_FP8_WIDEN_INL_H_
