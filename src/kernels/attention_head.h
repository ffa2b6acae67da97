// AttendHead: scaled dot-product attention for one (batch, head), dispatched at run
// time to the best SIMD target (Highway). Flash-style: query blocks meet key blocks
// through tile products and an online softmax, so no score matrix is ever built
// unless the caller asks for the attention weights. Every feature (rotary
// embeddings, soft-capping, ALiBi, sinks, sliding windows, masks, a KV cache's
// panels) is an option of this one kernel.
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
  // Rows of this head inside the projection matrices; row r (r = 0 is first_query
  // for the query, key 0 for keys and values) starts at pointer + r * stride and
  // holds head_dim floats.
  const float* query = nullptr;
  const float* key = nullptr;
  const float* value = nullptr;
  int64_t query_stride = 0, key_stride = 0, value_stride = 0;
  // Context rows are written the same way, into the merged [Sq, model_dim] matrix.
  float* context = nullptr;
  int64_t context_stride = 0;
  // Optional [query_len, Sk] attention probabilities of these queries.
  float* probabilities = nullptr;
  // Optional natural log of each row's softmax denominator; row r's at
  // logsumexp[r * logsumexp_stride].
  float* logsumexp = nullptr;
  int64_t logsumexp_stride = 1;
  // A KV cache's pages of this (sequence, KV head); the kernel's key tiles are its
  // pages. When set, the key/value rows above are not read and nothing is copied.
  const KvPages* cache = nullptr;
  // Only keys in [key_begin, key_end) are attended (a split of a long key range whose
  // partial results are merged by their log-sum-exp), on top of the masks.
  int64_t key_begin = 0, key_end = INT64_MAX;

  // Queries are multiplied by query_scale as they are staged (the core API's scale;
  // the layer folds it into its query weights and leaves 1).
  float query_scale = 1.0f;
  // Rotary embedding of queries and (when split here) keys: query index q sits at
  // query_positions[q], or query_position_offset + q; key j at key_positions[j], or j.
  const RotaryEmbedding* rotary = nullptr;
  const int64_t* query_positions = nullptr;
  int64_t query_position_offset = 0;
  const int64_t* key_positions = nullptr;
  // Logit options: soft-cap (0: none), ALiBi slopes and sink logits per head (null:
  // none), indexed by head.
  float softcap = 0.0f;
  const float* alibi_slopes = nullptr;
  const float* sinks = nullptr;
};

// Where AttendHead keeps its per-thread panels and tiles, in floats. Rows are padded
// to kPanelWidth floats (tile_sizes.h).
struct HeadScratch {
  // cache_page_size: the pages of the cache the tasks read (their key tiles); 0 when
  // AttendHead splits K and V into panels of its own from projection rows.
  HeadScratch(int64_t key_len, int64_t head_dim, int64_t cache_page_size = 0);

  size_t padded_keys, padded_head_dim;
  // Keys per tile, and per block of the K^T panel (a page with a cache): the same
  // with or without probabilities, so that both give the same bits.
  size_t key_block;
  // Offsets: the panels, the score tile, the context accumulators, the staged query
  // tile, rotated keys, and the running softmax max and sum per row.
  size_t key_panel, value_panel, scores, context, query_tile, rotated_keys, row_stats,
      total_floats;
};

void AttendHead(const HeadTask& task, const MaskPlan& masks, const HeadScratch& layout,
                float* scratch);

}  // namespace mha::internal
