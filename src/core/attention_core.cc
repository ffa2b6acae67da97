// RunAttentionCore: planned tasks for AttendHead, then the merge of split key ranges.
#include "src/core/attention_core.h"

#include <cmath>
#include <limits>

#include "src/base/isa_cap.h"
#include "src/base/parallel_for.h"
#include "src/kernel/attention_head.h"

namespace mha::internal {
namespace {

// Combines the splits of one task: each split's context is normalised over its own
// keys, so the whole is their average weighted by exp(lse_split - lse).
void MergeSplits(const AttentionParams& params, const SplitGroup& group,
                 const float* partials) {
  const CoreTask& whole = group.whole;
  const int64_t rows = KernelRows(whole), value_head_dim = params.ValueHeadDim();
  const int64_t split_floats = SplitFloats(whole, value_head_dim);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t head = RowHead(whole, r), row = RowQuery(whole, r);
    float max = -std::numeric_limits<float>::infinity();
    bool nan = false;  // a split that met a non-finite input makes the row NaN
    for (int64_t s = 0; s < group.splits; ++s) {
      const float lse =
          partials[group.offset + s * split_floats + rows * value_head_dim + r];
      nan |= std::isnan(lse);
      max = std::max(max, lse);
    }
    if (nan) max = std::numeric_limits<float>::quiet_NaN();
    float* out = params.context.Row(whole.batch, head, row);
    std::fill(out, out + value_head_dim, nan ? max : 0.0f);
    float total = nan ? max : 0.0f;
    for (int64_t s = 0; s < group.splits && std::isfinite(max); ++s) {
      const float* split = partials + group.offset + s * split_floats;
      const float weight = std::exp(split[rows * value_head_dim + r] - max);
      total += weight;
      for (int64_t k = 0; k < value_head_dim; ++k)
        out[k] += weight * split[r * value_head_dim + k];
    }
    const float inverse = total == 0.0f ? 0.0f : 1.0f / total;
    for (int64_t k = 0; k < value_head_dim; ++k) out[k] *= inverse;
    if (params.logsumexp) {
      params.logsumexp[(whole.batch * params.num_heads + head) * params.query_len +
                       params.first_query + row] =
          total == 0.0f ? max : max + std::log(total);
    }
  }
}

}  // namespace

void RunAttentionCore(const AttentionParams& params, const MaskPlan& masks,
                      CoreWorkspace& workspace) {
  PlanTasks(params, masks, TeamSize(), workspace.plan);
  RunPlannedCore(params, masks, workspace.plan, workspace);
}

void RunPlannedCore(const AttentionParams& params, const MaskPlan& masks,
                    const TaskPlan& plan, CoreWorkspace& workspace) {
  ApplyIsaCap();
  const int threads = TeamSize();
  const HeadScratch layout(params.page_size, params.head_dim, params.ValueHeadDim(),
                           params.values_in_keys);
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
