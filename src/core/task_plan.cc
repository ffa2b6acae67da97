// PlanTasks: query tiles, key splits and the longest-first order.
#include "src/core/task_plan.h"

#include <algorithm>
#include <functional>
#include <tuple>
#include <utility>

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
// Decoding tasks per thread: a task runs consecutive splits of one KV group (a run),
// streaming its pages without a break (tasks of one split had the threads alternate
// 256-key stretches of one group, each task starting its pages cold), and as many
// runs as this balance the threads.
constexpr int64_t kSplitRunsPerThread = 8;

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

// Splits in [key_begin, key_end) at multiples of `step`.
int64_t SplitCount(int64_t key_begin, int64_t key_end, int64_t step) {
  return (key_end - 1) / step - key_begin / step + 1;
}

// Splits a task's keys at multiples of `step` (whole pages) into ranges of partial
// results, and those into `runs` tasks of consecutive splits (differing by at most
// one split): what a task's key range crosses, not where the cuts fall, depends on
// the runs.
void Split(const CoreTask& whole, int64_t key_begin, int64_t key_end, int64_t step,
           int64_t runs, int64_t value_head_dim, TaskPlan& plan,
           std::vector<CoreTask>& out) {
  const int64_t splits = SplitCount(key_begin, key_end, step);
  const int64_t first = key_begin / step;
  const int64_t split_floats = SplitFloats(whole, value_head_dim);
  const SplitGroup group{whole, splits, plan.partial_floats};
  for (int64_t run = 0; run < runs; ++run) {
    const int64_t begin = run * splits / runs, end = (run + 1) * splits / runs;
    CoreTask part = whole;
    part.key_begin = std::max((first + begin) * step, key_begin);
    part.key_end = std::min(key_end, (first + end) * step);
    part.partial = group.offset + begin * split_floats;
    part.split_keys = step;
    part.sink = begin == 0;
    part.group = static_cast<int64_t>(plan.groups.size());
    part.cost = KernelRows(whole) * (part.key_end - part.key_begin);
    out.push_back(part);
  }
  plan.partial_floats += splits * split_floats;
  plan.groups.push_back(group);
}

// Decoding (one query position per sequence) reads long key ranges for few tasks, so
// those ranges are split (flash-decoding). Where the cuts fall depends on the shape
// alone, never on the thread count: every thread count gives the same bits. The
// splits then run in kSplitRunsPerThread tasks per thread, at least one split each.
void SplitLongKeys(const AttentionParams& params, const MaskPlan& masks, int threads,
                   TaskPlan& plan) {
  if (params.probabilities || !params.split_decode_keys) return;
  const int64_t page = params.page_size;
  const int64_t step = (kSplitKeys + page - 1) / page * page;
  plan.unsplit.swap(plan.tasks);
  plan.tasks.clear();
  // A task's key range, or an empty one when it is not split.
  const auto keys = [&](const CoreTask& task) -> std::pair<int64_t, int64_t> {
    const int64_t key_begin =
        masks.KeyBegin(task.batch, params.first_query + task.first_row);
    const int64_t key_end =
        masks.KeyEnd(task.batch, params.first_query + task.first_row + task.rows - 1);
    if (QueryCount(params, task.batch) != 1 || key_end <= key_begin ||
        (key_end - 1) / step == key_begin / step) {  // one piece: nothing to merge
      return {0, 0};
    }
    return {key_begin, key_end};
  };
  int64_t splits = 0;
  for (const CoreTask& task : plan.unsplit) {
    const auto [key_begin, key_end] = keys(task);
    if (key_end > key_begin) splits += SplitCount(key_begin, key_end, step);
  }
  const int64_t runs = std::max<int64_t>(1, kSplitRunsPerThread * threads);
  for (const CoreTask& task : plan.unsplit) {
    const auto [key_begin, key_end] = keys(task);
    if (key_end <= key_begin) {
      plan.tasks.push_back(task);
      continue;
    }
    const int64_t count = SplitCount(key_begin, key_end, step);
    // This group's share of the runs, rounded up: at least one.
    const int64_t group_runs = std::min(count, (runs * count + splits - 1) / splits);
    Split(task, key_begin, key_end, step, group_runs, params.ValueHeadDim(), plan,
          plan.tasks);
  }
}

}  // namespace

void PlanTasks(const AttentionParams& params, const MaskPlan& masks, int threads,
               TaskPlan& plan) {
  plan.groups.clear();
  plan.partial_floats = 0;
  PlanTiles(params, masks, threads, plan);
  SplitLongKeys(params, masks, threads, plan);
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
