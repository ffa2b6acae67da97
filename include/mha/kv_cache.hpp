// KvCache: one layer's projected keys and values for the sequences of a batch, owned
// by the caller and filled by MultiheadAttention::ForwardWithCache.
#pragma once

#include <cstdint>
#include <memory>

#include "mha/config.hpp"
#include "mha/tensor.hpp"

namespace mha {

class MultiheadAttention;
class MultiheadLatentAttention;
struct LatentAttentionConfig;

// How a quantised cache scales what it stores.
enum class KvScales {
  // int8 and fp8: one fp32 scale per (token, KV head) for the keys and one for the
  // values, max|x| over the code's largest value (vLLM's fp8 scheme).
  kPerToken,
  // fp8 only: values cast as they are (saturating), no scales: for a model
  // calibrated for fp8 KV, whose keys and values already fit the format's range.
  kNone,
  // int8 and int4 (which needs it): keys per channel, one fp32 scale per (block, KV
  // head, channel; int4: and a minimum) over
  // the block's tokens (KIVI: keys have outlier channels, and a per-token scale set
  // by one flattens every other channel); values per token as kPerToken (int4: a
  // scale and a minimum per 32 channels of each token's value). The cache
  // keeps each sequence's partial last block of keys in fp32 too, which every append
  // requantises the block from (a KvCache's block: 128 tokens).
  kPerChannelKeys,
  // int8 and int4, ggml's q8_0 and q4_0: each token's key and value in groups of 32
  // channels (ggml's blocks), one fp16 scale per group (symmetric; int4: codes 0..15
  // standing for -8..7). A group whose scale passes fp16's 65504 (int8: max|x|
  // above 8.3e6) reads back infinite, as in ggml.
  kPerGroup,
};

// Preallocated at creation for max_batch sequences of up to max_seq_len tokens,
// num_kv_heads x head_dim per token (grouped-query layers store only their KV
// heads). Nothing is allocated per step. Not thread-safe: one request, one cache.
class KvCache {
 public:
  // storage: kFloat32; kBFloat16 (half the memory and the bytes streamed per decode
  // step; keys and values are rounded to bf16 when appended); kInt8, kFloat8E4M3 or
  // kFloat8E5M2 (a quarter, with `scales`; docs/serving.md states their accuracy);
  // kInt4 (with kPerChannelKeys: about a sixth at head_dim 128).
  // Attention and softmax stay fp32. Throws mha::Error for an invalid config, sizes,
  // storage or scales.
  KvCache(const AttentionConfig& config, int64_t max_batch, int64_t max_seq_len,
          DType storage = DType::kFloat32, KvScales scales = KvScales::kPerToken);
  // A multi-head latent attention layer's cache (mha/latent_attention.hpp): per
  // token the latent (normalised) and the rotated rotary key part, kv_lora_rank +
  // qk_rope_head_dim values, nothing else; its values are the latent inside its keys,
  // so its kind must keep them together (not kPerChannelKeys or kInt4).
  KvCache(const LatentAttentionConfig& config, int64_t max_batch, int64_t max_seq_len,
          DType storage = DType::kFloat32, KvScales scales = KvScales::kPerToken);
  ~KvCache();
  KvCache(KvCache&&) noexcept;
  KvCache& operator=(KvCache&&) noexcept;

  int64_t max_batch() const;
  int64_t max_seq_len() const;
  DType storage() const;
  KvScales scales() const;
  int64_t bytes_per_token() const;         // keys, values and scales of every KV head
  int64_t length(int64_t sequence) const;  // tokens cached for that sequence
  void Reset();                            // every sequence empty
  void Reset(int64_t sequence);            // one sequence empty (continuous batching)
  // Drops a sequence's tokens from position `length` on (length <= length(sequence)),
  // e.g. rejected speculative tokens.
  void Truncate(int64_t sequence, int64_t length);

  struct Impl;  // opaque: defined inside the library

 private:
  friend class MultiheadAttention;
  friend class MultiheadLatentAttention;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mha
