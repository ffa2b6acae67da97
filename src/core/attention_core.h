// RunAttentionCore: the one entry point into the flash kernel. The layer's flows
// (whole, chunked, with a contiguous or paged KV cache, packed batches) and the
// public ScaledDotProductAttention all write their keys and values into pages
// (write_kv_pages.h), describe queries, pages and options as a CoreCall and run it
// here: the task planner (task_plan.h) cuts it into balanced tasks that run in
// parallel, and split key ranges are merged by their log-sum-exp.
#pragma once

#include <cstdint>
#include <vector>

#include "mha/rotary.hpp"
#include "src/cache/contiguous_pages.h"
#include "src/cache/kv_pages.h"
#include "src/cache/page_source.h"
#include "src/core/head_rows.h"
#include "src/core/task_plan.h"
#include "src/features/logit_features.h"
#include "src/masks/mask_plan.h"

namespace mha::internal {

struct CoreCall {
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t query_len = 0, key_len = 0;  // of the whole problem (the longest sequence)
  // This call: queries [first_query, first_query + query_count) of batches
  // [batch_begin, batch_end); query/context Row(b, h, 0) is first_query's.
  int64_t batch_begin = 0, batch_end = 0, first_query = 0, query_count = 0;
  HeadRows<const float> query;
  HeadRows<float> context;
  float* probabilities = nullptr;  // [B, num_heads, Sq, Sk], or null
  float* logsumexp = nullptr;      // [B, num_heads, Sq], or null
  // The pages of (batch, KV head), one key tile each, and per-batch query counts
  // (null: query_count; packed batches: query_start_loc differences).
  PageSource pages;
  int64_t page_size = 0;
  const int64_t* query_counts = nullptr;
  // Logits: query scale (1 when folded into weights), soft-cap (0: none), ALiBi
  // slopes and sinks per query head (null: none).
  float query_scale = 1.0f, softcap = 0.0f;
  const float* alibi_slopes = nullptr;
  const float* sinks = nullptr;
  // Rotary embedding of the queries (keys were rotated when written into pages):
  // positions per query row, laid out like the query rows ([B, query_len], or
  // packed).
  const RotaryEmbedding* rotary = nullptr;
  const int64_t* query_positions = nullptr;

  // Soft-cap, ALiBi slopes and sinks from checked features (`logits` must outlive
  // the call).
  void SetLogits(const LogitFeatures& logits) {
    softcap = logits.softcap;
    alibi_slopes = logits.alibi_slopes.empty() ? nullptr : logits.alibi_slopes.data();
    sinks = logits.sinks.empty() ? nullptr : logits.sinks.data();
  }
};

// Per-call buffers, kept between calls: per-thread kernel scratch, the task plan,
// the partial results of split key ranges, and the pages a call without a cache
// writes its keys and values into (with the scratch that rotates them).
struct CoreWorkspace {
  std::vector<float> scratch, partials, rotation_scratch;
  std::vector<int64_t> key_counts;
  TaskPlan plan;
  ContiguousPages kv_pages;
};

void RunAttentionCore(const CoreCall& call, const MaskPlan& masks,
                      CoreWorkspace& workspace);

}  // namespace mha::internal
