// LoadLayer: an attention layer from a safetensors file with PyTorch names.
#pragma once

#include <cstdint>
#include <string>

#include "mha/mha.hpp"
#include "tools/io/safetensors.h"

namespace mha::io {

// Weights view `file`, so keep the LoadedLayer alive while using them.
struct LoadedLayer {
  Safetensors file;
  AttentionConfig config;
  AttentionWeights weights;
};

// Accepts nn.MultiheadAttention state_dict names (in_proj_weight, in_proj_bias, or
// q_proj_weight/k_proj_weight/v_proj_weight; out_proj.weight, out_proj.bias) or
// separate nn.Linear names (q_proj.weight, k_proj.weight, v_proj.weight,
// out_proj.weight, each with an optional .bias), all [out, in]. A missing bias means
// none; a missing out_proj.weight means no output projection. head_dim is the query
// projection's rows / num_heads; num_kv_heads 0 means num_heads (key and value
// projections then have num_kv_heads * head_dim rows). An optional `sinks` tensor
// [num_heads] gives attention sinks (gpt-oss).
LoadedLayer LoadLayer(const std::string& path, int64_t num_heads,
                      int64_t num_kv_heads = 0);

}  // namespace mha::io
