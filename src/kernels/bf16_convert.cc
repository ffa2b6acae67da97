// fp32 <-> bfloat16 with Highway: integer rounding on the float bits, then narrowing.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kernels/bf16_convert.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "src/kernels/bf16_convert.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void FloatToBf16(const float* HWY_RESTRICT in, size_t count, uint16_t* HWY_RESTRICT out) {
  const hn::ScalableTag<uint32_t> du32;
  const hn::Rebind<uint16_t, decltype(du32)> du16;
  const hn::Rebind<int32_t, decltype(du32)> di32;
  const hn::Rebind<float, decltype(du32)> df;
  const size_t lanes = hn::Lanes(du32);
  // bits + 0x7FFF + (lowest kept bit) rounds to nearest even before dropping 16 bits.
  const auto bias = hn::Set(du32, 0x7FFFu);
  const auto one = hn::Set(du32, 1u);
  const auto quiet = hn::Set(du32, 0x0040u);
  size_t i = 0;
  for (; i + lanes <= count; i += lanes) {
    const auto values = hn::LoadU(df, in + i);
    const auto bits = hn::BitCast(du32, values);
    const auto odd = hn::And(hn::ShiftRight<16>(bits), one);
    const auto nan = hn::RebindMask(du32, hn::IsNaN(values));
    const auto rounded =
        hn::IfThenElse(nan, hn::Or(hn::ShiftRight<16>(bits), quiet),
                       hn::ShiftRight<16>(hn::Add(bits, hn::Add(bias, odd))));
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di32, rounded)), du16, out + i);
  }
  for (; i < count; ++i) out[i] = RoundToBf16Bits(in[i]);
}

void Bf16ToFloat(const uint16_t* HWY_RESTRICT in, size_t count, float* HWY_RESTRICT out) {
  for (size_t i = 0; i < count; ++i) {
    const uint32_t bits = uint32_t{in[i]} << 16;
    __builtin_memcpy(out + i, &bits, sizeof(bits));
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mha::internal {

HWY_EXPORT(FloatToBf16);
HWY_EXPORT(Bf16ToFloat);

void FloatToBf16(const float* in, size_t count, uint16_t* out) {
  HWY_DYNAMIC_DISPATCH(FloatToBf16)(in, count, out);
}

void Bf16ToFloat(const uint16_t* in, size_t count, float* out) {
  HWY_DYNAMIC_DISPATCH(Bf16ToFloat)(in, count, out);
}

}  // namespace mha::internal
#endif  // HWY_ONCE
