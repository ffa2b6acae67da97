// LayerFromStateDict: an attention layer's config and weights from PyTorch
// state_dict names, wherever the tensors live (a safetensors file, Python arrays).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mha/mha.hpp"

namespace mha::io {

// The tensor of that name, or an absent view when there is none.
using TensorLookup = std::function<TensorView(const std::string& name)>;

struct LayerFromNames {
  AttentionConfig config;
  AttentionWeights weights;  // views of what `find` returned
};

// Accepts nn.MultiheadAttention state_dict names (in_proj_weight, in_proj_bias, or
// q_proj_weight/k_proj_weight/v_proj_weight; out_proj.weight, out_proj.bias) or
// separate nn.Linear names (q_proj.weight, k_proj.weight, v_proj.weight, and
// out_proj.weight or Hugging Face's o_proj.weight (Llama, Mistral, Qwen), each with an
// optional .bias), all [out, in]. `names`: every tensor given; one the layer does
// not read (a typo, an unsupported part) is refused, naming it. A missing bias means
// none; a missing out_proj.weight means no output projection. head_dim is the query
// projection's rows / num_heads; num_kv_heads 0 means num_heads (key and value
// projections then have num_kv_heads * head_dim rows). An optional `sinks` tensor
// [num_heads] gives attention sinks (gpt-oss); optional q_norm.weight and
// k_norm.weight give QK-norm's weights (Qwen 3, Gemma 3, OLMo 2: the config's
// features.qk_norm says how they apply). Errors (FileError) start with `source`.
LayerFromNames LayerFromStateDict(const TensorLookup& find,
                                  const std::vector<std::string>& names,
                                  const std::string& source, int64_t num_heads,
                                  int64_t num_kv_heads = 0);

}  // namespace mha::io
