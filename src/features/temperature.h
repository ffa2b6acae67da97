// Llama 4's attention temperature (mha/features.hpp, AttentionTemperature): one
// formula for the kernel, which scales each staged query row by it, and the
// double-precision reference.
#pragma once

#include <cmath>
#include <cstdint>

namespace mha::internal {

// log(floor((position + 1) / floor_scale) + 1) * attn_scale + 1, in float32 step by
// step as transformers computes it.
inline float QueryTemperature(float floor_scale, float attn_scale, int64_t position) {
  const float steps = std::floor((static_cast<float>(position) + 1.0f) / floor_scale);
  return std::log(steps + 1.0f) * attn_scale + 1.0f;
}

}  // namespace mha::internal
