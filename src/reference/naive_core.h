// NaiveAttentionCore: scaled dot-product attention in plain double-precision loops,
// every feature written out from its formula (rotary embeddings, soft-cap, ALiBi,
// sinks, causal alignment, sliding windows). Shared by the naive layer and the naive
// attention-core API; shares no arithmetic with the fast path.
#pragma once

#include <cstdint>
#include <vector>

#include "mha/features.hpp"
#include "mha/masks.hpp"
#include "mha/rotary.hpp"

namespace mha::internal {

struct NaiveCoreInputs {
  int64_t batch = 0, num_heads = 0, num_kv_heads = 0, query_len = 0, key_len = 0,
          head_dim = 0;
  int64_t value_head_dim = 0;             // 0: head_dim
  std::vector<double> query, key, value;  // [B, H, S, D] dense (value: its own D)
  double scale = 1.0;
  const AttentionMasks* masks = nullptr;  // checked by the caller
  AttentionFeatures features;
  const std::vector<float>* sinks = nullptr;  // [num_heads] or empty
  const RotaryEmbedding* rotary = nullptr;
  const int64_t* query_positions = nullptr;  // [B, Sq], with rotary
  const int64_t* key_positions = nullptr;    // [B, Sk], with rotary
  // Dynamic rotary scaling: each sequence's length, whose frequencies it rotates by.
  const int64_t* sequence_lengths = nullptr;
  // QK-norm per head (features.qk_norm, kPerHead): [head_dim] weights with Gemma's
  // unit offset folded in, applied before rotation. Null: none (or done by the caller).
  const std::vector<float>* query_norm_weight = nullptr;
  const std::vector<float>* key_norm_weight = nullptr;
  const std::vector<float>* value_norm_weight = nullptr;  // Gemma 3n: ones, or null
};

struct NaiveCoreOutputs {
  std::vector<double> context;        // [B, H, Sq, D]
  std::vector<double> probabilities;  // [B, H, Sq, Sk]
  std::vector<double> logsumexp;      // [B, H, Sq]
};

NaiveCoreOutputs NaiveAttentionCore(const NaiveCoreInputs& in);

// RMSNorm of each run of weight.size() consecutive values of x, in place:
// x * weight / sqrt(mean(x^2) + eps).
void NaiveRmsNorm(const std::vector<float>& weight, double eps, std::vector<double>& x);

}  // namespace mha::internal
