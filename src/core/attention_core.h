// RunAttentionCore: the one entry point into the flash kernel. The layer's flows
// (whole, chunked, with a contiguous or paged KV cache, packed batches) and the
// public ScaledDotProductAttention all write their keys and values into pages
// (write_kv_pages.h), describe queries, pages and options as AttentionParams and run it
// here: the task planner (task_plan.h) cuts it into balanced tasks that run in
// parallel, and split key ranges are merged by their log-sum-exp.
#pragma once

#include <cstdint>
#include <vector>

#include "src/base/aligned_vector.h"
#include "src/core/task_plan.h"
#include "src/features/mask_plan.h"
#include "src/kernel/attention_params.h"
#include "src/kv/contiguous_pages.h"

namespace mha::internal {

// Per-call buffers, kept between calls: per-thread kernel scratch, the task plan,
// the partial results of split key ranges, and the pages a call without a cache
// writes its keys and values into (with the scratch that rotates them).
struct CoreWorkspace {
  AlignedVector<float> scratch;  // per thread, each a whole number of cache lines
  std::vector<float> partials, rotation_scratch;
  std::vector<int64_t> key_counts;
  TaskPlan plan;
  ContiguousPages kv_pages;
};

// Plans the call (into workspace.plan) and runs it.
void RunAttentionCore(const AttentionParams& params, const MaskPlan& masks,
                      CoreWorkspace& workspace);
// Runs a plan PlanTasks made for params and masks on this thread count (a
// PackedStep's, shared by its layers).
void RunPlannedCore(const AttentionParams& params, const MaskPlan& masks,
                    const TaskPlan& plan, CoreWorkspace& workspace);

}  // namespace mha::internal
