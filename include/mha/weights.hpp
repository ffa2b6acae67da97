// AttentionWeights: the projection weights in the layouts users already have.
#pragma once

#include "mha/tensor.hpp"

namespace mha {

// How a projection weight is laid out; in = input width, out = num_heads * head_dim.
enum class WeightLayout {
  kOutIn,          // [out, in]: PyTorch nn.Linear, y = x W^T + b
  kInOut,          // [in, out]: y = x @ W (JAX/Flax Dense, Keras, plain matmul code)
  kHeadsInHeadDim  // [num_heads, in, head_dim]: per-head x @ W[h] (a matrix per head)
};

// One projection. An absent bias means no bias.
struct Projection {
  TensorView weight;
  WeightLayout layout = WeightLayout::kOutIn;
  TensorView bias;  // [out]

  bool present() const { return weight.present(); }
};

// query/key/value are required. An absent output projection means the layer returns
// the concatenated heads [..., num_heads * head_dim] (attention without W_o). The output
// projection maps num_heads * head_dim to any width: kOutIn [out, model] or
// kInOut [model, out].
struct AttentionWeights {
  Projection query;
  Projection key;
  Projection value;
  Projection output;
  // Optional [num_heads] float32 attention sinks (gpt-oss): one learned logit per
  // query head that joins each row's softmax denominator and adds no value.
  TensorView sinks;
  // QK-norm's float32 weights (with AttentionConfig::features.qk_norm, required
  // then): [head_dim] each, or [num_heads * head_dim] and [num_kv_heads * head_dim]
  // for QkNormScope::kAcrossHeads. Hugging Face's q_norm.weight and k_norm.weight.
  TensorView query_norm_weight = {};
  TensorView key_norm_weight = {};
};

// PyTorch nn.MultiheadAttention's packed in_proj_weight [3E, E] and in_proj_bias [3E]
// (absent for bias=False), with out_proj.weight [E, E] and out_proj.bias [E].
AttentionWeights FromPackedInProjection(TensorView in_proj_weight,
                                        TensorView in_proj_bias,
                                        TensorView out_proj_weight,
                                        TensorView out_proj_bias);

}  // namespace mha
