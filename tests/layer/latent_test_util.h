// A small MLA layer for the suites that run MultiheadLatentAttention: DeepSeek's
// shape scaled down (4 heads, kv_lora_rank 32, rope and nope parts of 16),
// interleaved rotary embeddings over 64 positions, random weights.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "mha/latent_attention.hpp"
#include "tests/test_util.h"

namespace mha::testing {

constexpr int64_t kHidden = 32, kHeads = 4, kRank = 32, kNope = 16, kRope = 16,
                  kValueDim = 16;

inline LatentAttentionConfig SmallLatentConfig(int64_t q_lora_rank = 0) {
  LatentAttentionConfig config;
  config.hidden_size = kHidden;
  config.num_heads = kHeads;
  config.q_lora_rank = q_lora_rank;
  config.kv_lora_rank = kRank;
  config.qk_nope_head_dim = kNope;
  config.qk_rope_head_dim = kRope;
  config.v_head_dim = kValueDim;
  config.rotary.pairing = RotaryPairing::kInterleaved;
  config.rotary.max_positions = 64;
  return config;
}

// RMSNorm weights near 1.
inline std::vector<float> NormWeights(int64_t count, uint32_t seed) {
  std::vector<float> weights = RandomFloats(count, seed, 0.2f);
  for (float& w : weights) w += 1.0f;
  return weights;
}

struct LatentWeightsForTest {
  explicit LatentWeightsForTest(const LatentAttentionConfig& c) {
    const int64_t hidden = c.hidden_size, heads = c.num_heads, rank = c.kv_lora_rank;
    const int64_t nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim;
    const int64_t value_dim = c.v_head_dim, query_dim = heads * (nope + rope);
    const float input_scale = 1.0f / std::sqrt(float(hidden));
    if (c.q_lora_rank > 0) {
      q_a = RandomFloats(c.q_lora_rank * hidden, 1, input_scale);
      q_norm = NormWeights(c.q_lora_rank, 2);
      q_b = RandomFloats(query_dim * c.q_lora_rank, 3,
                         1.0f / std::sqrt(float(c.q_lora_rank)));
      views.q_a_proj = TensorView(q_a.data(), Shape{c.q_lora_rank, hidden});
      views.q_a_layernorm = TensorView(q_norm.data(), Shape{c.q_lora_rank});
      views.q_b_proj = TensorView(q_b.data(), Shape{query_dim, c.q_lora_rank});
    } else {
      q = RandomFloats(query_dim * hidden, 4, input_scale);
      views.q_proj = TensorView(q.data(), Shape{query_dim, hidden});
    }
    kv_a = RandomFloats((rank + rope) * hidden, 5, input_scale);
    kv_norm = NormWeights(rank, 6);
    kv_b =
        RandomFloats(heads * (nope + value_dim) * rank, 7, 1.0f / std::sqrt(float(rank)));
    o = RandomFloats(hidden * heads * value_dim, 8, 0.2f);
    views.kv_a_proj_with_mqa = TensorView(kv_a.data(), Shape{rank + rope, hidden});
    views.kv_a_layernorm = TensorView(kv_norm.data(), Shape{rank});
    views.kv_b_proj = TensorView(kv_b.data(), Shape{heads * (nope + value_dim), rank});
    views.o_proj = TensorView(o.data(), Shape{hidden, heads * value_dim});
  }
  std::vector<float> q, q_a, q_norm, q_b, kv_a, kv_norm, kv_b, o;
  LatentAttentionWeights views;
};

}  // namespace mha::testing
