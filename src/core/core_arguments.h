// CoreArguments: the arguments of ScaledDotProductAttention (and of its naive
// reference) checked once: sizes, strides resolved for either layout, masks, logit
// features, scale and rotary positions. Nothing is written before this succeeds.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "mha/scaled_dot_product_attention.hpp"
#include "src/core/attention_core.h"
#include "src/features/logit_features.h"
#include "src/features/qk_norm.h"
#include "src/masks/mask_plan.h"

namespace mha::internal {

struct CoreArguments {
  CoreArguments() = default;
  CoreArguments(const AttentionTensor& query, const AttentionTensor& key,
                const AttentionTensor& value, const AttentionMasks& masks,
                const MutableAttentionTensor& output, const CoreOptions& options,
                const MutableTensorView& logsumexp);

  // Checks and resolves a call, reusing this object's memory: a thread that keeps one
  // CoreArguments allocates nothing for its repeated calls.
  void Check(const AttentionTensor& query, const AttentionTensor& key,
             const AttentionTensor& value, const AttentionMasks& masks,
             const MutableAttentionTensor& output, const CoreOptions& options,
             const MutableTensorView& logsumexp);

  int64_t batch, num_heads, num_kv_heads, query_len, key_len, head_dim;
  float scale;
  HeadRows<const float> query, key, value;
  HeadRows<float> output;
  CallSizes sizes;  // for the masks
  std::optional<MaskPlan> masks;
  LogitFeatures logits;
  QkNormWeights qk_norm;  // per head only
  const RotaryEmbedding* rotary = nullptr;
  // Rotary positions [B, Sq] and [B, Sk] (unused without rotary), and each batch's
  // default query offset.
  std::vector<int64_t> query_positions, key_positions, query_offsets;

 private:
  void CheckSizes(const AttentionTensor& query, const AttentionTensor& key,
                  const AttentionTensor& value, const MutableAttentionTensor& output);
  void ResolveRotary(const CoreOptions& options, CausalAlignment alignment);
};

}  // namespace mha::internal
