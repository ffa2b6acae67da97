// AttendHead, compiled once per SIMD target: split the head's K and V into panels,
// then for each block of queries walk the key blocks the masks leave open:
// scores = Q K^T, masks, online softmax, context += P V.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kernels/attention_head.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>

#include "hwy/highway.h"
#include "src/kernels/attention_head.h"
#include "src/kernels/head_layout-inl.h"
#include "src/kernels/softmax-inl.h"
#include "src/kernels/tile_matmul-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using mha::HWY_NAMESPACE::kNegInf;
using mha::HWY_NAMESPACE::MaskFrom;
using mha::HWY_NAMESPACE::OnlineSoftmaxBlock;
using mha::HWY_NAMESPACE::ScaleRow;
using mha::HWY_NAMESPACE::SplitHead;
using mha::HWY_NAMESPACE::SplitKeysTransposed;
using mha::HWY_NAMESPACE::TileMatMul;

// Rows [first_row, first_row + rows) of a task against every key they may see;
// panels of T (float, or bfloat16 from a bf16 KV cache).
template <typename T>
class QueryBlock {
 public:
  QueryBlock(const HeadTask& task, const MaskPlan& masks, const HeadScratch& layout,
             float* scratch, const T* keys, const T* values, int64_t first_row,
             size_t rows)
      : task_(task),
        masks_(masks),
        layout_(layout),
        first_row_(first_row),
        rows_(rows),
        keys_(keys),
        values_(values),
        scores_(scratch + layout.scores),
        context_(scratch + layout.context),
        maxes_(scratch + layout.row_stats),
        sums_(maxes_ + HeadScratch::kQueryBlock) {}

  template <class D>
  void Run(D d) {
    std::fill(context_, context_ + rows_ * layout_.padded_head_dim, 0.0f);
    std::fill(maxes_, maxes_ + rows_, kNegInf);
    std::fill(sums_, sums_ + rows_, 0.0f);
    // Causal ends grow with the query, so the block's last row sees the most keys.
    const int64_t key_limit = masks_.KeyEnd(task_.batch, Absolute(rows_ - 1));
    for (int64_t first_key = 0; first_key < key_limit;
         first_key += static_cast<int64_t>(layout_.key_block)) {
      KeyBlock(d, first_key, std::min<int64_t>(layout_.key_block, key_limit - first_key));
    }
    Finish(key_limit);
  }

 private:
  // Position in the sequence of the block's row i, as the masks see it.
  int64_t Absolute(size_t i) const {
    return task_.first_query +
           (first_row_ + static_cast<int64_t>(i)) * task_.position_step;
  }

  template <class D>
  void KeyBlock(D d, int64_t first_key, int64_t count) {
    const size_t padded = RoundUp(static_cast<size_t>(count), HeadScratch::kPanelAlign);
    const size_t head_dim = static_cast<size_t>(task_.head_dim);
    const size_t dim = layout_.padded_head_dim, stride = layout_.key_block;
    TileMatMul(d, rows_, padded, head_dim, task_.query + first_row_ * task_.query_stride,
               task_.query_stride, keys_ + first_key * head_dim, stride, scores_, stride,
               /*accumulate=*/false);
    for (size_t i = 0; i < rows_; ++i) {
      float* row = scores_ + i * stride;
      const int64_t query = Absolute(i);
      const int64_t open =
          std::clamp<int64_t>(masks_.KeyEnd(task_.batch, query) - first_key, 0, count);
      if (masks_.has_tensor_masks()) {
        masks_.AddTensorMasks(task_.batch, task_.head, query, first_key, open, row);
      }
      MaskFrom(d, row, static_cast<size_t>(open), padded);
      const bool has_context = sums_[i] > 0.0f;
      const float rescale = OnlineSoftmaxBlock(d, row, padded, maxes_[i], sums_[i]);
      if (has_context && rescale != 1.0f) ScaleRow(d, context_ + i * dim, dim, rescale);
    }
    TileMatMul(d, rows_, dim, padded, scores_, stride, values_ + first_key * dim, dim,
               context_, dim, /*accumulate=*/true);
  }

  // Normalises and writes the context rows (the head merge) and the probabilities.
  void Finish(int64_t key_limit) {
    for (size_t i = 0; i < rows_; ++i) {
      const float sum = sums_[i];
      const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;  // fully masked rows: zeros
      const int64_t row_index = first_row_ + static_cast<int64_t>(i);
      float* out = task_.context + row_index * task_.context_stride;
      const float* acc = context_ + i * layout_.padded_head_dim;
      for (int64_t k = 0; k < task_.head_dim; ++k) out[k] = acc[k] * inverse;
      if (!task_.probabilities) continue;
      // With probabilities the single key block holds the whole row.
      float* probs = task_.probabilities + row_index * task_.key_len;
      const float* row = scores_ + i * layout_.key_block;
      for (int64_t k = 0; k < task_.key_len; ++k) {
        probs[k] = k < key_limit ? row[k] * inverse : 0.0f;
      }
    }
  }

  const HeadTask& task_;
  const MaskPlan& masks_;
  const HeadScratch& layout_;
  const int64_t first_row_;
  const size_t rows_;
  const T* keys_;  // key-blocked K^T panel
  const T* values_;
  float* scores_;
  float* context_;
  float* maxes_;  // running softmax max and sum per row
  float* sums_;
};

template <class D, typename T>
void AttendRows(D d, const HeadTask& task, const MaskPlan& masks,
                const HeadScratch& layout, float* scratch, const T* keys,
                const T* values) {
  for (int64_t first = 0; first < task.query_len;
       first += static_cast<int64_t>(HeadScratch::kQueryBlock)) {
    const size_t rows =
        std::min<size_t>(HeadScratch::kQueryBlock, task.query_len - first);
    QueryBlock<T>(task, masks, layout, scratch, keys, values, first, rows).Run(d);
  }
}

void AttendHead(const HeadTask& task, const MaskPlan& masks, const HeadScratch& layout,
                float* scratch) {
  const hn::ScalableTag<float> d;
  if (task.key_panel && task.bf16_panels) {
    return AttendRows(d, task, masks, layout, scratch,
                      static_cast<const hwy::bfloat16_t*>(task.key_panel),
                      static_cast<const hwy::bfloat16_t*>(task.value_panel));
  }
  if (task.key_panel) {
    return AttendRows(d, task, masks, layout, scratch,
                      static_cast<const float*>(task.key_panel),
                      static_cast<const float*>(task.value_panel));
  }
  // Keys no query of the task can see (causal, lengths) are never copied.
  const size_t count = static_cast<size_t>(masks.KeyEnd(
      task.batch, task.first_query + (task.query_len - 1) * task.position_step));
  const size_t padded = RoundUp(count, HeadScratch::kPanelAlign);
  const size_t head_dim = static_cast<size_t>(task.head_dim);
  float* keys = scratch + layout.key_panel;
  float* values = scratch + layout.value_panel;
  SplitKeysTransposed(d, task.key, task.key_stride, 0, count, padded, head_dim, keys,
                      layout.key_block);
  SplitHead(d, task.value, task.value_stride, count, padded, head_dim, values,
            layout.padded_head_dim);
  AttendRows(d, task, masks, layout, scratch, keys, values);
}

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mha::internal {

HWY_EXPORT(AttendHead);

HeadScratch::HeadScratch(int64_t key_len, int64_t head_dim, bool with_probabilities,
                         bool split_panels)
    : padded_keys(RoundUp(static_cast<size_t>(key_len), kPanelAlign)),
      padded_head_dim(RoundUp(static_cast<size_t>(head_dim), kPanelAlign)),
      key_block(with_probabilities ? padded_keys
                : split_panels     ? std::min(kKeyBlock, padded_keys)
                                   : kKeyBlock) {
  // The K^T panel holds whole key blocks.
  const size_t panel_keys = split_panels ? RoundUp(padded_keys, key_block) : 0;
  key_panel = 0;
  value_panel = key_panel + static_cast<size_t>(head_dim) * panel_keys;
  scores = value_panel + panel_keys * padded_head_dim;
  context = scores + kQueryBlock * key_block;
  row_stats = context + kQueryBlock * padded_head_dim;
  total_floats = row_stats + 2 * kQueryBlock;
}

void AttendHead(const HeadTask& task, const MaskPlan& masks, const HeadScratch& layout,
                float* scratch) {
  HWY_DYNAMIC_DISPATCH(AttendHead)(task, masks, layout, scratch);
}

}  // namespace mha::internal
#endif  // HWY_ONCE
