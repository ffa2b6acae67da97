// RunAttentionCore: planned tasks for AttendHead, then the merge of split key ranges.
#include "src/core/attention_core.h"

#include <cmath>
#include <limits>

#include "src/kernels/attention_head.h"
#include "src/platform/isa_cap.h"
#include "src/threading/parallel_for.h"

namespace mha::internal {
namespace {

// Where a task's query rows start among a batch's rows (absolute index, as the
// positions of [B, query_len] or packed tensors are laid out).
const int64_t* BatchPositions(const CoreCall& call, const int64_t* positions,
                              int64_t batch) {
  return positions +
         (call.query.batch_rows ? call.query.batch_rows[batch] : batch * call.query_len);
}

HeadTask MakeTask(const CoreCall& call, const TaskPlan& plan, const CoreTask& t,
                  float* partials) {
  const int64_t batch = t.batch, head = t.head;
  HeadTask task;
  task.batch = batch;
  task.head = head;
  task.first_query = call.first_query + t.first_row;
  task.query_len = KernelRows(t);
  task.key_len = call.key_len;
  task.head_dim = call.head_dim;
  task.query = call.query.Row(batch, head, t.first_row);
  task.context = call.context.Row(batch, head, t.first_row);
  task.query_stride = call.query.row_stride;
  task.context_stride = call.context.row_stride;
  const int64_t plane = (batch * call.num_heads + head) * call.query_len;
  if (call.logsumexp) task.logsumexp = call.logsumexp + plane + task.first_query;
  if (t.heads > 1) {  // rows are the group's heads, one position
    task.query_stride = call.query.head_stride;
    task.context_stride = call.context.head_stride;
    task.position_step = 0;
    task.head_step = 1;
    task.logsumexp_stride = call.query_len;
  }
  if (call.probabilities) {
    task.probabilities = call.probabilities + (plane + task.first_query) * call.key_len;
  }
  task.query_scale = call.query_scale;
  task.softcap = call.softcap;
  task.alibi_slopes = call.alibi_slopes;
  task.sinks = call.sinks;
  if (call.rotary) {
    task.rotary = call.rotary;
    task.query_positions = BatchPositions(call, call.query_positions, batch);
  }
  if (t.partial >= 0) {  // one split of the keys: partial results, merged later
    task.key_begin = t.key_begin;
    task.key_end = t.key_end;
    task.context = partials + t.partial;
    task.context_stride = call.head_dim;
    task.logsumexp = task.context + KernelRows(t) * call.head_dim;
    task.logsumexp_stride = 1;
    // The sink belongs to every row exactly once: to its group's first split, which
    // need not start at key 0 (a sliding window moves past it).
    if (t.partial != plan.groups[t.group].offset) task.sinks = nullptr;
  }
  return task;
}

// Combines the splits of one task: each split's context is normalised over its own
// keys, so the whole is their average weighted by exp(lse_split - lse).
void MergeSplits(const CoreCall& call, const SplitGroup& group, const float* partials) {
  const CoreTask& whole = group.whole;
  const int64_t rows = KernelRows(whole), head_dim = call.head_dim;
  const int64_t split_floats = rows * (head_dim + 1);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t head = whole.head + (whole.heads > 1 ? r : 0);
    const int64_t row = whole.first_row + (whole.heads > 1 ? 0 : r);
    float max = -std::numeric_limits<float>::infinity();
    bool nan = false;  // a split that met a non-finite input makes the row NaN
    for (int64_t s = 0; s < group.splits; ++s) {
      const float lse = partials[group.offset + s * split_floats + rows * head_dim + r];
      nan |= std::isnan(lse);
      max = std::max(max, lse);
    }
    if (nan) max = std::numeric_limits<float>::quiet_NaN();
    float* out = call.context.Row(whole.batch, head, row);
    std::fill(out, out + head_dim, nan ? max : 0.0f);
    float total = nan ? max : 0.0f;
    for (int64_t s = 0; s < group.splits && std::isfinite(max); ++s) {
      const float* split = partials + group.offset + s * split_floats;
      const float weight = std::exp(split[rows * head_dim + r] - max);
      total += weight;
      for (int64_t k = 0; k < head_dim; ++k) out[k] += weight * split[r * head_dim + k];
    }
    const float inverse = total == 0.0f ? 0.0f : 1.0f / total;
    for (int64_t k = 0; k < head_dim; ++k) out[k] *= inverse;
    if (call.logsumexp) {
      call.logsumexp[(whole.batch * call.num_heads + head) * call.query_len +
                     call.first_query + row] =
          total == 0.0f ? max : max + std::log(total);
    }
  }
}

}  // namespace

void RunAttentionCore(const CoreCall& call, const MaskPlan& masks,
                      CoreWorkspace& workspace) {
  ApplyIsaCap();
  const int threads = TeamSize();
  TaskPlan& plan = workspace.plan;
  PlanTasks(call, masks, threads, plan);
  const HeadScratch layout(call.page_size, call.head_dim);
  const size_t floats = threads * layout.total_floats;
  if (workspace.scratch.size() < floats) workspace.scratch.resize(floats);
  if (workspace.partials.size() < static_cast<size_t>(plan.partial_floats)) {
    workspace.partials.resize(plan.partial_floats);
  }
  float* partials = workspace.partials.data();
  ParallelFor(
      static_cast<int64_t>(plan.tasks.size()), workspace.scratch.data(),
      layout.total_floats,
      [&](int64_t index, float* thread_scratch) {
        const CoreTask& t = plan.tasks[index];
        HeadTask task = MakeTask(call, plan, t, partials);
        const KvPages pages =
            call.pages(t.batch, t.head / (call.num_heads / call.num_kv_heads));
        task.pages = &pages;
        AttendHead(task, masks, layout, thread_scratch);
      },
      Schedule::kDynamic);
  ParallelFor(
      static_cast<int64_t>(plan.groups.size()), nullptr, 0,
      [&](int64_t index, float*) { MergeSplits(call, plan.groups[index], partials); });
}

}  // namespace mha::internal
