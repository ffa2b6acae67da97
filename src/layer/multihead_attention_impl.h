// MultiheadAttention::Impl: the layer's packed weights, primitives, logit features
// and QK-norm, and its projection strategy in the one pipeline (internal::Layer):
// one fused QKV projection for self-attention, or queries apart from keys and values
// (multihead_projection.cc). Its own flows: whole and chunked forwards
// (multihead_attention.cc) and cross-attention over a projected memory
// (cross_attention.cc); the cached and packed flows are the pipeline's.
#pragma once

#include <cstdint>

#include "mha/attention.hpp"
#include "src/features/logit_features.h"
#include "src/features/qk_norm.h"
#include "src/layer/layer.h"
#include "src/projection/packed_weights.h"

namespace mha {

struct MultiheadAttention::Impl : internal::Layer {
  enum LinearIndex {
    kQueryLinear,
    kKeyLinear,
    kValueLinear,
    kFusedLinear,
    kOutputLinear
  };
  enum Buffer { kProjectedRows, kMergedHeads, kKeyChunks };

  Impl(const AttentionConfig& layer_config, const AttentionWeights& weights);

  void Forward(const AttentionInputs& inputs, const AttentionMasks& masks,
               const AttentionOutputs& outputs, const ForwardOptions& options) const;
  void ForwardWhole(const internal::Problem& problem, const internal::MaskPlan& masks,
                    const internal::AttentionParams& base,
                    const AttentionOutputs& outputs, bool average,
                    internal::TileRule tile_rule, internal::Workspace& workspace) const;
  void ForwardInChunks(const internal::Problem& problem, const internal::MaskPlan& masks,
                       const internal::AttentionParams& base, bool values_in_output,
                       int64_t chunk_rows, const AttentionOutputs& outputs,
                       internal::TileRule tile_rule,
                       internal::Workspace& workspace) const;
  void RunFlow(const internal::Problem& problem, const internal::MaskPlan& mask_plan,
               const internal::AttentionParams& base, bool is_causal,
               const AttentionOutputs& outputs, const ForwardOptions& options,
               internal::Workspace& workspace) const;
  void CheckMemoryCache(const KvCache::Impl& cache, int64_t batch) const;
  // Fails unless the cache holds this layer's KV heads (not an MLA layer's latents).
  void CheckCacheHeads(const internal::BlockLayout& layout) const;
  void ProjectMemory(const TensorView& memory, const TensorView& memory_lengths,
                     KvCache::Impl& cache) const;
  void ForwardCrossAttention(const TensorView& query, KvCache::Impl& cache,
                             const MutableTensorView& output,
                             const ForwardOptions& options) const;

  // The pipeline's hooks (layer.h).
  internal::Problem CheckInput(const TensorView& input, const MutableTensorView& output,
                               const ForwardOptions& options) const override;
  void CheckCacheLayout(const internal::BlockLayout& layout) const override;
  int ThreadsFor(const internal::Problem& problem, int num_threads) const override;
  // Fails for batch_invariant with int8 weights.
  internal::TileRule TileRuleFor(bool batch_invariant) const override;
  void SetCoreParams(internal::AttentionParams& params, int form) const override;
  internal::KvWrite KvWriteFor(const internal::RotaryRows& rotary_rows,
                               int64_t positions_per_sequence) const override;
  // Self-attention (pass.kv): the fused QKV projection; otherwise queries alone.
  Projected Project(const QueryPass& pass, internal::AttentionParams& params,
                    internal::Workspace& workspace) const override;
  // Without an output projection the heads merge straight into the output.
  internal::HeadRows<float> ContextRows(const QueryPass& pass,
                                        internal::Workspace& workspace) const override;
  void ProjectOutput(const float* context, const QueryPass& pass,
                     internal::Workspace& workspace) const override;

  // Keys and values projected apart from the queries: the first key_counts[b] rows
  // of each sequence of `key` and `value` ([B, key_len, .]), chunk_rows at a time.
  struct KeyPass {
    internal::TileRule tile_rule;
    const TensorView* key = nullptr;
    const TensorView* value = nullptr;
    int64_t batch_size = 0, key_len = 0, chunk_rows = 0;
    const int64_t* key_counts = nullptr;
    internal::RotaryRows rotary_rows;  // [B, key_len], rotary layers
    bool zero_padding = false;         // workspace pages (write_kv_pages.h)
    internal::PageSource pages;
  };
  void ProjectKeys(const KeyPass& pass, internal::Workspace& workspace) const;
  // The one way keys and values are projected apart from queries (ProjectKeys,
  // ProjectMemory): rows [first_row, first_row + count) of key and value, into
  // [count, kv_dim] rows, keys normed across heads where the layer does so.
  void ProjectKeyRows(const TensorView& key, const TensorView& value, int64_t first_row,
                      int64_t count, float* keys, float* values,
                      internal::TileRule tile_rule, internal::Workspace& workspace) const;
  // QK-norm across heads (OLMo 2) of `count` projected rows, in place: `queries`
  // and `keys` point at their first row's query or key columns (null: none).
  void NormAcrossHeads(float* queries, float* keys, int64_t count, int64_t stride) const;
  // The storage of a forward's own K/V pages: bf16 for config.compute_dtype bf16 or
  // bf16 keys or values (attention in bf16), fp32 otherwise.
  internal::KvStorage WorkspaceStorage(const internal::Problem& problem) const;
  // Sizes the workspace pages and points `params` at them (V pages at values_at when
  // given: see ContiguousPages::Reset).
  internal::ContiguousPages& UseWorkspacePages(const internal::Problem& problem,
                                               int64_t key_len,
                                               internal::AttentionParams& params,
                                               internal::Workspace& workspace,
                                               uint8_t* values_at = nullptr,
                                               int64_t sequence_value_bytes = 0) const;
  void Linear(int index, const float* input, int64_t rows, float* output,
              internal::TileRule tile_rule, internal::Workspace& workspace) const {
    RunLinear(linears[index], index, input, rows, output, tile_rule, workspace);
  }
  void Linear(int index, const TensorView& input, int64_t first_row, int64_t rows,
              float* output, internal::TileRule tile_rule,
              internal::Workspace& workspace) const {
    RunLinear(linears[index], index, input, first_row, rows, output, tile_rule,
              workspace);
  }

  AttentionConfig config;
  dnnl::engine engine;
  internal::PackedWeights packed;
  internal::LinearPrimitive linears[5];
  bool has_output = false;
  internal::LogitFeatures logits;
  internal::QkNormWeights qk_norm;
};

}  // namespace mha
