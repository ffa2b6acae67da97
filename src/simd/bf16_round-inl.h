// Per-target rounding of float lanes to bfloat16: round to nearest, ties to even, on
// the float's bits (Highway 1.0.3's DemoteTo truncates); a NaN stays a quiet NaN of
// its sign (rounding its bits could carry into the exponent). Used to convert
// buffers (bf16_convert.cc) and to write bfloat16 KV pages (kv_panels-inl.h).

#if defined(MHA_KERNELS_BF16_ROUND_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_KERNELS_BF16_ROUND_INL_H_
#undef MHA_KERNELS_BF16_ROUND_INL_H_
#else
#define MHA_KERNELS_BF16_ROUND_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The rounded value's bits in each lane's high half, zeros in the low half: a float
// that is exactly the bfloat16. bits + 0x7FFF + (lowest kept bit) rounds to nearest
// even before the low half is dropped.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> RoundedBf16High(D d, hn::Vec<D> values) {
  const hn::RebindToUnsigned<D> du;
  const auto bits = hn::BitCast(du, values);
  const auto odd = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  const auto rounded = hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), odd));
  const auto quiet_nan = hn::Or(bits, hn::Set(du, 0x00400000u));
  const auto nan = hn::RebindMask(du, hn::IsNaN(values));
  (void)d;
  return hn::And(hn::IfThenElse(nan, quiet_nan, rounded), hn::Set(du, 0xFFFF0000u));
}

// The bfloat16 bits of each lane, narrowed to 16-bit lanes.
template <class D>
HWY_INLINE hn::Vec<hn::Rebind<uint16_t, D>> RoundToBf16(D d, hn::Vec<D> values) {
  const hn::Rebind<int32_t, D> di32;
  const auto bits = hn::ShiftRight<16>(RoundedBf16High(d, values));
  return hn::DemoteTo(hn::Rebind<uint16_t, D>(), hn::BitCast(di32, bits));
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_BF16_ROUND_INL_H_
