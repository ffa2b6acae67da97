// PlanTasks: query tiles, key splits and the longest-first order.
#include "src/core/task_plan.h"

#include <algorithm>
#include <functional>
#include <tuple>

#include "src/kv/tile_sizes.h"

namespace mha::internal {
namespace {

// Tiles have at least a micro-tile of kernel rows and at most two kernel query
// blocks (a longer tile reuses nothing: the kernel walks the keys once per block),
// so a long prefill spreads over the threads.
constexpr int64_t kMaxTileRows = 2 * kQueryStep;
// A plan whose busiest thread is within this factor of the mean is taken.
constexpr double kBalanced = 1.05;
constexpr int64_t kMaxTasksPerThread = 16;
// Keys per split of a decoding task (rounded up to whole pages). A split costs a
// merge of its rows' context, under 1/250 of reading its keys and values.
constexpr int64_t kSplitKeys = 256;

int64_t QueryCount(const AttentionParams& params, int64_t batch) {
  return params.query_counts ? params.query_counts[batch] : params.query_count;
}

int64_t VisibleKeys(const AttentionParams& params, const MaskPlan& masks, int64_t batch,
                    int64_t row) {
  const int64_t query = params.first_query + row;
  return std::max<int64_t>(0, masks.KeyEnd(batch, query) - masks.KeyBegin(batch, query));
}

// Query heads per task: a KV group's, whose rows then share each K/V page load.
int64_t GroupHeads(const AttentionParams& params) {
  return params.num_heads / params.num_kv_heads;
}

// Cost model: kernel rows x visible keys (a trapezoid: the key range moves linearly
// with the query under causal and window masks).
int64_t TaskCost(const AttentionParams& params, const MaskPlan& masks,
                 const CoreTask& task) {
  const int64_t last = task.first_row + task.rows - 1;
  const int64_t first_keys = VisibleKeys(params, masks, task.batch, task.first_row),
                last_keys = VisibleKeys(params, masks, task.batch, last);
  return std::max<int64_t>(1, KernelRows(task) * (first_keys + last_keys) / 2);
}

void SortLongestFirst(std::vector<CoreTask>& tasks) {
  // std::sort, not stable_sort: that one allocates. Ties keep the plan's order.
  std::sort(tasks.begin(), tasks.end(), [](const CoreTask& a, const CoreTask& b) {
    return std::tie(b.cost, a.batch, a.head, a.first_row, a.key_begin) <
           std::tie(a.cost, b.batch, b.head, b.first_row, b.key_begin);
  });
}

// Tasks for every KV group of every batch, each group's queries cut into `pieces`
// tiles differing by at most one query.
void AddTasks(const AttentionParams& params, const MaskPlan& masks, int64_t pieces,
              std::vector<CoreTask>& tasks) {
  tasks.clear();
  const int64_t heads = GroupHeads(params);
  for (int64_t batch = params.batch_begin; batch < params.batch_end; ++batch) {
    const int64_t count = QueryCount(params, batch);
    const int64_t fewest = (count * heads + kMaxTileRows - 1) / kMaxTileRows;
    const int64_t tiles = std::min(count, std::max(pieces, fewest));
    for (int64_t head = 0; head < params.num_heads; head += heads) {
      for (int64_t tile = 0; tile < tiles; ++tile) {
        CoreTask task;
        task.batch = batch;
        task.head = head;
        task.heads = heads;
        task.first_row = tile * count / tiles;
        task.rows = (tile + 1) * count / tiles - task.first_row;
        task.cost = TaskCost(params, masks, task);
        tasks.push_back(task);
      }
    }
  }
  SortLongestFirst(tasks);
}

// Plans 1, 2, ... tiles per KV group (tiles of at least kTileRows kernel rows) and
// keeps the plan whose busiest simulated thread is least loaded, stopping at a
// balanced one.
void PlanTiles(const AttentionParams& params, const MaskPlan& masks, int threads,
               TaskPlan& plan) {
  int64_t longest = 0;
  for (int64_t batch = params.batch_begin; batch < params.batch_end; ++batch) {
    longest = std::max(longest, QueryCount(params, batch));
  }
  AddTasks(params, masks, 1, plan.tasks);
  if (threads <= 1) return;
  int64_t best = LongestFirstMakespan(plan.tasks, threads, plan.thread_loads);
  for (int64_t pieces = 2;
       longest * GroupHeads(params) / pieces >= static_cast<int64_t>(kTileRows);
       ++pieces) {
    int64_t total = 0;
    for (const CoreTask& task : plan.tasks) total += task.cost;
    if (best <= kBalanced * static_cast<double>(total) / threads) return;
    AddTasks(params, masks, pieces, plan.candidate);
    // Beyond kMaxTasksPerThread tasks per thread tiling only adds overhead.
    if (static_cast<int64_t>(plan.candidate.size()) > kMaxTasksPerThread * threads)
      return;
    const int64_t makespan =
        LongestFirstMakespan(plan.candidate, threads, plan.thread_loads);
    if (makespan < best) {
      best = makespan;
      plan.tasks.swap(plan.candidate);
    }
  }
}

// Splits a task's keys at multiples of `step` (whole pages) into ranges of partial
// results.
void Split(const CoreTask& whole, int64_t key_begin, int64_t key_end, int64_t step,
           int64_t value_head_dim, TaskPlan& plan, std::vector<CoreTask>& out) {
  SplitGroup group{whole, 0, plan.partial_floats};
  const int64_t rows = KernelRows(whole);
  for (int64_t begin = key_begin / step * step; begin < key_end; begin += step) {
    CoreTask part = whole;
    part.key_begin = std::max(begin, key_begin);
    part.key_end = std::min(key_end, begin + step);
    part.partial = plan.partial_floats;
    part.sink = group.splits == 0;
    part.group = static_cast<int64_t>(plan.groups.size());
    part.cost = rows * (part.key_end - part.key_begin);
    plan.partial_floats += rows * (value_head_dim + 1);
    ++group.splits;
    out.push_back(part);
  }
  plan.groups.push_back(group);
}

// Decoding (one query position per sequence) reads long key ranges for few tasks, so
// those ranges are split (flash-decoding). Where the cuts fall depends on the shape
// alone, never on the thread count: every thread count gives the same bits.
void SplitLongKeys(const AttentionParams& params, const MaskPlan& masks, TaskPlan& plan) {
  if (params.probabilities || !params.split_decode_keys) return;
  const int64_t page = params.page_size;
  const int64_t step = (kSplitKeys + page - 1) / page * page;
  plan.unsplit.swap(plan.tasks);
  plan.tasks.clear();
  for (const CoreTask& task : plan.unsplit) {
    const int64_t key_begin =
        masks.KeyBegin(task.batch, params.first_query + task.first_row);
    const int64_t key_end =
        masks.KeyEnd(task.batch, params.first_query + task.first_row + task.rows - 1);
    if (QueryCount(params, task.batch) != 1 || key_end <= key_begin ||
        (key_end - 1) / step == key_begin / step) {  // one piece: nothing to merge
      plan.tasks.push_back(task);
      continue;
    }
    Split(task, key_begin, key_end, step, params.ValueHeadDim(), plan, plan.tasks);
  }
}

}  // namespace

void PlanTasks(const AttentionParams& params, const MaskPlan& masks, int threads,
               TaskPlan& plan) {
  plan.groups.clear();
  plan.partial_floats = 0;
  PlanTiles(params, masks, threads, plan);
  SplitLongKeys(params, masks, plan);
  SortLongestFirst(plan.tasks);
}

int64_t LongestFirstMakespan(const std::vector<CoreTask>& tasks, int threads,
                             std::vector<int64_t>& loads) {
  // A min-heap of thread loads (make_heap reuses `loads`: no allocation per call).
  loads.assign(static_cast<size_t>(std::max(threads, 1)), 0);
  const auto later = std::greater<int64_t>();
  for (const CoreTask& task : tasks) {
    std::pop_heap(loads.begin(), loads.end(), later);
    loads.back() += task.cost;
    std::push_heap(loads.begin(), loads.end(), later);
  }
  return *std::max_element(loads.begin(), loads.end());
}

}  // namespace mha::internal
