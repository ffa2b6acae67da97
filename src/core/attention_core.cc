// RunAttentionCore: (batch, head) tasks for AttendHead.
#include "src/core/attention_core.h"

#include "src/attention/kv_cache_storage.h"
#include "src/kernels/attention_head.h"
#include "src/threading/parallel_for.h"

namespace mha::internal {
namespace {

HeadTask MakeTask(const CoreCall& call, int64_t batch, int64_t head,
                  int64_t heads_per_task) {
  const int64_t kv_head = head / (call.num_heads / call.num_kv_heads);
  HeadTask task;
  task.batch = batch;
  task.head = head;
  task.first_query = call.first_query;
  task.query_len = call.query_counts ? call.query_counts[batch] : call.query_count;
  task.key_len = call.key_len;
  task.head_dim = call.head_dim;
  task.query = call.query.Row(batch, head, 0);
  task.context = call.context.Row(batch, head, 0);
  task.query_stride = call.query.row_stride;
  task.context_stride = call.context.row_stride;
  const int64_t plane = (batch * call.num_heads + head) * call.query_len;
  if (call.logsumexp) task.logsumexp = call.logsumexp + plane + call.first_query;
  if (heads_per_task > 1) {  // rows are the group's heads, one position
    task.query_len *= heads_per_task;
    task.query_stride = call.query.head_stride;
    task.context_stride = call.context.head_stride;
    task.position_step = 0;
    task.head_step = 1;
    task.logsumexp_stride = call.query_len;
  }
  if (call.cache) {
    task.key_panel = call.cache->KeyPanel(batch, kv_head);
    task.value_panel = call.cache->ValuePanel(batch, kv_head);
    task.bf16_panels = call.cache->bf16;
  } else {
    task.key = call.key.Row(batch, kv_head, 0);
    task.value = call.value.Row(batch, kv_head, 0);
    task.key_stride = call.key.row_stride;
    task.value_stride = call.value.row_stride;
  }
  if (call.probabilities) {
    task.probabilities = call.probabilities + (plane + call.first_query) * call.key_len;
  }
  task.query_scale = call.query_scale;
  task.softcap = call.softcap;
  task.alibi_slopes = call.alibi_slopes;
  task.sinks = call.sinks;
  if (call.rotary) {
    task.rotary = call.rotary;
    task.query_positions = call.query_positions + batch * call.query_len;
    if (call.key_positions)
      task.key_positions = call.key_positions + batch * call.key_len;
  }
  return task;
}

}  // namespace

void RunAttentionCore(const CoreCall& call, const MaskPlan& masks,
                      std::vector<float>& scratch) {
  // Decoding one token with grouped KV heads: one task per (batch, KV group), its
  // query heads as the rows, so every K/V panel is streamed once, not once per head.
  const int64_t heads_per_task =
      call.cache && call.query_len == 1 ? call.num_heads / call.num_kv_heads : 1;
  const int64_t tasks_per_batch = call.num_heads / heads_per_task;
  const HeadScratch layout(call.key_len, call.head_dim, call.probabilities != nullptr,
                           !call.cache);
  const size_t floats = TeamSize() * layout.total_floats;
  if (scratch.size() < floats) scratch.resize(floats);
  ParallelFor((call.batch_end - call.batch_begin) * tasks_per_batch, scratch.data(),
              layout.total_floats, [&](int64_t index, float* thread_scratch) {
                const int64_t batch = call.batch_begin + index / tasks_per_batch;
                const int64_t head = index % tasks_per_batch * heads_per_task;
                AttendHead(MakeTask(call, batch, head, heads_per_task), masks, layout,
                           thread_scratch);
              });
}

}  // namespace mha::internal
