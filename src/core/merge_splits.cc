// MergeSplits (merge_splits.h), compiled once per SIMD target: a decode step merges
// every split of every KV group, 128 of them for a 32k-token sequence, and the scalar
// loop took 3% of such a step (int8, AVX2). Its sums are a multiply then an add per
// element in split order, as the scalar loop's: the same bits on every target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/core/merge_splits.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cmath>
#include <limits>

#include "hwy/highway.h"
#include "src/core/merge_splits.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// out[k] += weight x in[k] (weight 0: + 0 x in[k], so a NaN in[k] still shows).
void AddWeighted(const float* HWY_RESTRICT in, float weight, size_t n,
                 float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto w = hn::Set(d, weight);
  size_t k = 0;
  for (; k + lanes <= n; k += lanes)
    hn::StoreU(hn::Add(hn::LoadU(d, out + k), hn::Mul(w, hn::LoadU(d, in + k))), d,
               out + k);
  for (; k < n; ++k) out[k] += weight * in[k];
}

void Scale(float factor, size_t n, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  size_t k = 0;
  for (; k + lanes <= n; k += lanes)
    hn::StoreU(hn::Mul(hn::LoadU(d, out + k), hn::Set(d, factor)), d, out + k);
  for (; k < n; ++k) out[k] *= factor;
}

void MergeSplits(const AttentionParams& params, const SplitGroup& group,
                 const float* partials) {
  const CoreTask& whole = group.whole;
  const int64_t rows = KernelRows(whole), value_head_dim = params.ValueHeadDim();
  const int64_t split_floats = SplitFloats(whole, value_head_dim);
  const size_t n = static_cast<size_t>(value_head_dim);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t head = RowHead(whole, r), row = RowQuery(whole, r);
    float max = -std::numeric_limits<float>::infinity();
    bool nan = false;  // a split that met a non-finite input makes the row NaN
    for (int64_t s = 0; s < group.splits; ++s) {
      const float lse =
          partials[group.offset + s * split_floats + rows * value_head_dim + r];
      nan |= std::isnan(lse);
      max = std::max(max, lse);
    }
    if (nan) max = std::numeric_limits<float>::quiet_NaN();
    float* out = params.context.Row(whole.batch, head, row);
    std::fill(out, out + value_head_dim, nan ? max : 0.0f);
    float total = nan ? max : 0.0f;
    for (int64_t s = 0; s < group.splits && std::isfinite(max); ++s) {
      const float* split = partials + group.offset + s * split_floats;
      const float weight = std::exp(split[rows * value_head_dim + r] - max);
      total += weight;
      AddWeighted(split + r * value_head_dim, weight, n, out);
    }
    Scale(total == 0.0f ? 0.0f : 1.0f / total, n, out);
    if (params.logsumexp) {
      params.logsumexp[(whole.batch * params.num_heads + head) * params.query_len +
                       params.first_query + row] =
          total == 0.0f ? max : max + std::log(total);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mha::internal {

HWY_EXPORT(MergeSplits);

void MergeSplits(const AttentionParams& params, const SplitGroup& group,
                 const float* partials) {
  HWY_DYNAMIC_DISPATCH(MergeSplits)(params, group, partials);
}

}  // namespace mha::internal
#endif  // HWY_ONCE
