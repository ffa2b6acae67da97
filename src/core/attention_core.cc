// RunAttentionCore: planned tasks for AttendHead, then the merge of split key ranges.
#include "src/core/attention_core.h"

#include <algorithm>

#include "src/base/isa_cap.h"
#include "src/base/parallel_for.h"
#include "src/core/merge_splits.h"
#include "src/kernel/attention_head.h"

namespace mha::internal {

void RunAttentionCore(const AttentionParams& params, const MaskPlan& masks,
                      CoreWorkspace& workspace) {
  PlanTasks(params, masks, TeamSize(), workspace.plan);
  RunPlannedCore(params, masks, workspace.plan, workspace);
}

void RunPlannedCore(const AttentionParams& params, const MaskPlan& masks,
                    const TaskPlan& plan, CoreWorkspace& workspace) {
  ApplyIsaCap();
  const int threads = TeamSize();
  int64_t step_rows = 0;
  for (const CoreTask& task : plan.tasks)
    step_rows = std::max(step_rows, KernelRows(task));
  const HeadScratch layout(params.page_size, params.head_dim, params.ValueHeadDim(),
                           params.values_in_keys, step_rows);
  const size_t floats = threads * layout.total_floats;
  if (workspace.scratch.size() < floats) workspace.scratch.resize(floats);
  if (workspace.partials.size() < static_cast<size_t>(plan.partial_floats)) {
    workspace.partials.resize(plan.partial_floats);
  }
  float* partials = workspace.partials.data();
  ParallelFor(static_cast<int64_t>(plan.tasks.size()), workspace.scratch.data(),
              layout.total_floats, [&](int64_t index, float* thread_scratch) {
                const CoreTask& task = plan.tasks[index];
                const KvPages pages = params.pages(
                    task.batch, task.head / (params.num_heads / params.num_kv_heads));
                AttendHead(params, task, pages, masks, layout, partials, thread_scratch);
              });
  ParallelFor(
      static_cast<int64_t>(plan.groups.size()), nullptr, 0,
      [&](int64_t index, float*) { MergeSplits(params, plan.groups[index], partials); });
}

}  // namespace mha::internal
