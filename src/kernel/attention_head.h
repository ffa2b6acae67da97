// AttendHead: scaled dot-product attention for one (batch, head), dispatched at run
// time to the best SIMD target (Highway). Flash-style: query steps meet key steps
// through tile products and an online softmax, so no score matrix is ever built
// unless the caller asks for the attention weights. Every feature (rotary
// embeddings, soft-capping, ALiBi, sinks, sliding windows, masks, the storage type
// of the pages) is an option of this one kernel. Keys and values always come from
// pages (src/kv/kv_pages.h): a cache's, or those a forward wrote its K/V into.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/features/mask_plan.h"
#include "src/kernel/attention_params.h"
#include "src/kernel/task_rows.h"
#include "src/kv/kv_pages.h"

namespace mha::internal {

// Where AttendHead keeps its per-thread tiles, in floats. Rows are padded to
// kPanelWidth floats (tile_sizes.h).
struct HeadScratch {
  // step_rows: the most kernel rows of any task of the call (a step takes no more).
  HeadScratch(int64_t page_size, int64_t head_dim, int64_t value_head_dim,
              bool values_in_keys, int64_t step_rows);

  size_t padded_head_dim, padded_value_head_dim;
  // Rows of each per-row tile: kQueryStep, or kMaxQueryStep where a task has more
  // rows (a step may then take them). Not fewer: tiles spaced for a decode step's 4
  // rows made int8 and q8_0 decode 2-8% slower (AMX Xeon, 6 interleaved rounds).
  size_t rows;
  // Keys per tile: as many whole pages as fit kKeyStep, or one larger page. Small
  // pages (a paged cache's 16 tokens) share one softmax step and its fixed costs.
  // The same with or without probabilities, so that both give the same bits.
  size_t key_step;
  // Offsets: the score tile, the context accumulators, the staged query tile, the
  // running softmax max and sum per row, (AVX512_BF16 dot products) the query tile
  // and the probabilities rounded to bfloat16, (int8 key products) the query tile's
  // 16-bit codes, (int8 value products) the score tile's, and (values_in_keys) one
  // page's V tile made from its K^T tile.
  size_t scores, context, query_tile, row_stats, query_bits, probability_bits,
      query_codes, probability_codes, value_tile, total_floats;
};

// Runs one task over its (batch, KV head)'s pages. A task with a partial key range
// writes its context and log-sum-exp at partials + task.partial, and of each further
// split (task.split_keys) SplitFloats after the previous one's.
void AttendHead(const AttentionParams& params, const CoreTask& task, const KvPages& pages,
                const MaskPlan& masks, const HeadScratch& layout, float* partials,
                float* scratch);

}  // namespace mha::internal
