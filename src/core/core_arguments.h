// CoreArguments: the arguments of ScaledDotProductAttention (and of its naive
// reference) checked once: sizes, strides resolved for either layout, masks, logit
// features, scale and rotary positions. Nothing is written before this succeeds.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "mha/scaled_dot_product_attention.hpp"
#include "src/core/attention_core.h"
#include "src/features/call_rotation.h"
#include "src/features/logit_features.h"
#include "src/features/mask_plan.h"
#include "src/features/qk_norm.h"

namespace mha::internal {

struct CoreArguments {
  CoreArguments() = default;
  CoreArguments(const TensorView& query, const TensorView& key, const TensorView& value,
                const AttentionMasks& masks, const MutableTensorView& output,
                const CoreOptions& options, const MutableTensorView& logsumexp);

  // Checks and resolves a call, reusing this object's memory: a thread that keeps one
  // CoreArguments allocates nothing for its repeated calls.
  void Check(const TensorView& query, const TensorView& key, const TensorView& value,
             const AttentionMasks& masks, const MutableTensorView& output,
             const CoreOptions& options, const MutableTensorView& logsumexp);

  int64_t batch, num_heads, num_kv_heads, query_len, key_len, head_dim;
  int64_t value_head_dim;  // the value's and output's; may differ from head_dim
  float scale;
  HeadRows<const float> query, key, value;
  HeadRows<float> output;
  CallSizes sizes;  // for the masks
  std::optional<MaskPlan> masks;
  LogitFeatures logits;
  QkNormWeights qk_norm;                    // per head only
  const RotaryEmbedding* rotary = nullptr;  // options.rotary
  // Rotary positions [B, Sq] and [B, Sk] (unused without rotary), and each batch's
  // default query offset.
  std::vector<int64_t> query_positions, key_positions, query_offsets;
  // What the kernel rotates by: query_rows index query_rotary, key_rows key_rotary
  // (call_rotation.h); sequence_lengths[b]: sequence b's length for dynamic
  // scaling and the reference.
  const RotaryEmbedding* query_rotary = nullptr;
  const RotaryEmbedding* key_rotary = nullptr;
  const int64_t* query_rows = nullptr;
  const int64_t* key_rows = nullptr;
  std::vector<int64_t> sequence_lengths, row_starts;
  CallRotation query_rotation, key_rotation;

 private:
  void CheckSizes(const TensorView& query, const TensorView& key, const TensorView& value,
                  const MutableTensorView& output, HeadLayout layout);
  void ResolveRotary(const CoreOptions& options, CausalAlignment alignment);
  // The rotation of `positions` ([B, len]) at each sequence's length.
  RotaryRows Rotate(CallRotation& rotation, const std::vector<int64_t>& positions,
                    int64_t len);
};

}  // namespace mha::internal
