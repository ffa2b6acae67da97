// ScaledDotProductAttention: the attention core on already-projected queries, keys
// and values (PyTorch's F.scaled_dot_product_attention, flash-attn's and ggml's
// flash attention). The layer's own forwards run through the same kernel.
#pragma once

#include <optional>

#include "mha/config.hpp"
#include "mha/features.hpp"
#include "mha/masks.hpp"
#include "mha/rotary.hpp"
#include "mha/tensor.hpp"

namespace mha {

enum class HeadLayout {
  kBHSD,  // [batch, heads, seq, head_dim]: PyTorch SDPA
  kBSHD,  // [batch, seq, heads, head_dim]: what projections produce (flash-attn, ggml)
};

struct CoreOptions {
  // The order of the query, key, value and output shapes: [B, H, S, D] or [B, S, H,
  // D]. Those four are float32 views whose last dimension is contiguous, strided or
  // dense (mha/tensor.hpp).
  HeadLayout layout = HeadLayout::kBHSD;
  std::optional<float> scale;  // empty: 1 / sqrt(head_dim)
  AttentionFeatures features;  // softcap, ALiBi, sliding window
  TensorView sinks;            // optional [H_q] float32 attention sinks (gpt-oss)
  // QK-norm (features.qk_norm, QkNormScope::kPerHead only): [D] float32 weights of
  // the RMSNorm applied to every query and key row before rotation.
  TensorView query_norm_weight = {};
  TensorView key_norm_weight = {};
  // Optional: rotate query and key (head_dim must match the table's) before
  // attention. Query positions default to where the masks place the queries (i
  // top-left aligned, Sk - Sq + i bottom-right aligned), key positions to j.
  const RotaryEmbedding* rotary = nullptr;
  TensorView query_positions;  // [B, Sq] int32/int64
  TensorView key_positions;    // [B, Sk] int32/int64
  int num_threads = 0;         // 0: OpenMP's current default; <= kMaxThreads
  // kFloat32, or kBFloat16: bf16 dot products where the CPU has AVX512_BF16, fp32
  // elsewhere (AttentionConfig::compute_dtype; docs/serving.md, "bf16").
  DType compute_dtype = DType::kFloat32;
};

// output = softmax(scale * query key^T + biases, masked) value, per query head.
// query [B, H_q, Sq, D], key and value [B, H_kv, Sk, D] (or the BSHD order), with
// H_kv dividing H_q: query head h reads KV head h / (H_q / H_kv) (GQA, MQA). output
// has the query's shape (value's last dimension) in options.layout. masks: every
// AttentionMasks field, with num_heads = H_q. logsumexp (optional, [B, H_q, Sq] float32):
// the natural log of each row's softmax denominator (over the final logits, sink
// included); -inf for a fully masked row, whose output is 0. Throws mha::Error, writing
// nothing, for invalid input. Safe to call from several threads at once.
void ScaledDotProductAttention(const TensorView& query, const TensorView& key,
                               const TensorView& value, const AttentionMasks& masks,
                               const MutableTensorView& output,
                               const CoreOptions& options = {},
                               const MutableTensorView& logsumexp = {});

// The same in plain double-precision loops: the yardstick for tests.
void NaiveScaledDotProductAttention(const TensorView& query, const TensorView& key,
                                    const TensorView& value, const AttentionMasks& masks,
                                    const MutableTensorView& output,
                                    const CoreOptions& options = {},
                                    const MutableTensorView& logsumexp = {});

}  // namespace mha
