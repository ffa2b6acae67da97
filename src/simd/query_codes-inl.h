// Per-target quantisation of a query row to int8 codes, for the integer dot products
// with an int8 cache's keys (src/kernel/int8_tile_matmul.h): symmetric, one scale per
// row, as llama.cpp meets its q8_0 keys. scale = max |q| / 127, and a code is
// q * (127 / max |q|) rounded to nearest (ties to even), within [-127, 127]; the
// logit is then scale * (sum of code products) * key scale. A row of zeros has scale
// 0; a row with an infinity or a NaN has codes 0 and a NaN scale, so that its scores,
// and the row, are NaN as they were before quantisation. The same for the integer
// P V's weights (QuantizeWeightRow, or QuantizeWeightsOf for weights made as they are
// read), which are negative only where a q4_0 scale is.

#if defined(MHA_SIMD_QUERY_CODES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_SIMD_QUERY_CODES_INL_H_
#undef MHA_SIMD_QUERY_CODES_INL_H_
#else
#define MHA_SIMD_QUERY_CODES_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// max |x| over count values, or NaN if one is not finite: the whole vectors
// load(i) (i = 0, Lanes(d), ...), then in[i] to count (in: null where count is a
// multiple of Lanes(d)). Two vectors a step, in two chains: a decode step's short rows
// (a key tile's weights, 16 rows per tile for 4-bit values) wait on the max's latency.
template <class D, class Load>
HWY_INLINE float FiniteMaxAbsOf(D d, size_t count, const Load& load, const float* in) {
  const size_t lanes = hn::Lanes(d);
  const auto zero = hn::Zero(d);
  auto max = zero, max2 = zero;
  auto non_finite = zero, non_finite2 = zero;  // x * 0: NaN for inf and NaN
  size_t i = 0;
  for (; i + 2 * lanes <= count; i += 2 * lanes) {
    const auto x = load(i), x2 = load(i + lanes);
    max = hn::Max(max, hn::Abs(x));
    max2 = hn::Max(max2, hn::Abs(x2));
    non_finite = hn::Add(non_finite, hn::Mul(x, zero));
    non_finite2 = hn::Add(non_finite2, hn::Mul(x2, zero));
  }
  if (i + lanes <= count) {
    const auto x = load(i);
    max = hn::Max(max, hn::Abs(x));
    non_finite = hn::Add(non_finite, hn::Mul(x, zero));
    i += lanes;
  }
  // A lane that met a non-finite value reads as +inf (a finite |x| never does): one
  // reduction, not two, on the row's critical path.
  const auto flagged = hn::IfThenElse(hn::IsNaN(hn::Add(non_finite, non_finite2)),
                                      hn::Inf(d), hn::Max(max, max2));
  float result = hn::GetLane(hn::MaxOfLanes(d, flagged));
  for (; i < count; ++i) {
    result = std::isfinite(in[i]) ? std::max(result, std::fabs(in[i]))
                                  : std::numeric_limits<float>::infinity();
  }
  return std::isfinite(result) ? result : std::numeric_limits<float>::quiet_NaN();
}

// max |in[i]| over count values, or NaN if one is not finite.
template <class D>
HWY_INLINE float FiniteMaxAbs(D d, const float* in, size_t count) {
  return FiniteMaxAbsOf(
      d, count, [&](size_t i) { return hn::LoadU(d, in + i); }, in);
}

// Quantises in[0, count) into `codes` and, as floats, `code_values` (which may be
// `in` itself: element by element, read before written); 0 < limit <= 32767.
// Returns the row's scale.
template <class D>
HWY_INLINE float QuantizeQueryRow(D d, const float* in, size_t count, int32_t limit,
                                  float* code_values, int16_t* HWY_RESTRICT codes) {
  const float max = FiniteMaxAbs(d, in, count);
  const bool finite = !std::isnan(max);
  // A NaN row quantises as zeros; its NaN scale carries it. So does a zero row.
  const bool zeros = !finite || max == 0.0f;
  const hn::Rebind<int32_t, D> di32;
  const hn::Rebind<int16_t, D> di16;
  const size_t lanes = hn::Lanes(d);
  const float top = static_cast<float>(limit);
  const auto divisor = hn::Set(d, zeros ? 1.0f : max), full = hn::Set(d, top);
  const auto low = hn::Set(di32, -limit), high = hn::Set(di32, limit);
  size_t i = 0;
  for (; i + lanes <= count; i += lanes) {
    const auto x =
        zeros ? hn::Zero(d) : hn::Mul(hn::Div(hn::LoadU(d, in + i), divisor), full);
    const auto q = hn::Min(hn::Max(hn::NearestInt(x), low), high);
    hn::StoreU(hn::ConvertTo(d, q), d, code_values + i);
    hn::StoreU(hn::DemoteTo(di16, q), di16, codes + i);
  }
  for (; i < count; ++i) {
    const float x = zeros ? 0.0f : in[i] / max * top;
    const float q = std::clamp(std::nearbyint(x), -top, top);
    code_values[i] = q;
    codes[i] = static_cast<int16_t>(q);
  }
  return max / top;
}

// Integer-valued floats within (-2^22, 2^22) as int32 lanes: added to 1.5 x 2^23,
// exactly, each lands in the low bits of the sum's mantissa. Two operations where
// ConvertTo takes five (its conversion and a fix for overflow, which codes within
// 32767 never reach).
template <class D>
HWY_INLINE hn::Vec<hn::Rebind<int32_t, D>> SmallIntegers(D d, hn::Vec<D> integers) {
  const hn::Rebind<int32_t, D> di32;
  const auto magic = hn::Set(d, 12582912.0f);
  return hn::Sub(hn::BitCast(di32, hn::Add(integers, magic)), hn::BitCast(di32, magic));
}

// Quantises weights in[0, count) (probabilities times their values' scales: >= 0, but
// where a q4_0 group's scale is negative; or NaN) into `codes` within [-limit, limit],
// 0 < limit <= 32767, for the integer kernels alone: no float codes, and one multiply
// per vector, code = w x (limit / max |w|) rounded to nearest (ties to even; the
// largest rounds to limit at most). Where limit / max overflows (max near the smallest
// normal), w / max x limit as QuantizeQueryRow. Returns the row's scale, max / limit:
// 0 for a row of zeros, NaN (codes 0) for a row with a NaN or an infinity.
// QuantizeWeightsOf takes the weights' FiniteMaxAbsOf and reads their whole vectors
// from load(i) again: weights made as they are read (a value group's) never go
// through memory, and rows can take their maxes first, their reductions overlapping.
template <class D, class Load>
HWY_INLINE float QuantizeWeightsOf(D d, size_t count, const Load& load, const float* in,
                                   int32_t limit, float max,
                                   int16_t* HWY_RESTRICT codes) {
  const float top = static_cast<float>(limit);
  const hn::Rebind<int16_t, D> di16;
  const size_t lanes = hn::Lanes(d);
  if (std::isnan(max) || max == 0.0f) {
    std::fill(codes, codes + count, int16_t{0});
    return max / top;
  }
  const float factor = top / max;
  const bool divide = std::isinf(factor);
  const auto f = hn::Set(d, factor), divisor = hn::Set(d, max), full = hn::Set(d, top);
  size_t i = 0;
  for (; i + lanes <= count; i += lanes) {
    const auto w = load(i);
    const auto x = divide ? hn::Mul(hn::Div(w, divisor), full) : hn::Mul(w, f);
    hn::StoreU(hn::DemoteTo(di16, SmallIntegers(d, hn::Round(x))), di16, codes + i);
  }
  for (; i < count; ++i) {
    const float x = divide ? in[i] / max * top : in[i] * factor;
    codes[i] = static_cast<int16_t>(std::nearbyint(x));
  }
  return max / top;
}
template <class D>
HWY_INLINE float QuantizeWeightRow(D d, const float* in, size_t count, int32_t limit,
                                   int16_t* HWY_RESTRICT codes) {
  return QuantizeWeightsOf(
      d, count, [&](size_t i) { return hn::LoadU(d, in + i); }, in, limit,
      FiniteMaxAbs(d, in, count), codes);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_SIMD_QUERY_CODES_INL_H_
