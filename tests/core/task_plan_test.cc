// The task planner: key splits for decoding, and work balanced over 2..64 threads on
// the benchmark shapes (the plan is what the dynamic schedule runs, longest first).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "src/core/attention_core.h"
#include "src/core/task_plan.h"
#include "src/features/mask_plan.h"
#include "src/kv/tile_sizes.h"

namespace mha::internal {
namespace {

// One core call of a benchmark case (or its first or last query chunk).
struct PlanCase {
  const char* name;
  int64_t batch, num_heads, num_kv_heads, query_count, first_query, key_len;
  bool causal;
  int64_t cache_page_size = 0;  // > 0: keys in a cache (decoding, chunked prefill)
  // Tokens per page: the cache's, or the workspace pages' of a plain forward.
  int64_t page_size() const { return cache_page_size > 0 ? cache_page_size : 128; }
  int64_t key_length = 0;  // > 0: key padding (BERT's 20%)
};

const PlanCase kCases[] = {
    {"bert_base_s128", 1, 12, 12, 128, 0, 128, false, 0, 102},
    {"bert_base_s512_b8", 8, 12, 12, 512, 0, 512, false},
    {"gpt2_causal_s1024", 1, 12, 12, 1024, 0, 1024, true},
    {"long_causal_s8192_first_chunk", 1, 12, 12, 512, 0, 8192, true},
    {"long_causal_s8192_last_chunk", 1, 12, 12, 512, 7680, 8192, true},
    {"core_d64_h12_s512", 1, 12, 12, 512, 0, 512, false},
    {"core_d64_h12_s512_causal", 1, 12, 12, 512, 0, 512, true},
    {"core_d128_h32_kv8_s1024_causal", 1, 32, 8, 1024, 0, 1024, true},
    {"llama3_prefill_chunk_with_cache", 1, 32, 8, 512, 2048, 2560, true, 128},
    {"decode_long_b1_paged", 1, 32, 8, 1, 32767, 32768, true, 16},
};

struct Planned {
  AttentionParams call;
  std::vector<int64_t> first_positions, key_lengths;
  AttentionMasks masks;
  std::optional<MaskPlan> plan;
};

void Describe(const PlanCase& c, Planned& p) {
  AttentionParams& call = p.call;
  call.num_heads = c.num_heads;
  call.num_kv_heads = c.num_kv_heads;
  call.head_dim = 64;
  call.query_len = c.first_query + c.query_count;
  call.key_len = c.key_len;
  call.batch_end = c.batch;
  call.first_query = c.first_query;
  call.query_count = c.query_count;
  call.page_size = c.page_size();
  if (c.cache_page_size > 0) {  // the chunk's first query sits at first_query
    p.first_positions.assign(c.batch, c.first_query);
    call.first_query = 0;
    p.plan = MaskPlan::ForCache(p.first_positions.data(), c.key_len, AttentionFeatures{});
    return;
  }
  CallSizes sizes;
  sizes.batch_size = c.batch;
  sizes.query_len = call.query_len;
  sizes.key_len = c.key_len;
  p.masks.is_causal = c.causal;
  if (c.key_length > 0) {
    p.key_lengths.assign(c.batch, c.key_length);
    p.masks.key_lengths = TensorView(p.key_lengths.data(), DType::kInt64, Shape{c.batch});
  }
  p.plan = MaskPlan(p.masks, AttentionFeatures{}, sizes, c.num_heads);
}

TEST(TaskPlan, BalancesWorkOverTwoToSixtyFourThreads) {
  for (const PlanCase& c : kCases) {
    Planned p;
    Describe(c, p);
    TaskPlan plan;
    std::vector<int64_t> loads;
    for (int threads = 2; threads <= 64; ++threads) {
      PlanTasks(p.call, *p.plan, threads, plan);
      const int64_t busiest = LongestFirstMakespan(plan.tasks, threads, loads);
      const double mean =
          std::accumulate(loads.begin(), loads.end(), 0.0) / static_cast<double>(threads);
      EXPECT_LE(busiest, 1.10 * mean)
          << c.name << " on " << threads << " threads: " << plan.tasks.size()
          << " tasks, busiest thread " << busiest << ", mean " << mean;
    }
  }
}

// Every query row is planned exactly once, in tiles of at most two kernel query
// blocks (a longer tile reuses nothing and balances worse).
TEST(TaskPlan, CoversEveryQueryOnceInShortTiles) {
  for (const PlanCase& c : kCases) {
    Planned p;
    Describe(c, p);
    TaskPlan plan;
    for (int threads : {1, 2, 7}) {
      PlanTasks(p.call, *p.plan, threads, plan);
      std::vector<int> seen(c.batch * c.num_heads * c.query_count, 0);
      for (const CoreTask& task : plan.tasks) {
        EXPECT_LE(KernelRows(task), 2 * static_cast<int64_t>(kQueryStep)) << c.name;
        if (task.partial >= 0 && task.partial != plan.groups[task.group].offset) continue;
        for (int64_t h = task.head; h < task.head + task.heads; ++h) {
          for (int64_t r = task.first_row; r < task.first_row + task.rows; ++r) {
            ++seen[(task.batch * c.num_heads + h) * c.query_count + r];
          }
        }
      }
      for (size_t i = 0; i < seen.size(); ++i) {
        ASSERT_EQ(seen[i], 1) << c.name << " on " << threads << " threads, row " << i;
      }
    }
  }
}

// Every task holds all query heads of one KV group, prefill and decode alike, so
// that each K/V page a query block reads serves the whole group.
TEST(TaskPlan, TasksHoldWholeKvGroups) {
  for (const PlanCase& c : kCases) {
    Planned p;
    Describe(c, p);
    TaskPlan plan;
    PlanTasks(p.call, *p.plan, 2, plan);
    const int64_t group = c.num_heads / c.num_kv_heads;
    for (const CoreTask& task : plan.tasks) {
      EXPECT_EQ(task.heads, group) << c.name;
      EXPECT_EQ(task.head % group, 0) << c.name << ": head " << task.head;
    }
  }
}

// Decoding splits at fixed multiples of 256 keys on every thread count (the same
// cuts: the same bits), each split's partial results in their place in the group's,
// however the threads' runs of splits group them; a prefill chunk is never split.
TEST(TaskPlan, SplitsDecodeKeysTheSameOnEveryThreadCount) {
  AttentionParams call;
  call.num_heads = 8;
  call.num_kv_heads = 8;
  call.head_dim = 64;
  call.query_len = 1;
  call.key_len = 4096;
  call.batch_end = 1;
  call.query_count = 1;
  call.page_size = 48;  // not a divisor of 256: splits of 288 keys
  const int64_t first_position = 4000;
  const MaskPlan masks = MaskPlan::ForCache(&first_position, 4096, AttentionFeatures{});
  std::vector<std::pair<int64_t, int64_t>> one_thread;
  for (int threads : {1, 2, 3, 4, 64}) {
    TaskPlan plan;
    PlanTasks(call, masks, threads, plan);
    ASSERT_EQ(plan.groups.size(), 8u) << threads << " threads";
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (const CoreTask& task : plan.tasks) {
      ASSERT_EQ(task.split_keys, 288);
      const SplitGroup& group = plan.groups[task.group];
      EXPECT_EQ(task.sink, task.key_begin == 0);
      for (int64_t key = task.key_begin; key < task.key_end;
           key = (key / 288 + 1) * 288) {
        EXPECT_EQ(key % 288, 0);
        const int64_t split = key / 288;
        EXPECT_EQ(task.partial + (split - task.key_begin / 288) * SplitFloats(task, 64),
                  group.offset + split * SplitFloats(group.whole, 64));
        ranges.emplace_back(task.head, key);
      }
    }
    std::sort(ranges.begin(), ranges.end());
    EXPECT_EQ(ranges.size(), 8u * 14u);  // 4001 keys: 13 splits of 288, one of 257
    // 8 runs per thread over 112 splits: a run of 8 or 7 splits per thread per group.
    EXPECT_EQ(plan.tasks.size(), 8u * std::min(14, threads))
        << threads << " threads: runs of splits";
    if (threads == 1) one_thread = ranges;
    EXPECT_EQ(ranges, one_thread) << threads << " threads";
  }
  call.query_count = 2;
  call.query_len = 2;
  TaskPlan plan;
  PlanTasks(call, masks, 4, plan);
  EXPECT_TRUE(plan.groups.empty()) << "a prefill chunk was split";
}

}  // namespace
}  // namespace mha::internal
