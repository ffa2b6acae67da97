// Multi-head latent attention (MLA): DeepSeek V2/V3's attention layer, whose KV cache
// holds one compressed latent (kv_lora_rank) and one shared rotary key part
// (qk_rope_head_dim) per token instead of every head's keys and values. Formulas of
// DeepSeek's modeling_deepseek.py (DeepseekV2Attention / DeepseekV3Attention).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "mha/attention.hpp"
#include "mha/paged_kv_cache.hpp"
#include "mha/rotary.hpp"
#include "mha/tensor.hpp"

namespace mha {

// How a call attends. Absorbed: W_UK folded into each head's query, attention as MQA
// over [rotary part, latent] keys with the latent as values (read from the cache's
// pages), W_UV applied to each head's latent context: rope + 2 kv_lora_rank
// multiply-adds per head and key (1088 at DeepSeek's shape), nothing expanded.
// Expanded: kv_b_proj gives every head its keys and values, then plain attention:
// rope + nope + v_head_dim per head and key (320), plus expanding each key once,
// which costs what absorbing each query costs. So a call whose keys are
// all new (a prompt's prefill, nothing cached) is cheaper expanded; a call over
// cached tokens runs absorbed (expanding them again would cost more per cached
// token than attending to it).
enum class LatentForm { kAuto, kAbsorbed, kExpanded };

struct LatentAttentionConfig {
  int64_t hidden_size = 0;
  int64_t num_heads = 0;
  // 0: queries through q_proj (DeepSeek-V2-Lite); else q_a_proj, an RMSNorm
  // (q_a_layernorm) and q_b_proj (V2, V3).
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 512;
  int64_t qk_nope_head_dim = 128;
  int64_t qk_rope_head_dim = 64;  // a multiple of 16
  int64_t v_head_dim = 128;
  double rms_norm_eps = 1e-6;
  // The rotation of the rotary parts (rotary_dim 0 or qk_rope_head_dim). DeepSeek
  // reads them as interleaved pairs (its apply_rotary_pos_emb de-interleaves before
  // rotate_half): RotaryPairing::kInterleaved gives the same logits. YaRN: the
  // caller's inv_freq and attention_factor (the mscale of cos and sin).
  RotaryConfig rotary;
  // Empty: (qk_nope_head_dim + qk_rope_head_dim)^-0.5. DeepSeek with YaRN multiplies
  // it by mscale^2 (DeepSeekYarnMscale).
  std::optional<float> softmax_scale;
  // kAuto: by cost (above). kExpanded applies only where nothing is cached; other
  // calls run absorbed.
  LatentForm form = LatentForm::kAuto;
};

// DeepSeek's yarn_get_mscale: 0.1 * mscale * ln(factor) + 1 for factor > 1, else 1.
double DeepSeekYarnMscale(double factor, double mscale);

// PyTorch nn.Linear weights [out_features, in_features], float32; no biases (DeepSeek
// sets attention_bias false). Copied at construction.
struct LatentAttentionWeights {
  TensorView q_proj;              // [num_heads * (nope + rope), hidden], without q LoRA
  TensorView q_a_proj;            // [q_lora_rank, hidden]
  TensorView q_a_layernorm;       // [q_lora_rank]
  TensorView q_b_proj;            // [num_heads * (nope + rope), q_lora_rank]
  TensorView kv_a_proj_with_mqa;  // [kv_lora_rank + rope, hidden]
  TensorView kv_a_layernorm;      // [kv_lora_rank]
  TensorView kv_b_proj;           // [num_heads * (nope + v_head_dim), kv_lora_rank]
  TensorView o_proj;              // [hidden, num_heads * v_head_dim]
};

class MultiheadLatentAttention;

// An MLA layer's contiguous cache is a KvCache made from its config (mha/kv_cache.hpp):
// per token the latent and the rotary key part, kv_lora_rank + qk_rope_head_dim
// values. bytes_per_token(): that x the storage's element (+ its fp32 scale for
// scaled kinds), against 2 x num_heads x head_dim for plain MHA.

// The layer (LatentForm above says how it attends). Calls on one layer from several
// threads run at once, each on a workspace of the layer's pool (as
// MultiheadAttention's).
class MultiheadLatentAttention {
 public:
  // Throws mha::Error naming the field for an invalid config or weight shape.
  MultiheadLatentAttention(const LatentAttentionConfig& config,
                           const LatentAttentionWeights& weights);
  ~MultiheadLatentAttention();
  MultiheadLatentAttention(MultiheadLatentAttention&&) noexcept;
  MultiheadLatentAttention& operator=(MultiheadLatentAttention&&) noexcept;

  const LatentAttentionConfig& config() const;

  // hidden_states [B, S, hidden] float32 or bfloat16, B <= cache.max_batch():
  // appends S tokens to each of the first B sequences of `cache` (at positions
  // length(b) ..) and writes output [B, S, hidden] (float32 or bfloat16): causal
  // attention over each sequence's cache. On an error (mha::Error, naming the
  // argument) nothing is written and the cache is unchanged. Returns the form the
  // call ran. options as MultiheadAttention's (num_threads, batch_invariant,
  // position_ids for the rotary parts); kv_shared is refused. Safe to call from
  // several threads at once, each with its own cache.
  LatentForm ForwardWithCache(const TensorView& hidden_states, KvCache& cache,
                              const MutableTensorView& output,
                              const ForwardOptions& options = {}) const;

  // One continuous-batching step over a paged cache made from this layer's config
  // (PagedKvCache's latent constructor), as MultiheadAttention::ForwardPacked:
  // hidden_states [T, hidden] packed by batch.sequence_ids and batch.query_start_loc
  // (cache.AppendSlots first, once per step for every layer), output [T, hidden].
  // Runs absorbed. Token trees (batch.tree_parents) verify speculative drafts as for
  // MultiheadAttention (PagedKvCache::KeepTokens keeps the accepted path).
  LatentForm ForwardPacked(const TensorView& hidden_states, const PackedBatch& batch,
                           PagedKvCache& cache, int64_t layer,
                           const MutableTensorView& output,
                           const ForwardOptions& options = {}) const;
  // The same over a step planned once for every layer (PackedStep).
  LatentForm ForwardPacked(const TensorView& hidden_states, const PackedStep& step,
                           int64_t layer, const MutableTensorView& output) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The same layer in plain double-precision loops in DeepSeek's expanded form
// (kv_b_proj gives each head's keys and values), over whole sequences: causal
// self-attention of hidden_states [B, S, hidden] at positions 0 .. S - 1. The
// yardstick of the tests.
void NaiveMultiheadLatentAttention(const LatentAttentionConfig& config,
                                   const LatentAttentionWeights& weights,
                                   const TensorView& hidden_states,
                                   const MutableTensorView& output);

}  // namespace mha
