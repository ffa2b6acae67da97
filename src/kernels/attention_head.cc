// AttendHead, compiled once per SIMD target. For each query row: scores against the
// keys the masks leave open, tensor masks added, softmax, then the probability-
// weighted sum of value rows.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kernels/attention_head.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>

#include "hwy/contrib/dot/dot-inl.h"
#include "hwy/highway.h"
#include "src/kernels/attention_head.h"
#include "src/kernels/head_layout-inl.h"
#include "src/kernels/softmax-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using mha::HWY_NAMESPACE::SoftmaxRow;
using mha::HWY_NAMESPACE::SplitHead;

// accumulator[0, n) += weight * row[0, n)
template <class D>
HWY_INLINE void AddScaledRow(D d, float weight, const float* HWY_RESTRICT row,
                             float* HWY_RESTRICT accumulator, size_t n) {
  const size_t lanes = hn::Lanes(d);
  const auto w = hn::Set(d, weight);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::MulAdd(w, hn::LoadU(d, row + i), hn::LoadU(d, accumulator + i)), d,
               accumulator + i);
  }
  for (; i < n; ++i) accumulator[i] += weight * row[i];
}

// One query row: probabilities into `scores`, context into `context`.
template <class D>
HWY_INLINE void AttendRow(D d, const HeadTask& task, const MaskPlan& masks, int64_t query,
                          const float* keys, const float* values, float* scores) {
  const size_t head_dim = static_cast<size_t>(task.head_dim);
  const float* q = task.query + query * task.query_stride;
  float* context = task.context + query * task.context_stride;
  const int64_t key_end = masks.KeyEnd(task.batch, query);

  for (int64_t key = 0; key < key_end; ++key) {
    scores[key] = hn::Dot::Compute<0>(d, q, keys + key * task.head_dim, head_dim);
  }
  if (masks.has_tensor_masks()) {
    masks.AddTensorMasks(task.batch, task.head, query, key_end, scores);
  }
  const bool attends = key_end > 0 && SoftmaxRow(d, scores, static_cast<size_t>(key_end));

  std::fill(context, context + head_dim, 0.0f);
  if (attends) {
    for (int64_t key = 0; key < key_end; ++key) {
      AddScaledRow(d, scores[key], values + key * task.head_dim, context, head_dim);
    }
  }
  if (task.probabilities) {
    float* row = task.probabilities + query * task.key_len;
    std::copy(scores, scores + key_end, row);
    std::fill(row + key_end, row + task.key_len, 0.0f);
  }
}

void AttendHead(const HeadTask& task, const MaskPlan& masks, float* scratch) {
  const hn::ScalableTag<float> d;
  float* keys = scratch;
  float* values = keys + task.key_len * task.head_dim;
  float* scores = values + task.key_len * task.head_dim;
  SplitHead(d, task.key, task.key_stride, task.key_len, task.head_dim, keys);
  SplitHead(d, task.value, task.value_stride, task.key_len, task.head_dim, values);
  for (int64_t query = 0; query < task.query_len; ++query) {
    AttendRow(d, task, masks, query, keys, values, scores);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mha::internal {

HWY_EXPORT(AttendHead);

size_t AttendHeadScratchFloats(int64_t key_len, int64_t head_dim) {
  return static_cast<size_t>(key_len * (2 * head_dim + 1));
}

void AttendHead(const HeadTask& task, const MaskPlan& masks, float* scratch) {
  HWY_DYNAMIC_DISPATCH(AttendHead)(task, masks, scratch);
}

}  // namespace mha::internal
#endif  // HWY_ONCE
