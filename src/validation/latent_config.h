// An MLA layer's config and weights checked once, for the layer and its cache: every
// failure names the field and the value seen.
#pragma once

#include <cstdint>

#include "mha/latent_attention.hpp"

namespace mha::internal {

void ValidateLatentConfig(const LatentAttentionConfig& config);
void ValidateLatentWeights(const LatentAttentionConfig& config,
                           const LatentAttentionWeights& weights);

// A cached token: the rotary key part, then the latent (the values), so that the
// rotation covers the row's first dimensions and the latent starts on a panel.
inline int64_t LatentKeyDim(const LatentAttentionConfig& config) {
  return config.qk_rope_head_dim + config.kv_lora_rank;
}

}  // namespace mha::internal
