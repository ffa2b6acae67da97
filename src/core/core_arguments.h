// CoreArguments: the arguments of ScaledDotProductAttention (and of its naive
// reference) checked once: sizes, strides resolved for either layout, masks, logit
// features, scale and rotary positions. Nothing is written before this succeeds.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "mha/scaled_dot_product_attention.hpp"
#include "src/api/problem.h"
#include "src/core/attention_core.h"
#include "src/features/logit_features.h"
#include "src/masks/mask_plan.h"

namespace mha::internal {

struct CoreArguments {
  CoreArguments(const AttentionTensor& query, const AttentionTensor& key,
                const AttentionTensor& value, const AttentionMasks& masks,
                const MutableAttentionTensor& output, const CoreOptions& options,
                const MutableTensorView& logsumexp);

  int64_t batch, num_heads, num_kv_heads, query_len, key_len, head_dim;
  float scale;
  HeadRows<const float> query, key, value;
  HeadRows<float> output;
  Problem problem;  // for the masks
  std::optional<MaskPlan> masks;
  std::optional<LogitFeatures> logits;
  // Rotary positions [B, Sq] and [B, Sk] (empty without rotary).
  std::vector<int64_t> query_positions, key_positions;
};

}  // namespace mha::internal
