// PlanTasks: query tiles, key splits and the longest-first order.
#include "src/core/task_plan.h"

#include <algorithm>
#include <tuple>

#include "src/core/attention_core.h"
#include "src/kernels/attention_head.h"

namespace mha::internal {
namespace {

// A cache's queries are cut into tiles of this many rows (two kernel query blocks),
// so a long prefill chunk spreads over the threads.
constexpr int64_t kTaskRows = 2 * HeadScratch::kQueryBlock;
// Tasks per thread below which long key ranges are split, and the fewest keys a
// split may have (a split costs a merge of its context rows).
constexpr int64_t kTasksPerThread = 4;
constexpr int64_t kMinSplitKeys = 512;

void AddTasks(const CoreCall& call, const MaskPlan& masks, int64_t batch,
              std::vector<CoreTask>& tasks) {
  const int64_t count = call.query_counts ? call.query_counts[batch] : call.query_count;
  if (count == 0) return;
  const bool cache = call.cache_page_size > 0;
  const int64_t heads = cache && count == 1 ? call.num_heads / call.num_kv_heads : 1;
  const int64_t tile = cache ? kTaskRows : count;  // without a cache tasks split panels
  for (int64_t head = 0; head < call.num_heads; head += heads) {
    for (int64_t first = 0; first < count; first += tile) {
      CoreTask task;
      task.batch = batch;
      task.head = head;
      task.heads = heads;
      task.first_row = first;
      task.rows = std::min(tile, count - first);
      const int64_t key_begin = masks.KeyBegin(batch, call.first_query + first);
      const int64_t key_end =
          masks.KeyEnd(batch, call.first_query + first + task.rows - 1);
      task.cost = KernelRows(task) * std::max<int64_t>(1, key_end - key_begin);
      tasks.push_back(task);
    }
  }
}

// Splits a task's keys into `splits` page-aligned ranges of partial results.
void Split(const CoreTask& whole, int64_t key_begin, int64_t key_end, int64_t splits,
           int64_t page_size, int64_t head_dim, TaskPlan& plan,
           std::vector<CoreTask>& out) {
  SplitGroup group{whole, 0, plan.partial_floats};
  // Boundaries on pages, so no page is read by two splits.
  const int64_t first_page = key_begin / page_size * page_size;
  const int64_t per_split = (key_end - first_page + splits - 1) / splits;
  const int64_t step = (per_split + page_size - 1) / page_size * page_size;
  const int64_t rows = KernelRows(whole);
  for (int64_t begin = first_page; begin < key_end; begin += step) {
    CoreTask part = whole;
    part.key_begin = std::max(begin, key_begin);
    part.key_end = std::min(key_end, begin + step);
    part.partial = plan.partial_floats;
    part.group = static_cast<int64_t>(plan.groups.size());
    part.cost = rows * (part.key_end - part.key_begin);
    plan.partial_floats += rows * (head_dim + 1);
    ++group.splits;
    out.push_back(part);
  }
  plan.groups.push_back(group);
}

void SplitLongKeys(const CoreCall& call, const MaskPlan& masks, int threads,
                   TaskPlan& plan) {
  const int64_t wanted = kTasksPerThread * threads;
  const int64_t count = static_cast<int64_t>(plan.tasks.size());
  if (threads <= 1 || call.cache_page_size == 0 || call.probabilities ||
      count >= wanted) {
    return;
  }
  const int64_t per_task = (wanted + count - 1) / count;
  plan.unsplit.swap(plan.tasks);
  plan.tasks.clear();
  for (const CoreTask& task : plan.unsplit) {
    const int64_t key_begin =
        masks.KeyBegin(task.batch, call.first_query + task.first_row);
    const int64_t key_end =
        masks.KeyEnd(task.batch, call.first_query + task.first_row + task.rows - 1);
    const int64_t splits = std::min(per_task, (key_end - key_begin) / kMinSplitKeys);
    if (splits < 2) {
      plan.tasks.push_back(task);
      continue;
    }
    Split(task, key_begin, key_end, splits, call.cache_page_size, call.head_dim, plan,
          plan.tasks);
  }
}

}  // namespace

void PlanTasks(const CoreCall& call, const MaskPlan& masks, int threads, TaskPlan& plan) {
  plan.tasks.clear();
  plan.groups.clear();
  plan.partial_floats = 0;
  for (int64_t batch = call.batch_begin; batch < call.batch_end; ++batch) {
    AddTasks(call, masks, batch, plan.tasks);
  }
  SplitLongKeys(call, masks, threads, plan);
  // std::sort, not stable_sort: that one allocates. Ties keep the plan's order.
  std::sort(plan.tasks.begin(), plan.tasks.end(),
            [](const CoreTask& a, const CoreTask& b) {
              return std::tie(b.cost, a.batch, a.head, a.first_row, a.key_begin) <
                     std::tie(a.cost, b.batch, b.head, b.first_row, b.key_begin);
            });
}

}  // namespace mha::internal
