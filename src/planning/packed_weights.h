// PackedWeights: the layer's own copy of its weights, packed at construction into
// the layout the oneDNN projections read: W as [in, out] row-major, the softmax
// scale folded into the query weights and bias (so the kernels never multiply by
// it), and Q/K/V side by side as [in, model_dim + 2 * kv_dim] when they share an
// input width, so that self-attention projects all three with one GEMM.
#pragma once

#include <cstdint>
#include <vector>

#include "mha/tensor.hpp"

#include "mha/config.hpp"
#include "mha/weights.hpp"

namespace mha::internal {

// A view of one packed weight matrix W[in_dim, out_dim] with row stride `stride`.
struct PackedProjection {
  const void* weights = nullptr;  // float, or bfloat16 bits when bf16; null: none
  const float* bias = nullptr;    // null: no bias
  int64_t in_dim = 0, out_dim = 0, stride = 0;
  bool bf16 = false;
};

class PackedWeights {
 public:
  enum Input { kQuery = 0, kKey = 1, kValue = 2 };

  // `weights` must have passed validation. With config.weight_dtype bf16 the weights
  // are rounded to bf16, and stored as bf16 when `bf16_matmul` (oneDNN can multiply
  // them), else as the rounded floats.
  PackedWeights(const AttentionConfig& config, const AttentionWeights& weights,
                int64_t output_dim, bool bf16_matmul);

  // Q, K and V share one [in, model_dim + 2 * kv_dim] matrix.
  bool qkv_fused() const { return qkv_fused_; }
  PackedProjection FusedQkv() const;  // only when qkv_fused()
  PackedProjection InputProjection(Input input) const;
  PackedProjection OutputProjection() const;
  // First column of `input` in the fused matrix (and in its bias).
  int64_t FusedColumn(Input input) const;

 private:
  void PackInputs(const AttentionConfig& config, const AttentionWeights& weights);
  void PackOutput(const AttentionWeights& weights, int64_t model_dim);
  // Rounds the packed weights to bf16, keeping them as bf16 bits or as floats.
  void RoundToBf16(bool keep_bits);
  const void* Weights(const std::vector<float>& floats, const std::vector<uint16_t>& bits,
                      int64_t offset) const;
  int64_t InputOffset(Input input) const;  // first element of W_input
  int64_t InputStride(Input input) const;  // row stride of W_input

  bool qkv_fused_ = false;
  int64_t in_dims_[3] = {};
  int64_t out_dims_[3] = {};  // model_dim, kv_dim, kv_dim
  int64_t fused_width_ = 0;   // model_dim + 2 * kv_dim
  int64_t model_dim_ = 0, output_dim_ = 0;
  std::vector<float> input_weights_, input_bias_, output_weights_, output_bias_;
  bool bf16_bits_ = false;  // weights live in the *_bf16_ vectors
  std::vector<uint16_t> input_weights_bf16_, output_weights_bf16_;
};

}  // namespace mha::internal
