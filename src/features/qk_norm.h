// QkNormWeights: a layer's or a core call's QK-norm (mha/features.hpp, QkNorm),
// checked once: its weights copied with Gemma's 1 + w folded in, and the kernel's
// view of them.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "mha/features.hpp"
#include "mha/tensor.hpp"
#include "src/simd/head_norm.h"

namespace mha::internal {

struct QkNormWeights {
  // Checks the weights against `qk_norm` (both or neither; float32, finite, shaped
  // for its scope) and keeps them, reusing this object's memory. Names in errors:
  // `<prefix>query_norm_weight`, `<prefix>key_norm_weight`.
  void Set(const std::optional<QkNorm>& qk_norm, const TensorView& query_weight,
           const TensorView& key_weight, int64_t num_heads, int64_t num_kv_heads,
           int64_t head_dim, const char* prefix);

  bool enabled() const { return !query.empty(); }
  // The kernel normalises each head's row as it stages it; norms across heads span
  // whole projected rows, which the layer normalises before (RmsNormRows).
  HeadNorm QueryHeadNorm() const { return HeadFor(query); }
  HeadNorm KeyHeadNorm() const { return HeadFor(key); }
  // Gemma 3n's v_norm: per head, a weight of ones.
  HeadNorm ValueHeadNorm() const {
    return value_ones.empty() ? HeadNorm{} : HeadNorm{value_ones.data(), eps};
  }

  bool across_heads = false;
  float eps = 0.0f;
  std::vector<float> query, key;  // empty: no QK-norm
  std::vector<float> value_ones;  // [head_dim] with QkNorm::value_norm, else empty

 private:
  HeadNorm HeadFor(const std::vector<float>& weight) const {
    if (weight.empty() || across_heads) return {};
    return {weight.data(), eps};
  }
};

}  // namespace mha::internal
