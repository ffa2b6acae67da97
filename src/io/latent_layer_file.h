// LoadLatentLayer: an MLA layer (DeepSeek V2/V3) from a safetensors file with the
// names of modeling_deepseek.py's attention module, its sizes read off the shapes.
#pragma once

#include <cstdint>
#include <string>

#include "mha/latent_attention.hpp"
#include "src/io/safetensors.h"

namespace mha::io {

// Weights view `file`: keep the LoadedLatentLayer alive while using them.
struct LoadedLatentLayer {
  Safetensors file;
  LatentAttentionConfig config;
  LatentAttentionWeights weights;
};

// Reads q_proj.weight (or q_a_proj.weight, q_a_layernorm.weight and q_b_proj.weight),
// kv_a_proj_with_mqa.weight, kv_a_layernorm.weight, kv_b_proj.weight and
// o_proj.weight; hidden_size, q_lora_rank, kv_lora_rank, qk_rope_head_dim,
// qk_nope_head_dim and v_head_dim follow from their shapes and num_heads. Throws
// FileError naming the tensor that is missing or does not divide.
// `prefix`: as LoadLayer's (src/io/layer_file.h).
LoadedLatentLayer LoadLatentLayer(const std::string& path, int64_t num_heads,
                                  const std::string& prefix = "");

}  // namespace mha::io
