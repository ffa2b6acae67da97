// MultiHeadLatentAttention::Impl: the MLA layer's packed weights, primitives, rotary
// tables and workspace, shared by its two forms: absorbed (latent_attention.cc: MQA
// over the latent pages of the cache) and expanded (latent_expanded.cc: kv_b_proj
// gives every head its keys and values, for a prefill with nothing cached).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "mha/latent_attention.hpp"
#include "src/attention/packed_step.h"
#include "src/attention/workspace.h"
#include "src/base/check.h"
#include "src/cache/contiguous_pages.h"
#include "src/cache/kv_cache_storage.h"
#include "src/cache/paged_kv_cache_storage.h"
#include "src/core/attention_core.h"
#include "src/kernels/page_source.h"
#include "src/masks/mask_plan.h"
#include "src/projection/latent_weights.h"
#include "src/projection/linear_primitive.h"
#include "src/threading/parallel_for.h"
#include "src/validation/latent_config.h"

namespace mha {

namespace internal {

// The sequences one call attends for: `sequences` of query_len new rows each, or
// (packed) counts[b] rows from batch_rows[b] on, perhaps as token trees; their
// pages; the longest sequence; each one's first position and each row's position.
// A packed step gives its mask and task plans (null: planned per call).
struct LatentSequences {
  int64_t sequences = 0, query_len = 0, key_len = 0, rows = 0;
  const int64_t* batch_rows = nullptr;
  const int64_t* counts = nullptr;
  const int64_t* first_positions = nullptr;
  const int64_t* positions = nullptr;
  TokenTree tree;
  PageSource pages;
  int64_t page_size = 0;
  const PackedStep::Impl* plans = nullptr;
};

// Buffers and oneDNN call state of one forward, kept between calls: a pool hands
// each concurrent call its own.
struct LatentWorkspace {
  LinearThreads threads;
  std::vector<LinearCall> calls;  // one per primitive (MultiHeadLatentAttention::Impl)
  std::vector<float> query_a, queries, keys, absorbed_queries, nope_rows, contexts,
      head_outputs, rotation_scratch, latents, expanded, expanded_keys;
  std::vector<int64_t> positions, first_positions;  // per row, per sequence
  PackedStep step;  // ForwardPacked's with a batch: a step planned for one layer
  CoreWorkspace core;
  ContiguousPages expanded_pages;  // the expanded form's keys and values
};

// One forward's workspace (leased from the layer's pool) and options.
struct LatentCall {
  LatentWorkspace& workspace;
  TileRule tile_rule = TileRule::kByRows;  // ForwardOptions::batch_invariant
  bool split_decode_keys = true;           // not with batch_invariant
};

}  // namespace internal

struct MultiHeadLatentAttention::Impl {
  // Primitive indices into workspace.calls: kKeyAbsorb + h and kKeyAbsorb + heads + h
  // for each head's W_UK and W_UV.
  enum Call { kQueryA, kQuery, kKey, kOutput, kExpand, kKeyAbsorb };

  Impl(const LatentAttentionConfig& config, const LatentAttentionWeights& weights);

  LatentForm ForwardWithCache(const TensorView& hidden, KvCache::Impl& cache,
                              const MutableTensorView& output,
                              const ForwardOptions& options) const;
  // The same once checked, on a leased workspace.
  LatentForm ForwardWithCache(const internal::LatentCall& call, const TensorView& hidden,
                              KvCache::Impl& cache,
                              const MutableTensorView& output) const;
  // latent_packed.cc: a continuous-batching step over a paged latent cache.
  LatentForm ForwardPacked(const internal::LatentCall& call, const TensorView& hidden,
                           const PackedStep::Impl& step, int64_t layer,
                           const MutableTensorView& output) const;
  // Runs `forward(call)` on a leased workspace with these options.
  template <class Forward>
  LatentForm RunCall(internal::LatentWorkspace& workspace, int num_threads,
                     bool batch_invariant, const Forward& forward) const;
  // Checks the options MLA takes (threads, batch_invariant; it has no positions or
  // shared KV), leases a workspace and runs `forward(call)` on the options' threads.
  template <class Forward>
  LatentForm WithCall(const ForwardOptions& options, const Forward& forward) const;
  void CheckPacked(const TensorView& hidden, const PackedStep::Impl& step, int64_t layer,
                   const MutableTensorView& output) const;
  void Check(const TensorView& hidden, const KvCache::Impl& cache,
             const MutableTensorView& output) const;
  LatentForm Choose(const KvCache::Impl& cache, int64_t batch) const;

  // The steps of a forward over `rows` token rows (B sequences of S). Queries are
  // [rows, heads, rope + nope]; cached rows [rows, rope + latent].
  const float* ProjectQueries(const internal::LatentCall& call, const float* hidden,
                              int64_t rows) const;
  float* ProjectKeys(const internal::LatentCall& call, const float* hidden,
                     int64_t rows) const;
  void AppendToCache(const internal::LatentCall& call, const float* keys,
                     const internal::LatentSequences& step) const;
  // Absorbed: returns the head outputs [rows, heads * v_head_dim].
  float* AttendAbsorbed(const internal::LatentCall& call, const float* queries,
                        const internal::LatentSequences& step) const;
  float* AbsorbQueries(const internal::LatentCall& call, const float* queries,
                       int64_t rows) const;
  float* AttendLatent(const internal::LatentCall& call, const float* absorbed,
                      const internal::LatentSequences& step) const;
  float* ValueUp(const internal::LatentCall& call, const float* contexts,
                 int64_t rows) const;
  // Expanded (latent_expanded.cc), every sequence starting empty: the same.
  float* AttendExpanded(const internal::LatentCall& call, const float* queries,
                        const float* keys, int64_t batch, int64_t seq) const;
  const float* ExpandKeysAndValues(const internal::LatentCall& call, const float* keys,
                                   int64_t rows) const;

  int64_t query_dim() const { return config.qk_rope_head_dim + config.qk_nope_head_dim; }
  int64_t key_dim() const { return internal::LatentKeyDim(config); }
  void Run(const internal::LinearPrimitive& linear, int64_t index, const float* input,
           int64_t rows, float* output, const internal::LatentCall& call) const {
    linear.Execute(input, /*input_bf16=*/false, rows, call.tile_rule, output,
                   call.workspace.calls[index], call.workspace.threads);
  }

  LatentAttentionConfig config;
  float softmax_scale;
  internal::LatentWeights weights;
  dnnl::engine engine;
  internal::LinearPrimitive query_a, query, key, output, expand;
  std::vector<internal::LinearPrimitive> key_absorb, value_up;
  // Rotation of the first qk_rope_head_dim dimensions of a cached row, and of an
  // expanded head's query or key.
  std::optional<RotaryEmbedding> rotary, expanded_rotary;
  mutable internal::Pool<internal::LatentWorkspace> workspaces;
};

template <class Forward>
LatentForm MultiHeadLatentAttention::Impl::WithCall(const ForwardOptions& options,
                                                    const Forward& forward) const {
  internal::CheckThreadCount("options.num_threads", options.num_threads);
  if (options.position_ids.data || options.kv_shared) {
    internal::Fail(
        "options: MultiHeadLatentAttention takes num_threads and batch_invariant; "
        "position_ids and kv_shared must be unset");
  }
  const auto lease = workspaces.Acquire();
  return RunCall(*lease, options.num_threads, options.batch_invariant, forward);
}

template <class Forward>
LatentForm MultiHeadLatentAttention::Impl::RunCall(internal::LatentWorkspace& workspace,
                                                   int num_threads, bool batch_invariant,
                                                   const Forward& forward) const {
  // One oneDNN call state per primitive (kKeyAbsorb + h: W_UK, + heads: W_UV).
  workspace.calls.resize(static_cast<size_t>(kKeyAbsorb + 2 * config.num_heads));
  const internal::LatentCall call{
      workspace,
      batch_invariant ? internal::TileRule::kBatchInvariant : internal::TileRule::kByRows,
      !batch_invariant};
  const internal::ScopedThreadCount threads(num_threads);
  return forward(call);
}

}  // namespace mha
