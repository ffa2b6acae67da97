// Per-target widening of fp8 codes (src/simd/fp8.h) to float lanes, as the tile
// products read fp8 KV pages: sign-extend each byte, shift its magnitude bits onto
// the float's exponent and mantissa, add 127 - bias to the exponent, and let the
// special codes through as infinities and NaNs. A subnormal code's bits would be a
// subnormal float, and multiplying one costs a microcode assist (about 100 cycles on
// Intel cores: e4m3 pages cast without scales ran 9x slower than e5m2's), so those
// take one more exponent step and subtract it instead, in normal floats throughout.

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
  constexpr int32_t kExponentMask = 0x7F & ~((1 << Format::kMantissaBits) - 1);
  constexpr int32_t kRebias = (127 - Format::kBias) << 23;
  const auto codes =
      hn::PromoteTo(di32, hn::LoadU(di8, reinterpret_cast<const int8_t*>(p)));
  const auto magnitude =
      hn::And(hn::ShiftLeft<kShift>(codes), hn::Set(di32, 0x7F << kShift));
  const auto exponent = hn::And(codes, hn::Set(di32, kExponentMask));
  const auto normal = hn::BitCast(d, hn::Add(magnitude, hn::Set(di32, kRebias)));
  // 2^(1 - bias) (1 + m / 2^M) - 2^(1 - bias): the subnormal, exactly.
  const auto subnormal =
      hn::Sub(hn::BitCast(d, hn::Add(magnitude, hn::Set(di32, kRebias + (1 << 23)))),
              hn::BitCast(d, hn::Set(di32, kRebias + (1 << 23))));
  const auto is_subnormal = hn::RebindMask(d, hn::Eq(exponent, hn::Zero(di32)));
  auto value = hn::IfThenElse(is_subnormal, subnormal, normal);
  if (Format::kWidened != 1.0f) value = hn::Mul(value, hn::Set(d, Format::kWidened));
  const auto special_bits = hn::Set(di32, Format::kSpecialMask);
  const auto special =
      hn::RebindMask(d, hn::Eq(hn::And(codes, special_bits), special_bits));
  const auto infinite_or_nan =
      hn::BitCast(d, hn::Or(magnitude, hn::Set(di32, 0x7F800000)));
  // The sign-extended byte's sign is bit 31 of the codes.
  const auto sign = hn::BitCast(d, hn::And(codes, hn::Set(di32, int32_t(0x80000000u))));
  return hn::Or(sign, hn::IfThenElse(special, infinite_or_nan, value));
}

#if HWY_TARGET <= HWY_AVX2
// Where F16C converts halves (vcvtph2ps), fewer operations: an fp8 code is a half
// whose exponent is 5 - (7 - kMantissaBits) bits short. e5m2 is exactly a half's high
// byte, infinities and NaNs included. e4m3 sits 2^(15 - 7) below its value and has
// no half NaN: pages that hold no NaN code (Fp8E4M3Finite) keep the 2^-8 (their
// scales make up for it); the others multiply it away and look for the NaN code.
// Eight codes (AVX2) become halves in one interleave with zero bytes; sixteen
// (AVX-512) in a widening and a shift, which one interleave per 128 bits cannot beat.
template <class D>
HWY_INLINE hn::Vec<D> WidenFp8(D d, const internal::Fp8E5M2* HWY_RESTRICT p) {
  const hn::Rebind<hwy::float16_t, D> df16;
  const auto* bytes = reinterpret_cast<const uint8_t*>(p);
  if constexpr (hn::MaxLanes(d) == 8) {
    const hn::Full128<uint8_t> d8;
    const auto codes =
        hn::ZeroExtendVector(d8, hn::LoadU(hn::Half<decltype(d8)>(), bytes));
    return hn::PromoteTo(d, hn::BitCast(df16, hn::ZipLower(hn::Zero(d8), codes)));
  } else {
    const auto codes = hn::PromoteTo(hn::Rebind<uint16_t, D>(),
                                     hn::LoadU(hn::Rebind<uint8_t, D>(), bytes));
    return hn::PromoteTo(d, hn::BitCast(df16, hn::ShiftLeft<8>(codes)));
  }
}

// e4m3 codes as halves, 2^-8 of their value; the NaN codes become +-1.875.
template <class D>
HWY_INLINE hn::Vec<D> WidenE4M3AsHalves(D d, const void* HWY_RESTRICT p) {
  const hn::Rebind<int16_t, D> di16;
  const auto codes = hn::PromoteTo(
      di16, hn::LoadU(hn::Rebind<int8_t, D>(), static_cast<const int8_t*>(p)));
  // The sign-extended byte's sign lands on bit 15; bit 14 (a copy of it) is cleared.
  const auto bits = hn::And(hn::ShiftLeft<7>(codes), hn::Set(di16, int16_t(-16512)));
  return hn::PromoteTo(d, hn::BitCast(hn::Rebind<hwy::float16_t, D>(), bits));
}

template <class D>
HWY_INLINE hn::Vec<D> WidenFp8(D d, const internal::Fp8E4M3Finite* HWY_RESTRICT p) {
  return WidenE4M3AsHalves(d, p);
}

template <class D>
HWY_INLINE hn::Vec<D> WidenFp8(D d, const internal::Fp8E4M3* HWY_RESTRICT p) {
  const auto halves = WidenE4M3AsHalves(d, p);
  const auto is_nan = hn::Eq(hn::Abs(halves), hn::Set(d, 1.875f));
  return hn::IfThenElse(is_nan, hn::NaN(d), hn::Mul(halves, hn::Set(d, 256.0f)));
}
#endif  // HWY_TARGET <= HWY_AVX2

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_FP8_WIDEN_INL_H_
