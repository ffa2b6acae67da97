// AttentionFeatures: what today's decoder models do to attention besides masks and
// rotary embeddings. Shared by the layer (AttentionConfig::features) and the
// attention-core API (CoreOptions::features).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace mha {

// Llama 4's attention temperature tuning (`attn_temperature_tuning`, on its NoPE
// layers): the query at position p is multiplied by
// log(floor((p + 1) / floor_scale) + 1) * attn_scale + 1, as transformers'
// Llama4TextAttention does (in float32), so logits stay sharp over long contexts.
struct AttentionTemperature {
  double floor_scale = 8192.0;  // in [2^63 / FLT_MAX, FLT_MAX]: finite in float32
  double attn_scale = 0.1;      // |attn_scale| <= 2^64 / 89: finite logits
};

// Which values one QK-norm RMSNorm spans.
enum class QkNormScope {
  kPerHead,     // each head's head_dim values (Qwen 3, Gemma 3): weights [head_dim]
  kAcrossHeads  // every head of a token (OLMo 2): weights [num_heads * head_dim] for
                // queries, [num_kv_heads * head_dim] for keys
};

// QK-norm: the projected queries and keys pass through an RMSNorm with learned
// weights (AttentionWeights::query_norm_weight / key_norm_weight, or the core's
// options) before rotary embeddings: x * w / sqrt(mean(x^2) + eps), in float32 as
// transformers' Qwen3RMSNorm computes it. Keys are stored normalised in caches.
struct QkNorm {
  double eps = 1e-6;         // rms_norm_eps; finite, >= 0
  bool unit_offset = false;  // Gemma 3: scale by (1 + w) instead of w
  QkNormScope scope = QkNormScope::kPerHead;
  // Gemma 3n: each head's value row is RMS-normalised too, with no weight (its
  // v_norm), as it is written into pages (caches store normalised values).
  bool value_norm = false;
};

struct AttentionFeatures {
  // Logits soft-capped: score = softcap * tanh(score / softcap), on the scaled
  // scores before any bias or mask (Gemma 2's attn_logit_softcapping); > 0.
  std::optional<float> softcap;
  // ALiBi (BLOOM, MPT): score += slope[h] * (j - i) for key position j and query
  // position i. Slopes are alibi_slopes ([num_heads]) or, when empty, BLOOM's
  // build_alibi_tensor formula for any head count; each |slope| <= 2^64, so that
  // slope x (j - i) is finite at any distance.
  bool alibi = false;
  std::vector<float> alibi_slopes;
  // The query at position p sees keys p - sliding_window + 1 .. p at most (Mistral,
  // Gemma local layers); >= 1. Tiles wholly outside the window are never computed.
  std::optional<int64_t> sliding_window;
  // Keys after p + sliding_window_right are masked too (symmetric local attention);
  // >= 0. Absent: no right limit beyond what causal masking sets.
  std::optional<int64_t> sliding_window_right;
  // Chunked local attention (Llama 4's attention_chunk_size): the query at position p
  // sees only the keys of its own chunk, positions C * floor(p / C) .. C * floor(p / C)
  // + C - 1 (and with causal masking none after p); >= 1. Tiles outside the chunk are
  // never computed.
  std::optional<int64_t> attention_chunk_size;
  // Position-dependent query scale (Llama 4's NoPE layers); see AttentionTemperature.
  std::optional<AttentionTemperature> temperature_tuning;
  // RMSNorm of queries and keys before rotation (Qwen 3, Gemma 3, OLMo 2).
  std::optional<QkNorm> qk_norm;
};

// BLOOM's ALiBi slopes: for the largest power of two n <= num_heads, 2^(-8i/n) for
// i = 1..n; the remaining heads take every other slope of the 2n sequence.
std::vector<float> AlibiSlopes(int64_t num_heads);

}  // namespace mha
