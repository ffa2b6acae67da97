// AttentionConfig: the sizes that fix a multi-head attention layer.
#pragma once

#include <cstdint>
#include <optional>

#include "mha/features.hpp"
#include "mha/rotary.hpp"
#include "mha/tensor.hpp"

namespace mha {

// The most threads a call may ask for (ForwardOptions::num_threads and the core's):
// OpenMP would try to start every one, and libgomp ends the process when it cannot.
inline constexpr int kMaxThreads = 1024;

// Widths follow PyTorch's nn.MultiheadAttention: query_dim is embed_dim, key_dim and
// value_dim are kdim and vdim. Unlike PyTorch, the model width num_heads * head_dim
// may differ from query_dim (e.g. d_in=3 projected to d_out=2). Biases and the
// output projection are switched on and off by the weights given (see weights.hpp).
// Dropout is not modelled: mha is inference-only, where dropout is the identity.
//
// Grouped-query attention: num_kv_heads key/value heads (dividing num_heads) each
// serve num_heads / num_kv_heads consecutive query heads (Llama, Mistral; 1 = MQA).
struct AttentionConfig {
  int64_t num_heads = 0;
  int64_t head_dim = 0;
  int64_t query_dim = 0;
  int64_t key_dim = 0;         // 0 means query_dim
  int64_t value_dim = 0;       // 0 means query_dim
  std::optional<float> scale;  // empty means 1 / sqrt(head_dim)
  int64_t num_kv_heads = 0;    // 0 means num_heads
  // Storage of the projection weights: kFloat32, or kBFloat16 (half the memory and
  // bandwidth; inputs are rounded to bf16 for the projections, which accumulate in
  // fp32; attention and softmax stay fp32). Where oneDNN has no bf16 matmul (CPUs
  // without AVX-512), the bf16-rounded weights are kept and multiplied in fp32.
  // kInt8: dynamic quantisation. Weights are int8 with one scale per output column
  // (7-bit without VNNI, where oneDNN's 16-bit pair sums would saturate); each
  // projection's input is quantised per call with one scale; the products accumulate
  // in int32 and oneDNN dequantises them as it writes fp32. Attention stays fp32.
  // Bound (docs/serving.md): max |out - fp32 out| <= 5e-2 * max(1, max |fp32 out|).
  DType weight_dtype = DType::kFloat32;
  // Precision of attention itself (Q K^T and P V): kFloat32, or kBFloat16: on CPUs
  // with AVX512_BF16 (not capped below AVX-512) a forward writes its keys and values
  // as bf16 and meets them with queries and probabilities rounded to bf16 in dot
  // products that accumulate in fp32 (the softmax stays fp32); elsewhere it computes
  // in fp32, which is faster there than widening bf16. bf16 key or value input tensors
  // ask for bf16 attention too. With a KV cache, the cache's storage decides instead:
  // a bf16 cache is computed in bf16 (widened to fp32 without AVX512_BF16). Bounds:
  // docs/serving.md, "bf16".
  DType compute_dtype = DType::kFloat32;
  // Soft-capping, ALiBi and sliding windows, applied in every forward of the layer.
  AttentionFeatures features;
  // Rotary embeddings of the projected queries and keys (the KV cache stores rotated
  // keys). Positions are 0..S-1 in Forward, cache.length(b) + i with a cache, or
  // ForwardOptions::position_ids.
  RotaryConfig rotary;

  int64_t model_dim() const { return num_heads * head_dim; }
  int64_t resolved_num_kv_heads() const {
    return num_kv_heads ? num_kv_heads : num_heads;
  }
  // Width of the projected keys and values: num_kv_heads * head_dim.
  int64_t kv_dim() const { return resolved_num_kv_heads() * head_dim; }
  // Query heads per key/value head.
  int64_t group_size() const { return num_heads / resolved_num_kv_heads(); }
  int64_t resolved_key_dim() const { return key_dim ? key_dim : query_dim; }
  int64_t resolved_value_dim() const { return value_dim ? value_dim : query_dim; }
};

}  // namespace mha
