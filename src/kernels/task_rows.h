// TaskRows: where one task's rows are (flash-attention's per-block info), derived once
// from the call's AttentionParams and the planner's CoreTask: its query, context,
// log-sum-exp and probability rows, and how positions and heads advance per row.
#pragma once

#include <cstdint>

#include "src/kernels/attention_params.h"

namespace mha::internal {

struct TaskRows {
  // partials: where tasks with a partial key range write (task.partial on).
  TaskRows(const AttentionParams& params, const CoreTask& task, float* partials);

  // Row r sits at position first_query + r * position_step in its sequence (as the
  // masks see it) and belongs to head task.head + r * head_step: position_step is 0
  // and head_step 1 when the rows are the query heads of one KV group at a single
  // position (decoding), so that each K/V page is streamed once for the group.
  int64_t first_query = 0, position_step = 1, head_step = 0;
  // Row r's query at query + r * query_stride, its context at context + r *
  // context_stride (head_dim floats each), its log-sum-exp at logsumexp[r *
  // logsumexp_stride] and its probabilities at probabilities + r * key_len.
  const float* query = nullptr;
  int64_t query_stride = 0;
  float* context = nullptr;
  int64_t context_stride = 0;
  float* logsumexp = nullptr;
  int64_t logsumexp_stride = 1;
  float* probabilities = nullptr;
  // Rotary position of the query at sequence position q: query_positions[q].
  const int64_t* query_positions = nullptr;
};

}  // namespace mha::internal
