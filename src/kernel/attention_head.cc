// HeadScratch's layout, and AttendHead: the flash kernel (attention_head-inl.h) of
// the pages' storage kind, which each kind's file compiles for every target.
#include "src/kernel/attention_head.h"

#include <algorithm>

#include "src/kv/kv_kind.h"

namespace mha::internal {

HeadScratch::HeadScratch(int64_t page_size, int64_t head_dim, int64_t value_head_dim,
                         bool values_in_keys)
    : padded_head_dim(RoundUp(static_cast<size_t>(head_dim), kPanelWidth)),
      padded_value_head_dim(RoundUp(static_cast<size_t>(value_head_dim), kPanelWidth)),
      key_step(static_cast<size_t>(
                   std::max<int64_t>(1, static_cast<int64_t>(kKeyStep) / page_size)) *
               static_cast<size_t>(page_size)) {
  scores = 0;
  context = scores + kMaxQueryStep * key_step;
  query_tile = context + kMaxQueryStep * padded_value_head_dim;
  row_stats = query_tile + kMaxQueryStep * padded_head_dim;
  // Two bfloat16 to a float; whole cache lines (16 floats).
  query_bits = row_stats + RoundUp(2 * kMaxQueryStep, kPanelWidth);
  probability_bits = query_bits + kMaxQueryStep * padded_head_dim / 2;
  query_codes = probability_bits + kMaxQueryStep * key_step / 2;  // 16-bit
  probability_codes = query_codes + kMaxQueryStep * padded_head_dim / 2;
  value_tile = probability_codes + kMaxQueryStep * key_step / 2;
  // A page of at most float-sized elements (paired rows: one more when odd).
  const size_t value_tile_floats =
      values_in_keys ? RoundUp(static_cast<size_t>(page_size) + 1, kPanelWidth) *
                           padded_value_head_dim
                     : 0;
  total_floats = value_tile + value_tile_floats;
}

void AttendHead(const AttentionParams& params, const CoreTask& task, const KvPages& pages,
                const MaskPlan& masks, const HeadScratch& layout, float* partials,
                float* scratch) {
  KindOf(pages.storage).attend(params, task, pages, masks, layout, partials, scratch);
}

}  // namespace mha::internal
