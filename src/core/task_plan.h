// The task planner: cuts a core call into AttendHead tasks that keep every thread
// busy. A task is every query head of one KV group (one head without grouped KV
// heads) over a tile of queries, its kernel rows interleaving the heads, so the
// group's K/V pages are read once per query step. The tile size is chosen by
// simulating the threads running the tasks longest first (as the dynamic schedule
// does), from a cost model: kernel rows x visible keys.
// Decoding tasks (one query position) over long key ranges are split at fixed
// multiples of 256 keys and their partial results merged by log-sum-exp
// (flash-decoding): the cuts depend on the shape alone, so every thread count gives
// the same bits. A task runs a run of consecutive splits of one KV group, as many
// runs as keep the threads busy: its pages stream on across the cuts. Tasks run
// longest first.
#pragma once

#include <cstdint>
#include <vector>

#include "src/features/mask_plan.h"
#include "src/kernel/attention_params.h"

namespace mha::internal {

// Splits of one task's key range, to be merged: splits x (rows x head_dim context,
// then rows log-sum-exps), from partials + offset.
struct SplitGroup {
  CoreTask whole;
  int64_t splits = 0, offset = 0;
};

struct TaskPlan {
  // unsplit and candidate: kept only to reuse their memory.
  std::vector<CoreTask> tasks, unsplit, candidate;
  std::vector<SplitGroup> groups;
  std::vector<int64_t> thread_loads;
  int64_t partial_floats = 0;
};

void PlanTasks(const AttentionParams& params, const MaskPlan& masks, int threads,
               TaskPlan& plan);

// The largest per-thread cost when `threads` threads take `tasks` (sorted longest
// first) in order, each task going to the least loaded thread; `loads` receives
// every thread's cost.
int64_t LongestFirstMakespan(const std::vector<CoreTask>& tasks, int threads,
                             std::vector<int64_t>& loads);

}  // namespace mha::internal
