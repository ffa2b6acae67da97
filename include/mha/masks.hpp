// AttentionMasks: which keys each query may attend to.
#pragma once

#include "mha/tensor.hpp"

namespace mha {

// How boolean and float mask tensors are read.
enum class MaskConvention {
  // PyTorch nn.MultiheadAttention: bool true = not allowed to attend;
  // float = added to the scores (-inf masks).
  kTorch,
  // masked_fill(mask == 0, -1e9) as in the Annotated Transformer: zero (or false) =
  // masked, anything else = attend. Applies to bool and float masks alike.
  kZeroMeansMasked,
  // PyTorch F.scaled_dot_product_attention: a bool attn_mask's true = takes part in
  // attention; float = added. key_padding_mask (not an F.sdpa argument) keeps
  // nn.MultiheadAttention's reading: true = padding, not attended. Python's
  // mha.scaled_dot_product_attention reads masks this way by default.
  kSdpa,
};

// Where queries sit against keys when Sq != Sk: query i is at position i (top-left,
// PyTorch's is_causal) or at Sk - Sq + i (bottom-right, PyTorch's
// CausalVariant.LOWER_RIGHT: the new tokens at the end of a KV cache). Causal masks,
// sliding windows and ALiBi read these positions.
enum class CausalAlignment { kTopLeft, kBottomRight };

// Any combination may be given; a key is attended only if every mask allows it.
// A query whose keys are all masked gets attention weights 0 and context 0, never
// NaN (PyTorch returns NaN there).
struct AttentionMasks {
  // The query at position p attends to keys 0..p (see causal_alignment).
  bool is_causal = false;
  CausalAlignment causal_alignment = CausalAlignment::kTopLeft;
  // [B, Sk] (unbatched: [Sk]), bool or float32.
  TensorView key_padding_mask;
  // [B] (unbatched: [1]), int32 or int64: batch b attends to keys 0..len-1 only.
  TensorView key_lengths;
  // bool or float32, one of [Sq, Sk]; [B * num_heads, Sq, Sk] (PyTorch 3-D);
  // [B or 1, num_heads or 1, Sq or 1, Sk or 1] (broadcast over size-1 axes).
  TensorView attn_mask;
  // Every C++ entry reads masks by this field (default: nn.MultiheadAttention's);
  // the C API's masks are fixed (mha.h: non-zero key_padding_mask = ignore, float
  // attn_mask added).
  MaskConvention convention = MaskConvention::kTorch;
};

}  // namespace mha
