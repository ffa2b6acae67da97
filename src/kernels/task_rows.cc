// TaskRows: a task's row addresses from the params, a split's into the partials.
#include "src/kernels/task_rows.h"

namespace mha::internal {

TaskRows::TaskRows(const AttentionParams& params, const CoreTask& task, float* partials)
    : first_query(params.first_query + task.first_row),
      query(params.query.Row(task.batch, task.head, task.first_row)),
      query_stride(params.query.row_stride),
      context(params.context.Row(task.batch, task.head, task.first_row)),
      context_stride(params.context.row_stride) {
  const int64_t plane = (task.batch * params.num_heads + task.head) * params.query_len;
  if (params.logsumexp) logsumexp = params.logsumexp + plane + first_query;
  if (params.probabilities) {
    probabilities = params.probabilities + (plane + first_query) * params.key_len;
  }
  if (task.heads > 1) {  // rows are the group's heads, one position
    position_step = 0;
    head_step = 1;
    query_stride = params.query.head_stride;
    context_stride = params.context.head_stride;
    logsumexp_stride = params.query_len;
  }
  if (params.rotary) {  // laid out like the query rows: [B, query_len], or packed
    const int64_t batch = task.batch;
    query_positions =
        params.query_positions + (params.query.batch_rows ? params.query.batch_rows[batch]
                                                          : batch * params.query_len);
  }
  if (task.partial >= 0) {  // one split of the keys: partial results, merged later
    context = partials + task.partial;
    context_stride = params.head_dim;
    logsumexp = context + KernelRows(task) * params.head_dim;
    logsumexp_stride = 1;
  }
}

}  // namespace mha::internal
