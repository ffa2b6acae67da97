// LogitFeatures: a layer's or a core call's soft-cap, query temperature, ALiBi slopes
// and sinks, checked once and handed to the attention core.
#pragma once

#include <cstdint>
#include <vector>

#include "mha/features.hpp"
#include "mha/tensor.hpp"
#include "src/kernels/attention_params.h"

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

// The kernel's soft-cap, ALiBi slopes and sinks from checked features (`logits` must
// outlive the call).
inline void SetLogits(const LogitFeatures& logits, AttentionParams& params) {
  params.softcap = logits.softcap;
  params.temperature_floor_scale = logits.temperature_floor_scale;
  params.temperature_attn_scale = logits.temperature_attn_scale;
  params.alibi_slopes =
      logits.alibi_slopes.empty() ? nullptr : logits.alibi_slopes.data();
  params.sinks = logits.sinks.empty() ? nullptr : logits.sinks.data();
}

}  // namespace mha::internal
