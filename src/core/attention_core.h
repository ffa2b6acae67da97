// RunAttentionCore: the one entry point into the flash kernel. The layer's flows
// (whole, chunked, with a contiguous or paged KV cache, packed batches) and the
// public ScaledDotProductAttention all describe their tensors and options as a
// CoreCall and run it here: the task planner (task_plan.h) cuts it into balanced
// tasks that run in parallel, and split key ranges are merged by their log-sum-exp.
#pragma once

#include <cstdint>
#include <vector>

#include "mha/rotary.hpp"
#include "src/cache/kv_pages.h"
#include "src/cache/page_source.h"
#include "src/core/task_plan.h"
#include "src/features/logit_features.h"
#include "src/masks/mask_plan.h"

namespace mha::internal {

// Rows of a [B, H, S, D] tensor in any layout: row r of head h of batch b starts at
// data + b * batch_stride + h * head_stride + r * row_stride. Packed batches (no
// padding) start batch b at row batch_rows[b] instead.
template <class T>
struct HeadRows {
  T* data = nullptr;
  int64_t batch_stride = 0, head_stride = 0, row_stride = 0;
  const int64_t* batch_rows = nullptr;
  T* Row(int64_t batch, int64_t head, int64_t row) const {
    const int64_t first =
        batch_rows ? batch_rows[batch] * row_stride : batch * batch_stride;
    return data + first + head * head_stride + row * row_stride;
  }
};

struct CoreCall {
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t query_len = 0, key_len = 0;  // of the whole problem (the longest sequence)
  // This call: queries [first_query, first_query + query_count) of batches
  // [batch_begin, batch_end); query/context Row(b, h, 0) is first_query's.
  int64_t batch_begin = 0, batch_end = 0, first_query = 0, query_count = 0;
  HeadRows<const float> query, key, value;
  HeadRows<float> context;
  float* probabilities = nullptr;  // [B, num_heads, Sq, Sk], or null
  float* logsumexp = nullptr;      // [B, num_heads, Sq], or null
  // A KV cache: the pages of (batch, KV head), one key tile each, and per-batch query
  // counts (packed batches: query_start_loc differences).
  PageSource cache_pages;
  int64_t cache_page_size = 0;
  const int64_t* query_counts = nullptr;
  // Logits: query scale (1 when folded into weights), soft-cap (0: none), ALiBi
  // slopes and sinks per query head (null: none).
  float query_scale = 1.0f, softcap = 0.0f;
  const float* alibi_slopes = nullptr;
  const float* sinks = nullptr;
  // Rotary embedding: query positions per query row (required with rotary), laid
  // out like the query rows ([B, query_len], or packed), and key positions
  // [B, key_len] (null: key j at j; unused with a cache, whose keys were rotated
  // when appended).
  const RotaryEmbedding* rotary = nullptr;
  const int64_t* query_positions = nullptr;
  const int64_t* key_positions = nullptr;

  // Soft-cap, ALiBi slopes and sinks from checked features (`logits` must outlive
  // the call).
  void SetLogits(const LogitFeatures& logits) {
    softcap = logits.softcap;
    alibi_slopes = logits.alibi_slopes.empty() ? nullptr : logits.alibi_slopes.data();
    sinks = logits.sinks.empty() ? nullptr : logits.sinks.data();
  }
};

// Per-call buffers, kept between calls: per-thread kernel scratch, the task plan and
// the partial results of split key ranges.
struct CoreWorkspace {
  std::vector<float> scratch, partials;
  TaskPlan plan;
};

void RunAttentionCore(const CoreCall& call, const MaskPlan& masks,
                      CoreWorkspace& workspace);

}  // namespace mha::internal
