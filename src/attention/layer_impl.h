// MultiheadAttention::Impl: the layer's packed weights, primitives, rotary table,
// logit features and workspace pool, shared by its forward flows
// (multihead_attention.cc: whole and chunked; decode.cc: with a KV cache), which all
// run the attention core (src/core/attention_core.h).
#pragma once

#include <cstdint>
#include <optional>

#include "mha/attention.hpp"
#include "src/attention/packed_step.h"
#include "src/attention/workspace.h"
#include "src/cache/kv_cache_storage.h"
#include "src/cache/paged_kv_cache_storage.h"
#include "src/core/attention_core.h"
#include "src/core/write_kv_pages.h"
#include "src/features/logit_features.h"
#include "src/features/qk_norm.h"
#include "src/masks/mask_plan.h"
#include "src/projection/linear_primitive.h"
#include "src/projection/packed_weights.h"
#include "src/rotary/call_rotation.h"
#include "src/validation/problem.h"

namespace mha {

struct MultiheadAttention::Impl {
  enum LinearIndex {
    kQueryLinear,
    kKeyLinear,
    kValueLinear,
    kFusedLinear,
    kOutputLinear
  };

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
  // Attention params with the layer's sizes, logit features and rotary rows; queries,
  // keys, values and context laid out as projections are: [B, S, heads * head_dim]
  // rows of the given widths.
  internal::AttentionParams BaseParams(const internal::Problem& problem,
                                       const internal::RotaryRows& rotary_rows,
                                       internal::TileRule tile_rule) const;
  // Rotary rows of the query tokens ([B, Sq], in workspace.rotary_positions): at
  // offsets[b] + i by default (offsets null: i). counts: the real rows of each
  // sequence (null: all), whose positions set a dynamic table's lengths.
  internal::RotaryRows RotaryPositions(const internal::Problem& problem,
                                       const TensorView& position_ids,
                                       const int64_t* offsets, const int64_t* counts,
                                       internal::Workspace& workspace) const;
  void RunFlow(const internal::Problem& problem, const internal::MaskPlan& mask_plan,
               const internal::AttentionParams& base, bool is_causal,
               const AttentionOutputs& outputs, const ForwardOptions& options,
               internal::Workspace& workspace) const;
  MutableTensorView StageOutput(const MutableTensorView& output,
                                internal::Workspace& workspace) const;
  void FinishOutput(const MutableTensorView& staged,
                    const MutableTensorView& output) const;
  // num_threads: ForwardOptions::num_threads.
  int ThreadsFor(const internal::Problem& problem, int num_threads) const;
  // How a call cuts the projections (ForwardOptions::batch_invariant); fails for
  // batch_invariant with int8 weights.
  internal::TileRule TileRuleFor(bool batch_invariant) const;
  void ForwardWithCache(const TensorView& query, const TensorView& new_lengths,
                        KvCache::Impl& cache, const MutableTensorView& output,
                        const ForwardOptions& options) const;
  internal::Problem ValidateCacheCall(const TensorView& query,
                                      const TensorView& new_lengths,
                                      const KvCache::Impl& cache,
                                      const MutableTensorView& output,
                                      const ForwardOptions& options,
                                      internal::Workspace& workspace) const;
  void CheckMemoryCache(const KvCache::Impl& cache, int64_t batch) const;
  void ProjectMemory(const TensorView& memory, const TensorView& memory_lengths,
                     KvCache::Impl& cache) const;
  void ForwardCrossAttention(const TensorView& query, KvCache::Impl& cache,
                             const MutableTensorView& output,
                             const ForwardOptions& options) const;
  // Fails unless a cache of this shape fits the layer (a self-attention layer).
  void CheckCacheShape(int64_t num_kv_heads, int64_t head_dim, bool latent) const;
  void ForwardPacked(const TensorView& query, const PackedBatch& batch,
                     PagedKvCache::Impl& cache, int64_t layer,
                     const MutableTensorView& output,
                     const ForwardOptions& options) const;
  // A planned step (packed_forward.cc): checks it suits this layer, then projects,
  // writes the pages (unless kv_shared) and attends on the step's plans.
  void ForwardPacked(const TensorView& query, const PackedStep::Impl& step, int64_t layer,
                     const MutableTensorView& output, bool kv_shared,
                     internal::Workspace& workspace) const;
  void CheckPackedQuery(const TensorView& query) const;
  void CheckPackedLayer(const TensorView& query, const PackedStep::Impl& step,
                        int64_t layer, const MutableTensorView& output) const;
  internal::RotaryRows PackedRotaryRows(const PackedStep::Impl& step,
                                        internal::Workspace& workspace) const;
  // The pipeline (pipeline.cc): project -> write pages -> attention core -> output
  // projection.
  struct QueryPass {
    internal::TileRule tile_rule;  // how the call cuts its projections
    // Query rows [first_row, first_row + rows) of `input`; sequence b's start at
    // b * rows_per_batch (0: the call's one sequence), or (packed) batch_rows[b].
    const TensorView* input = nullptr;
    int64_t first_row = 0, rows = 0, rows_per_batch = 0;
    const int64_t* batch_rows = nullptr;
    // Self-attention: one fused QKV projection, whose keys and values `kv` writes
    // into the pages (its rows are set here). Null: the pages hold K/V already.
    const internal::KvWrite* kv = nullptr;
    float* output = nullptr;  // rows of output_dim floats
    bool padded = false;      // rows past params.query_counts[b] are padding: zeros
    const internal::TaskPlan* plan = nullptr;  // a step's (null: planned here)
  };
  void RunQueries(const QueryPass& pass, internal::AttentionParams params,
                  const internal::MaskPlan& masks, internal::Workspace& workspace) const;
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
  // A KvWrite of this layer's heads, rotated by rotary_rows for rotary layers; the
  // caller sets the rows, sequences and pages.
  internal::KvWrite LayerKvWrite(const internal::RotaryRows& rotary_rows,
                                 int64_t positions_per_sequence) const;
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
  // Projects `rows` rows of `input` with linears[index] into `output`.
  void Linear(int index, const float* input, int64_t rows, float* output,
              internal::TileRule tile_rule, internal::Workspace& workspace) const {
    linears[index].Execute(input, /*input_bf16=*/false, rows, tile_rule, output,
                           workspace.calls[index], workspace.linear_threads);
  }
  // Projects rows [first_row, first_row + rows) of a caller's fp32 or bf16 input.
  void Linear(int index, const TensorView& input, int64_t first_row, int64_t rows,
              float* output, internal::TileRule tile_rule,
              internal::Workspace& workspace) const {
    const int64_t width = input.shape[input.shape.rank() - 1];
    const auto* bytes = static_cast<const uint8_t*>(input.data);
    linears[index].Execute(bytes + first_row * width * DTypeSize(input.dtype),
                           input.dtype == DType::kBFloat16, rows, tile_rule, output,
                           workspace.calls[index], workspace.linear_threads);
  }

  AttentionConfig config;
  int64_t output_dim;
  dnnl::engine engine;
  internal::PackedWeights packed;
  internal::LinearPrimitive linears[5];
  bool has_output = false;
  internal::LogitFeatures logits;
  internal::QkNormWeights qk_norm;
  std::optional<RotaryEmbedding> rotary;
  mutable internal::WorkspacePool workspaces;
};

}  // namespace mha
