// AttentionParams and CoreTask: everything the attention kernel is told, in the
// spirit of flash-attention's params struct plus per-block info. The attention core
// fills one AttentionParams per call (the layer's flows and the public API alike);
// the task planner cuts it into CoreTasks; AttendHead reads both, nothing copied.
#pragma once

#include <cstdint>

#include "mha/rotary.hpp"
#include "src/features/logit_features.h"
#include "src/kv/head_rows.h"
#include "src/kv/page_source.h"
#include "src/simd/head_norm.h"

namespace mha::internal {

struct AttentionParams {
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  // Width of the values and the context rows (0: head_dim). MLA's absorbed form
  // reads 512-wide latents as values against 576-wide keys.
  int64_t value_head_dim = 0;
  int64_t ValueHeadDim() const { return value_head_dim > 0 ? value_head_dim : head_dim; }
  // The pages hold no V: values are the value_head_dim key elements from
  // value_offset on (MLA's latent after its rotary part, kv_pages.h), as every page's
  // values_in_keys says. value_offset: a multiple of kPanelWidth.
  bool values_in_keys = false;
  int64_t value_offset = 0;
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
  // Llama 4's query temperature by position (src/features/temperature.h);
  // temperature_floor_scale 0: none.
  float temperature_floor_scale = 0.0f, temperature_attn_scale = 0.0f;
  const float* alibi_slopes = nullptr;
  const float* sinks = nullptr;
  // Rotary embedding of the queries (keys were rotated when written into pages):
  // positions per query row, laid out like the query rows ([B, query_len], or
  // packed).
  const RotaryEmbedding* rotary = nullptr;
  const int64_t* query_positions = nullptr;
  // QK-norm of each query row before its rotation (keys were normalised when
  // written).
  HeadNorm query_norm;
  // Decoding rows over long key ranges are split and merged (flash-decoding,
  // task_plan.h). Batch-invariant calls keep them whole: a row must give the bits it
  // gives inside a prefill chunk, which is never split.
  bool split_decode_keys = true;
};

// One task: a tile of queries of `heads` query heads (one, or every query head of a
// KV group, so that the group's K/V pages are read once per tile) over a range of
// keys. Its kernel rows interleave the heads: row r is query first_row + r / heads of
// head head + r % heads.
struct CoreTask {
  int64_t batch = 0, head = 0;
  int64_t heads = 1;
  int64_t first_row = 0, rows = 0;  // of the batch's queries in the call
  int64_t key_begin = 0, key_end = INT64_MAX;
  // Split key ranges: partial results at partials + partial (-1: none), merged with
  // the other splits of the same group. A task may run several consecutive splits:
  // its keys are cut at multiples of split_keys, each split's partial results
  // following the previous one's (SplitFloats apart).
  int64_t partial = -1, group = -1, split_keys = 0;
  // The row's sink logit (if any) counts once: in its group's first split.
  bool sink = true;
  int64_t cost = 0;  // multiply-adds, roughly: the order tasks are run in
};

// Rows AttendHead sees for a task: every head's queries.
inline int64_t KernelRows(const CoreTask& task) { return task.heads * task.rows; }
// Floats of one split's partial results: each kernel row's context, then each row's
// log-sum-exp.
inline int64_t SplitFloats(const CoreTask& task, int64_t value_head_dim) {
  return KernelRows(task) * (value_head_dim + 1);
}
// Kernel row r's head, and its query among the batch's queries in the call.
inline int64_t RowHead(const CoreTask& task, int64_t r) {
  return task.head + r % task.heads;
}
inline int64_t RowQuery(const CoreTask& task, int64_t r) {
  return task.first_row + r / task.heads;
}

// The kernel's soft-cap, ALiBi slopes and sinks from checked features (`logits` must
// outlive the call).
inline void SetLogits(const LogitFeatures& logits, AttentionParams& params) {
  params.softcap = logits.softcap;
  params.temperature_floor_scale = logits.temperature_floor_scale;
  params.temperature_attn_scale = logits.temperature_attn_scale;
  params.alibi_slopes =
      logits.alibi_slopes.empty() ? nullptr : logits.alibi_slopes.data();
  params.sinks = logits.sinks.empty() ? nullptr : logits.sinks.data();
}

}  // namespace mha::internal
