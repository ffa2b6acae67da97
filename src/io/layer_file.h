// LoadLayer: an attention layer from a safetensors file with PyTorch names.
#pragma once

#include <cstdint>
#include <string>

#include "mha/mha.hpp"
#include "src/io/safetensors.h"
#include "src/io/state_dict.h"

namespace mha::io {

// Weights view `file`, so keep the LoadedLayer alive while using them.
struct LoadedLayer {
  Safetensors file;
  AttentionConfig config;
  AttentionWeights weights;
};

// The names LayerFromStateDict accepts (state_dict.h), read from a safetensors file;
// with a prefix (a checkpoint's "model.layers.0.self_attn."), only the tensors named
// with it, taken off. BF16 and F16 tensors are widened to float32.
LoadedLayer LoadLayer(const std::string& path, int64_t num_heads,
                      int64_t num_kv_heads = 0, const std::string& prefix = "");

}  // namespace mha::io
