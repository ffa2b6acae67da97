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

// The names LayerFromStateDict accepts (state_dict.h), read from a safetensors file.
LoadedLayer LoadLayer(const std::string& path, int64_t num_heads,
                      int64_t num_kv_heads = 0);

}  // namespace mha::io
