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

// How packed weights are stored: float, bfloat16 bits, or int8 with one fp32 scale
// per output column (W[k, n] ~ scales[n] * q[k, n]).
enum class WeightStorage { kFloat32, kBFloat16, kInt8 };

// A view of one packed weight matrix W[in_dim, out_dim] with row stride `stride`.
struct PackedProjection {
  const void* weights = nullptr;  // of `storage`; null: none
  const float* bias = nullptr;    // null: no bias
  int64_t in_dim = 0, out_dim = 0, stride = 0;
  WeightStorage storage = WeightStorage::kFloat32;
  const float* scales = nullptr;  // int8: out_dim column scales
};

class PackedWeights {
 public:
  enum Input { kQuery = 0, kKey = 1, kValue = 2 };

  // `weights` must have passed validation. With config.weight_dtype bf16 the weights
  // are rounded to bf16, and stored as bf16 when `bf16_matmul` (oneDNN can multiply
  // them), else as the rounded floats. With int8 they are quantised per output
  // column (symmetric, scale = max |column| / int8_levels).
  PackedWeights(const AttentionConfig& config, const AttentionWeights& weights,
                int64_t output_dim, bool bf16_matmul, int int8_levels);

  // Q, K and V share one [in, model_dim + 2 * kv_dim] matrix.
  bool qkv_fused() const { return qkv_fused_; }
  PackedProjection FusedQkv() const;  // only when qkv_fused()
  PackedProjection InputProjection(Input input) const;
  PackedProjection OutputProjection() const;
  // First column of `input` in the fused matrix (and in its bias).
  int64_t FusedColumn(Input input) const;
  // The softmax scale the kernel must still apply: 1 when folded into the query
  // weights; the scale itself under QK-norm, whose RMSNorm would undo a folded one.
  float unfolded_query_scale() const { return unfolded_query_scale_; }

 private:
  void PackInputs(const AttentionConfig& config, const AttentionWeights& weights);
  void PackOutput(const AttentionWeights& weights, int64_t model_dim);
  // Rounds the packed weights to bf16, keeping them as bf16 bits or as floats.
  void RoundToBf16(bool keep_bits);
  void QuantizeToInt8(int levels);
  // Element `offset` of the input (or output) weights in their storage; null: none.
  const void* Weights(bool output, int64_t offset) const;
  int64_t InputOffset(Input input) const;  // first element of W_input
  int64_t InputStride(Input input) const;  // row stride of W_input

  bool qkv_fused_ = false;
  int64_t in_dims_[3] = {};
  int64_t out_dims_[3] = {};  // model_dim, kv_dim, kv_dim
  int64_t fused_width_ = 0;   // model_dim + 2 * kv_dim
  int64_t model_dim_ = 0, output_dim_ = 0;
  float unfolded_query_scale_ = 1.0f;
  std::vector<float> input_weights_, input_bias_, output_weights_, output_bias_;
  WeightStorage storage_ = WeightStorage::kFloat32;  // bf16 and int8: the vectors below
  std::vector<uint16_t> input_weights_bf16_, output_weights_bf16_;
  std::vector<int8_t> input_weights_int8_, output_weights_int8_;
  // int8: per column, the input ones indexed like the fused matrix's columns.
  std::vector<float> input_scales_, output_scales_;
};

}  // namespace mha::internal
