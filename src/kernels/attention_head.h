// AttendHead: scaled dot-product attention for one (batch, head), dispatched at run
// time to the best SIMD target (Highway). Flash-style: query blocks meet key blocks
// through tile products and an online softmax, so no score matrix is ever built
// unless the caller asks for the attention weights. Every feature (rotary
// embeddings, soft-capping, ALiBi, sinks, sliding windows, masks, the storage type
// of the pages) is an option of this one kernel. Keys and values always come from
// pages (src/cache/kv_pages.h): a cache's, or those a forward wrote its K/V into.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mha/rotary.hpp"
#include "src/cache/kv_pages.h"
#include "src/masks/mask_plan.h"

namespace mha::internal {

struct HeadTask {
  int64_t batch = 0, head = 0;
  // Queries first_query .. first_query + query_len - 1 of the sequence (the masks
  // see these absolute positions); key_len is the whole key sequence.
  int64_t first_query = 0, query_len = 0, key_len = 0, head_dim = 0;
  // Positions advance by this per query row: 1 for a sequence of tokens; 0 when the
  // rows are the query heads of one KV group at a single position (decoding), so that
  // each K/V panel is streamed once for the whole group. Heads advance by head_step
  // per row (0, or 1 in that case).
  int64_t position_step = 1, head_step = 0;
  // Query rows of this head; row r (r = 0 is first_query) starts at
  // query + r * query_stride and holds head_dim floats.
  const float* query = nullptr;
  int64_t query_stride = 0;
  // Context rows are written the same way, into the merged [Sq, model_dim] matrix.
  float* context = nullptr;
  int64_t context_stride = 0;
  // Optional [query_len, Sk] attention probabilities of these queries.
  float* probabilities = nullptr;
  // Optional natural log of each row's softmax denominator; row r's at
  // logsumexp[r * logsumexp_stride].
  float* logsumexp = nullptr;
  int64_t logsumexp_stride = 1;
  // The pages of this (sequence, KV head): the kernel's key tiles.
  const KvPages* pages = nullptr;
  // Only keys in [key_begin, key_end) are attended (a split of a long key range whose
  // partial results are merged by their log-sum-exp), on top of the masks.
  int64_t key_begin = 0, key_end = INT64_MAX;

  // Queries are multiplied by query_scale as they are staged (the core API's scale;
  // the layer folds it into its query weights and leaves 1).
  float query_scale = 1.0f;
  // Rotary embedding of the queries (keys were rotated when written into pages):
  // query index q sits at query_positions[q], or query_position_offset + q.
  const RotaryEmbedding* rotary = nullptr;
  const int64_t* query_positions = nullptr;
  int64_t query_position_offset = 0;
  // Logit options: soft-cap (0: none), ALiBi slopes and sink logits per head (null:
  // none), indexed by head.
  float softcap = 0.0f;
  const float* alibi_slopes = nullptr;
  const float* sinks = nullptr;
};

// Where AttendHead keeps its per-thread tiles, in floats. Rows are padded to
// kPanelWidth floats (tile_sizes.h).
struct HeadScratch {
  HeadScratch(int64_t page_size, int64_t head_dim);

  size_t padded_head_dim;
  // Keys per tile: a page, with or without probabilities, so that both give the
  // same bits.
  size_t key_block;
  // Offsets: the score tile, the context accumulators, the staged query tile, and
  // the running softmax max and sum per row.
  size_t scores, context, query_tile, row_stats, total_floats;
};

void AttendHead(const HeadTask& task, const MaskPlan& masks, const HeadScratch& layout,
                float* scratch);

}  // namespace mha::internal
