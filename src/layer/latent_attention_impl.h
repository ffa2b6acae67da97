// MultiheadLatentAttention::Impl: the MLA layer's weights and primitives, and its
// projection strategy in the one pipeline (internal::Layer): queries through q LoRA,
// cached rows [rotary part, latent] through kv_a (latent RMS-normalised), written
// into the cache's latent pages. Two forms (ChooseForm, LatentForm's costs):
// absorbed (latent_attention.cc: W_UK into each head's query, MQA over the latent
// pages, W_UV per head) and expanded (latent_expanded.cc: kv_b_proj gives every head
// its keys and values in workspace pages, for a prefill with nothing cached).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "mha/latent_attention.hpp"
#include "src/layer/layer.h"
#include "src/projection/latent_weights.h"
#include "src/validation/latent_config.h"

namespace mha {

struct MultiheadLatentAttention::Impl : internal::Layer {
  enum Form { kAbsorbedForm, kExpandedForm };
  // Primitive indices (Workspace::Call): kKeyAbsorb + h and kKeyAbsorb + heads + h
  // for each head's W_UK and W_UV.
  enum Call { kQueryA, kQuery, kKey, kOutput, kExpand, kKeyAbsorb };
  enum Buffer {  // Workspace::Buffer
    kQueryARows,
    kQueries,
    kLatentRows,
    kAbsorbedQueries,
    kNopeRows,
    kContexts,
    kHeadOutputs,
    kLatents,
    kExpanded,
    kExpandedKeys
  };

  Impl(const LatentAttentionConfig& config, const LatentAttentionWeights& weights);

  // The pipeline's hooks (layer.h).
  internal::Problem CheckInput(const TensorView& input, const MutableTensorView& output,
                               const ForwardOptions& options) const override;
  void CheckCacheLayout(const internal::BlockLayout& layout) const override;
  // Expanded only where nothing is cached (LatentForm's costs).
  int ChooseForm(const int64_t* first_positions, int64_t sequences) const override;
  void SetCoreParams(internal::AttentionParams& params, int form) const override;
  internal::KvWrite KvWriteFor(const internal::RotaryRows& rotary_rows,
                               int64_t positions_per_sequence) const override;
  Projected Project(const QueryPass& pass, internal::AttentionParams& params,
                    internal::Workspace& workspace) const override;
  // Absorbed: latent contexts [heads, rows, kv_lora_rank], each head's rows in one
  // run (the input of its W_UV). Expanded: head outputs [rows, heads * v_head_dim].
  internal::HeadRows<float> ContextRows(const QueryPass& pass,
                                        internal::Workspace& workspace) const override;
  void ProjectOutput(const float* context, const QueryPass& pass,
                     internal::Workspace& workspace) const override;

  // The steps, over a pass's rows: queries [rows, heads, rope + nope]; cached rows
  // [rows, rope + latent].
  const float* ProjectQueries(const QueryPass& pass,
                              internal::Workspace& workspace) const;
  float* ProjectLatentRows(const QueryPass& pass, internal::Workspace& workspace) const;
  float* AbsorbQueries(const float* queries, const QueryPass& pass,
                       internal::Workspace& workspace) const;
  float* ValueUp(const float* contexts, const QueryPass& pass,
                 internal::Workspace& workspace) const;
  // Expanded (latent_expanded.cc): every head's keys and values of the pass's latent
  // rows, written into workspace pages that `params` then reads.
  void ExpandKeysAndValues(const float* latent_rows, const QueryPass& pass,
                           internal::AttentionParams& params,
                           internal::Workspace& workspace) const;

  int64_t query_dim() const { return config.qk_rope_head_dim + config.qk_nope_head_dim; }
  int64_t key_dim() const { return internal::LatentKeyDim(config); }
  void Run(const internal::LinearPrimitive& linear, size_t call, const float* input,
           int64_t rows, float* output, const QueryPass& pass,
           internal::Workspace& workspace) const {
    RunLinear(linear, call, input, rows, output, pass.tile_rule, workspace);
  }

  LatentAttentionConfig config;
  float softmax_scale;
  internal::LatentWeights weights;
  dnnl::engine engine;
  internal::LinearPrimitive query_a, query, key, output, expand;
  std::vector<internal::LinearPrimitive> key_absorb, value_up;
  // The expanded heads' rotation (rotary: the first qk_rope_head_dim of a cached row).
  std::optional<RotaryEmbedding> expanded_rotary;
};

}  // namespace mha
