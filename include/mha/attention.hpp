// MultiheadAttention: the layer. Built once from weights, run many times.
#pragma once

#include <memory>

#include "mha/config.hpp"
#include "mha/error.hpp"
#include "mha/kv_cache.hpp"
#include "mha/masks.hpp"
#include "mha/packed_step.hpp"
#include "mha/paged_kv_cache.hpp"
#include "mha/tensor.hpp"
#include "mha/weights.hpp"

namespace mha {

// fp32, batch-first: query [B, Sq, query_dim], key [B, Sk, key_dim],
// value [B, Sk, value_dim], or all unbatched [S, dim]. Absent key/value mean "same
// as query" (self-attention).
struct AttentionInputs {
  TensorView query;
  TensorView key;
  TensorView value;
};

// Caller-owned outputs. output: [B, Sq, output_dim] (unbatched: [Sq, output_dim]).
// attn_weights is optional: [B, num_heads, Sq, Sk] per head, or [B, Sq, Sk] when
// ForwardOptions::average_attn_weights (unbatched: drop B).
struct AttentionOutputs {
  MutableTensorView output;
  MutableTensorView attn_weights;
};

struct ForwardOptions {
  bool average_attn_weights = true;  // PyTorch's default
  int num_threads = 0;               // 0: OpenMP's current default; <= kMaxThreads
  // When the projected Q/K/V and merged heads of the whole call would take more than
  // this, queries run in chunks sized to it (K and V are still projected whole);
  // long causal self-attention then also keeps V in the output buffer. Calls that
  // return attention weights always run whole.
  double workspace_budget_bytes = 64.0 * (1 << 20);
  // Rotary layers only: [B, S] (unbatched: [S]) int32/int64 positions of the query
  // tokens (and of the keys in self-attention), e.g. for left-padded batches or
  // packed sequences. Absent: 0..S-1 in Forward, cache.length(b) + i with a cache.
  TensorView position_ids;
  // Cross-layer KV sharing (Gemma 3n's KV-shared layers): in ForwardWithCache and
  // ForwardPacked, the new tokens' keys and values are already in the cache, written
  // in this step by the layer this one shares with (ForwardPacked: `layer` names that
  // layer); only the queries are projected, and nothing is written or appended. The
  // tokens are the cache's last ones (contiguous: cache.length(b) counts them).
  bool kv_shared = false;
  // Batch-invariant projections, for reproducible serving: every projection adds a
  // row's products in the same order whatever the call's row count, so a token's
  // output bits do not depend on which tokens share its call (a request gives the same
  // bits alone or in any continuous batch, whole or in prefill chunks; the attention
  // core already does for prefill chunks). Costs decode-sized calls their
  // depth-split projections and long decodes their key splits (docs/errors.md,
  // Determinism). Needs fp32 or bf16 weights: int8 weights quantise
  // each call's input with one scale.
  bool batch_invariant = false;
};

class MultiheadAttention {
 public:
  // Validates and packs the weights (copied: the caller may free them afterwards)
  // and creates the oneDNN primitives. Throws mha::Error for invalid input.
  MultiheadAttention(const AttentionConfig& config, const AttentionWeights& weights);
  ~MultiheadAttention();
  MultiheadAttention(MultiheadAttention&&) noexcept;
  MultiheadAttention& operator=(MultiheadAttention&&) noexcept;

  // Throws mha::Error for invalid input, before writing anything. Safe to call from
  // several threads at once on one object.
  void Forward(const AttentionInputs& inputs, const AttentionMasks& masks,
               const AttentionOutputs& outputs, const ForwardOptions& options = {}) const;

  // Decoding with a KV cache, for self-attention layers (key_dim = value_dim =
  // query_dim): appends each sequence's new tokens to `cache` and attends causally
  // over everything cached, bottom-right aligned: new token i of sequence b sits at
  // position cache.length(b) + i and sees positions 0 .. cache.length(b) + i.
  // query is [B, S_new, query_dim] (or [S_new, query_dim] for sequence 0) with
  // B <= cache.max_batch(); row b of the batch is sequence b of the cache.
  // new_lengths ([B] int32/int64, optional) gives how many of the S_new tokens of
  // each sequence are real (ragged batches): the rest are padding, are not cached,
  // and get output 0. Prefill, decode (S_new = 1) and chunked prefill all match one
  // causal Forward over the whole sequence. Attention masks other than causal are not
  // taken here; the layer's features (sliding window, soft-cap, ALiBi, sinks) apply,
  // and rotary layers cache keys rotated to cache.length(b) + i (or
  // options.position_ids). Throws mha::Error, leaving cache and output as they were, when
  // a sequence would exceed max_seq_len or the cache was made for another layer shape.
  void ForwardWithCache(const TensorView& query, const TensorView& new_lengths,
                        KvCache& cache, const MutableTensorView& output,
                        const ForwardOptions& options = {}) const;

  // One step of continuous batching over a paged cache, for self-attention layers:
  // query [T, query_dim] packs the new tokens of batch's sequences, any mix of
  // prefill chunks and single-token decodes. Sequence i's n_i tokens are its last
  // n_i, at most as many as its last cache.AppendSlots made room for (none after a
  // Fork or a Truncate: earlier slots may be shared with a fork): they sit at positions
  // cache.length(id) - n_i + j, their keys (rotated) and values are written into
  // layer `layer` of the cache, and they attend causally, bottom-right aligned, over
  // the sequence's cached tokens (and only its window's, for windowed layers). No
  // padding is computed. options.position_ids ([T] int32/int64) overrides the rotary
  // positions. output [T, output_dim]. Throws mha::Error, leaving the cache and output
  // as they were, for invalid arguments.
  void ForwardPacked(const TensorView& query, const PackedBatch& batch,
                     PagedKvCache& cache, int64_t layer, const MutableTensorView& output,
                     const ForwardOptions& options = {}) const;
  // The same over a step planned once for every layer (PackedStep): query and output
  // [step.tokens(), .], the step's cache.
  void ForwardPacked(const TensorView& query, const PackedStep& step, int64_t layer,
                     const MutableTensorView& output,
                     const PackedLayerOptions& options = {}) const;

  // Cross-attention over a cached memory (Whisper, T5, BART decoders). ProjectMemory
  // projects the encoder output memory [B, S_mem, key_dim] (key_dim = value_dim) to
  // keys and values once, into sequences 0..B-1 of `cache` (replacing what they
  // held; sequence b keeps memory_lengths[b] tokens, [B] int32/int64, or all S_mem).
  // ForwardCrossAttention then attends query [B, Sq, query_dim] over them without
  // projecting the memory again; the only mask is each sequence's length. Layers
  // with rotary embeddings are refused. output [B, Sq, output_dim].
  void ProjectMemory(const TensorView& memory, const TensorView& memory_lengths,
                     KvCache& cache) const;
  void ForwardCrossAttention(const TensorView& query, const KvCache& cache,
                             const MutableTensorView& output,
                             const ForwardOptions& options = {}) const;

  const AttentionConfig& config() const;
  int64_t output_dim() const;
  // Bytes held by the idle workspaces kept for reuse: the memory forwards need beyond
  // inputs, weights and outputs (bounded by ForwardOptions::workspace_budget_bytes
  // plus per-thread tiles and K/V panels).
  size_t workspace_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mha
