// RmsNormRows, compiled once per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/simd/rms_norm_rows.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "src/simd/head_norm-inl.h"
#include "src/simd/rms_norm_rows.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace internal {
namespace HWY_NAMESPACE {

void RmsNormRows(float* rows, int64_t count, int64_t stride, int64_t width,
                 const float* weight, float eps) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<float> d;
  const size_t n = static_cast<size_t>(width), lanes = hn::Lanes(d);
  for (int64_t r = 0; r < count; ++r) {
    float* row = rows + r * stride;
    const float inverse_rms = mha::HWY_NAMESPACE::InverseRms(d, row, n, eps);
    const auto scale = hn::Set(d, inverse_rms);
    size_t k = 0;
    for (; k + lanes <= n; k += lanes) {
      const auto w = hn::Mul(hn::LoadU(d, weight + k), scale);
      hn::StoreU(hn::Mul(hn::LoadU(d, row + k), w), d, row + k);
    }
    for (; k < n; ++k) row[k] = row[k] * (weight[k] * inverse_rms);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mha::internal {

HWY_EXPORT(RmsNormRows);

void RmsNormRows(float* rows, int64_t count, int64_t stride, int64_t width,
                 const float* weight, float eps) {
  HWY_DYNAMIC_DISPATCH(RmsNormRows)(rows, count, stride, width, weight, eps);
}

}  // namespace mha::internal
#endif  // HWY_ONCE
