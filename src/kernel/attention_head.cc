// HeadScratch's layout, and AttendHead: the flash kernel (attention_head-inl.h) of
// the pages' storage kind, which each kind's file compiles for every target.
#include "src/kernel/attention_head.h"

#include <algorithm>

#include "src/kv/kv_kind.h"

namespace mha::internal {

HeadScratch::HeadScratch(int64_t page_size, int64_t head_dim, int64_t value_head_dim,
                         bool values_in_keys, int64_t step_rows)
    : padded_head_dim(RoundUp(static_cast<size_t>(head_dim), kPanelWidth)),
      padded_value_head_dim(RoundUp(static_cast<size_t>(value_head_dim), kPanelWidth)),
      rows(step_rows <= static_cast<int64_t>(kQueryStep) ? kQueryStep : kMaxQueryStep),
      key_step(static_cast<size_t>(
                   std::max<int64_t>(1, static_cast<int64_t>(kKeyStep) / page_size)) *
               static_cast<size_t>(page_size)) {
  // Each tile from a cache line (16 floats), whatever the rows; bfloat16 and 16-bit
  // codes two to a float.
  const auto after = [](size_t offset, size_t floats) {
    return offset + RoundUp(floats, kPanelWidth);
  };
  scores = 0;
  context = after(scores, rows * key_step);
  query_tile = after(context, rows * padded_value_head_dim);
  row_stats = after(query_tile, rows * padded_head_dim);
  query_bits = after(row_stats, 2 * rows);
  probability_bits = after(query_bits, (rows * padded_head_dim + 1) / 2);
  query_codes = after(probability_bits, (rows * key_step + 1) / 2);
  probability_codes = after(query_codes, (rows * padded_head_dim + 1) / 2);
  value_tile = after(probability_codes, (rows * key_step + 1) / 2);
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
