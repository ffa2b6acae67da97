// PackedStep::Impl: a continuous-batching step checked and planned once, read by
// every layer's ForwardPacked (MHA and MLA): the checked batch, each row's position
// and token tree, the call options, and the mask and task plans per layer form.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "mha/attention.hpp"
#include "mha/packed_step.hpp"
#include "src/cache/paged_kv_cache_storage.h"
#include "src/core/task_plan.h"
#include "src/features/mask_plan.h"
#include "src/kernel/attention_params.h"

namespace mha {

struct PackedStep::Impl {
  // What Plan checks and resolves, per sequence and per packed row.
  struct Rows {
    int64_t sequences = 0, tokens = 0;
    int64_t query_len = 0, key_len = 0;  // the most new tokens; the longest sequence
    // Per sequence: cache id, first row (N + 1 entries), new tokens, length before
    // them, and the version Plan saw.
    std::vector<int64_t> ids, rows, counts, first_positions;
    std::vector<uint64_t> versions;
    // Per row: depth in its token tree (trees only), depth-first place and subtree
    // end (features/mask_plan.h), and position (rotary: first position + slot or depth,
    // or options.position_ids).
    std::vector<int64_t> depths, intervals, positions;
    bool has_tree = false, has_position_ids = false;
    int64_t max_position = -1;  // of every row
  };
  // The plans of one layer form: a mask plan and the tasks for AttendHead.
  struct FormPlan {
    int64_t num_heads, num_kv_heads, value_head_dim, window, window_right, chunk;
    bool split_decode_keys;
    int threads;
    internal::MaskPlan masks;
    internal::TaskPlan tasks;
  };

  // tokens: the rows the batch must pack (-1: query_start_loc[N], checked only to be
  // at most the room the cache made). Fills `next`, then swaps it in: a failed Plan
  // leaves the step as it was.
  void Plan(PagedKvCache::Impl& cache, const PackedBatch& batch,
            const ForwardOptions& options, int64_t tokens);
  size_t bytes() const;  // of its buffers and plans
  // Fails unless the step is planned, its sequences are as Plan saw them and
  // `layer` is one of the cache's.
  void CheckCurrent(int64_t layer) const;
  internal::TokenTree tree() const;
  // The pages of one layer, by (sequence index, KV head): a PageSource's lookup.
  struct LayerPages {
    const Impl* step;
    int64_t layer;
    internal::KvPages operator()(int64_t b, int64_t kv_head) const {
      return step->cache->Pages(step->rows.ids[b], layer, kv_head);
    }
  };
  // The plans of the form `params` (sizes, split_decode_keys) and `features`
  // (window, chunk) describe on the current thread count: the first call of a form
  // makes them.
  const FormPlan& PlanFor(const internal::AttentionParams& params,
                          const AttentionFeatures& features) const;

  PagedKvCache::Impl* cache = nullptr;  // null: not planned
  Rows rows, next;
  int num_threads = 0;
  bool batch_invariant = false;

 private:
  void CheckRows(PagedKvCache::Impl& cache, const PackedBatch& batch, int64_t tokens);
  void ResolvePositions(const TensorView& position_ids);

  mutable std::mutex mutex_;  // guards the form plans
  // Plans of this step's forms (the first form_count); later ones are kept for
  // their memory.
  mutable std::vector<std::unique_ptr<FormPlan>> forms_;
  mutable size_t form_count_ = 0;
};

}  // namespace mha
