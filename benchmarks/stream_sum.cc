// SumFloats: the read-only stream's inner loop, compiled for every Highway target and
// dispatched to the widest the CPU has (under MHA_MAX_ISA, like the kernels it rates),
// with four independent sums so that the loads, not the adds, set the pace.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "benchmarks/stream_sum.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "benchmarks/machine_peaks.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mha::bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float SumFloats(const float* HWY_RESTRICT data, int64_t count) {
  const hn::ScalableTag<float> d;
  const auto lanes = static_cast<int64_t>(hn::Lanes(d));
  auto a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 4 * lanes <= count; i += 4 * lanes) {
    a0 = hn::Add(a0, hn::LoadU(d, data + i));
    a1 = hn::Add(a1, hn::LoadU(d, data + i + lanes));
    a2 = hn::Add(a2, hn::LoadU(d, data + i + 2 * lanes));
    a3 = hn::Add(a3, hn::LoadU(d, data + i + 3 * lanes));
  }
  float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < count; ++i) sum += data[i];
  return sum;
}

}  // namespace HWY_NAMESPACE
}  // namespace mha::bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mha::bench {

HWY_EXPORT(SumFloats);

float SumFloats(const float* data, int64_t count) {
  return HWY_DYNAMIC_DISPATCH(SumFloats)(data, count);
}

}  // namespace mha::bench
#endif
