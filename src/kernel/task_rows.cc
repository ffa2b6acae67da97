// TaskRows: a task's row addresses from the params, a split's into the partials.
#include "src/kernel/task_rows.h"

namespace mha::internal {

TaskRows::TaskRows(const AttentionParams& params, const CoreTask& task, float* partials)
    : heads_(task.heads),
      rows_(task.rows),
      first_head_(task.head),
      first_query_(params.first_query + task.first_row),
      query_(params.query.Row(task.batch, task.head, task.first_row)),
      context_(params.context.Row(task.batch, task.head, task.first_row)),
      query_steps_{params.query.row_stride, params.query.head_stride},
      context_steps_{params.context.row_stride, params.context.head_stride} {
  const int64_t plane = (task.batch * params.num_heads + task.head) * params.query_len;
  const int64_t head_plane = params.query_len;  // [B, num_heads, Sq] planes
  if (params.logsumexp) {
    logsumexp_ = params.logsumexp + plane + first_query_;
    logsumexp_steps_ = {1, head_plane};
  }
  if (params.probabilities) {
    probabilities_ = params.probabilities + (plane + first_query_) * params.key_len;
    probability_steps_ = {params.key_len, head_plane * params.key_len};
  }
  if (params.rotary) {  // laid out like the query rows: [B, query_len], or packed
    const int64_t batch = task.batch;
    query_positions_ =
        params.query_positions + (params.query.batch_rows ? params.query.batch_rows[batch]
                                                          : batch * params.query_len);
  }
  if (task.partial >= 0) {  // one split of the keys: partial results, merged later
    // Kernel rows in order: context rows of value_head_dim floats, then their
    // log-sum-exps.
    const int64_t value_head_dim = params.ValueHeadDim();
    context_ = partials + task.partial;
    context_steps_ = {task.heads * value_head_dim, value_head_dim};
    logsumexp_ = context_ + KernelRows(task) * value_head_dim;
    logsumexp_steps_ = {task.heads, 1};
  }
}

}  // namespace mha::internal
