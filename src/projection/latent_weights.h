// LatentWeights: an MLA layer's weights packed once as W[in, out] for oneDNN, with
// kv_b_proj split per head into the absorbed form's two factors: W_UK_h, which
// turns a head's q_nope into a query over the latent, and W_UV_h^T, which turns its
// latent context into its v_head_dim output.
#pragma once

#include <vector>

#include "mha/latent_attention.hpp"

namespace mha::internal {

struct LatentWeights {
  // Checked weights (validation/latent_config.h).
  LatentWeights(const LatentAttentionConfig& config,
                const LatentAttentionWeights& weights);

  std::vector<float> query_a;       // [hidden, q_lora_rank] (q LoRA only)
  std::vector<float> query_a_norm;  // [q_lora_rank]
  // Each head's columns reordered [rope part, nope part], so that a rotation of the
  // first dimensions covers the rope part.
  std::vector<float> query;  // [hidden or q_lora_rank, heads * (rope + nope)]
  // kv_a_proj_with_mqa's columns reordered to a cached row: [rope part, latent].
  std::vector<float> key;          // [hidden, rope + kv_lora_rank]
  std::vector<float> latent_norm;  // [kv_lora_rank]
  std::vector<float> key_absorb;   // per head [nope, kv_lora_rank]
  std::vector<float> value_up;     // per head [kv_lora_rank, v_head_dim]
  std::vector<float> expand;       // kv_b_proj^T [kv_lora_rank, heads * (nope + v)]
  std::vector<float> output;       // [heads * v_head_dim, hidden]
};

}  // namespace mha::internal
