// MaxAbs and QuantizeInt8 with Highway: one pass each over the input rows.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/simd/int8_quantize.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cmath>

#include "hwy/highway.h"
#include "src/simd/int8_quantize.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float MaxAbs(const float* HWY_RESTRICT in, size_t count) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  auto max = hn::Zero(d);
  size_t i = 0;
  for (; i + lanes <= count; i += lanes)
    max = hn::Max(max, hn::Abs(hn::LoadU(d, in + i)));
  float result = hn::GetLane(hn::MaxOfLanes(d, max));
  for (; i < count; ++i) result = std::max(result, std::fabs(in[i]));
  return result;
}

void QuantizeInt8(const float* HWY_RESTRICT in, size_t count, float inverse_scale,
                  int8_t* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<int32_t, decltype(d)> di32;
  const hn::Rebind<int8_t, decltype(d)> di8;
  const size_t lanes = hn::Lanes(d);
  const auto factor = hn::Set(d, inverse_scale);
  const auto low = hn::Set(di32, -127), high = hn::Set(di32, 127);
  size_t i = 0;
  for (; i + lanes <= count; i += lanes) {
    const auto q = hn::NearestInt(hn::Mul(hn::LoadU(d, in + i), factor));
    hn::StoreU(hn::DemoteTo(di8, hn::Min(hn::Max(q, low), high)), di8, out + i);
  }
  for (; i < count; ++i) {
    const float q = std::clamp(std::nearbyint(in[i] * inverse_scale), -127.0f, 127.0f);
    out[i] = static_cast<int8_t>(q);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mha::internal {

HWY_EXPORT(MaxAbs);
HWY_EXPORT(QuantizeInt8);

float MaxAbs(const float* in, size_t count) {
  return HWY_DYNAMIC_DISPATCH(MaxAbs)(in, count);
}

void QuantizeInt8(const float* in, size_t count, float inverse_scale, int8_t* out) {
  HWY_DYNAMIC_DISPATCH(QuantizeInt8)(in, count, inverse_scale, out);
}

}  // namespace mha::internal
#endif  // HWY_ONCE
