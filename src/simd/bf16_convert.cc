// fp32 <-> bfloat16 with Highway: rounding on the float bits (bf16_round-inl.h), then
// narrowing.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/simd/bf16_convert.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "src/simd/bf16_convert.h"
#include "src/simd/bf16_round-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void FloatToBf16(const float* HWY_RESTRICT in, size_t count, uint16_t* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<uint16_t, decltype(df)> du16;
  const size_t lanes = hn::Lanes(df);
  size_t i = 0;
  for (; i + lanes <= count; i += lanes) {
    hn::StoreU(mha::HWY_NAMESPACE::RoundToBf16(df, hn::LoadU(df, in + i)), du16, out + i);
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
