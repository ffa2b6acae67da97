// Reading projection weights in any WeightLayout, and checking their shapes.
#pragma once

#include <cstdint>

#include "mha/config.hpp"
#include "mha/weights.hpp"

namespace mha::internal {

// Reads W[out, in] of one projection whatever its layout; out = head * head_dim + d.
class WeightReader {
 public:
  WeightReader(const Projection& projection, int64_t in_dim, int64_t out_dim,
               int64_t head_dim);
  float At(int64_t out, int64_t in) const;
  float BiasAt(int64_t out) const;  // 0 without a bias

 private:
  const float* weight_;
  const float* bias_;
  WeightLayout layout_;
  int64_t in_dim_, out_dim_, head_dim_;
};

// Checks an input projection (query, key or value) mapping in_dim to
// num_heads * head_dim.
void ValidateInputProjection(const char* name, const Projection& projection,
                             int64_t in_dim, int64_t num_heads, int64_t head_dim);

// Checks the output projection and returns its output width: model_dim when absent.
int64_t ValidateOutputProjection(const Projection& projection, int64_t model_dim);

// Checks a whole layer (config and every projection); returns its output width.
int64_t ValidateLayer(const AttentionConfig& config, const AttentionWeights& weights);

}  // namespace mha::internal
