// LogitFeatures: a layer's or a core call's soft-cap, query temperature, ALiBi slopes
// and sinks, checked once and handed to the attention core (SetLogits).
#pragma once

#include <cstdint>
#include <vector>

#include "mha/features.hpp"
#include "mha/tensor.hpp"

namespace mha::internal {

// AlibiSlopes (BLOOM's slopes) written into `slopes`, reusing its memory.
void AlibiSlopesInto(int64_t num_heads, std::vector<float>& slopes);

// Checks soft-cap, ALiBi slopes and the sliding window for num_heads query heads.
void ValidateFeatures(const AttentionFeatures& features, int64_t num_heads);

struct LogitFeatures {
  LogitFeatures() = default;
  // features must have passed ValidateFeatures; sinks is optional ([num_heads]
  // float32, finite), named `sinks_name` in errors.
  LogitFeatures(const AttentionFeatures& features, const TensorView& sinks,
                int64_t num_heads, const char* sinks_name);
  // The same, reusing this object's memory (the core API's per-thread arguments).
  void Set(const AttentionFeatures& features, const TensorView& sinks, int64_t num_heads,
           const char* sinks_name);

  float softcap = 0.0f;
  float temperature_floor_scale = 0.0f, temperature_attn_scale = 0.0f;  // 0: none
  std::vector<float> alibi_slopes, sinks;                               // empty: none
};

}  // namespace mha::internal
