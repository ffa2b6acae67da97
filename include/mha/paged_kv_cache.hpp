// PagedKvCache: the KV cache of a continuous-batching server. Keys and values live in
// a pool of fixed-size blocks preallocated once (for one layer or for every layer of
// a model: one pool of block ids, per-layer storage); each sequence owns a block
// table. Sequences are added, grow block by block, fork (sharing their blocks,
// copy-on-write) and are removed, their blocks returning to the pool.
#pragma once

#include <cstdint>
#include <memory>

#include "mha/config.hpp"
#include "mha/error.hpp"
#include "mha/kv_cache.hpp"
#include "mha/tensor.hpp"

namespace mha {

class MultiheadAttention;
class MultiheadLatentAttention;
struct LatentAttentionConfig;

struct PagedKvCacheOptions {
  int64_t num_blocks = 0;     // blocks in the pool, >= 1
  int64_t block_size = 16;    // tokens per block: a multiple of 16 in [16, 256]
  int64_t max_sequences = 0;  // sequence ids are 0 .. max_sequences - 1
  int64_t num_layers = 1;     // layers storing their K/V in each block
  // kFloat32; kBFloat16 (half the bytes); kInt8 (symmetric) or kFloat8E4M3 /
  // kFloat8E5M2, about a quarter of fp32's bytes, scaled as `scales` says; kInt4 (with
  // kPerChannelKeys), under a quarter (see docs/serving.md for their accuracy).
  // Attention and softmax run in fp32 for all.
  DType storage = DType::kFloat32;
  KvScales scales = KvScales::kPerToken;
  // > 0: the layers using this cache attend over a sliding window of at most this
  // many keys, so a sequence keeps only the blocks its next tokens can still see
  // (memory O(sliding_window) for unbounded generation); earlier blocks go back to
  // the pool as tokens are appended.
  int64_t sliding_window = 0;
  // > 0: the layers using this cache attend within chunks of this many tokens (Llama
  // 4's chunked layers, AttentionFeatures::attention_chunk_size, which must divide
  // it), so a sequence keeps only the blocks of its current chunk: memory
  // O(attention_chunk_size). With sliding_window too, a block goes back to the pool
  // when either says no next token can see it.
  int64_t attention_chunk_size = 0;
};

struct PagedKvCacheStats {
  int64_t num_blocks = 0, free_blocks = 0, used_blocks = 0;
  int64_t shared_blocks = 0;  // used by more than one sequence (after Fork)
  int64_t sequences = 0;
  int64_t bytes_per_block = 0;  // over every layer, with int8 scales
  // Keys per channel (int8 kPerChannelKeys, int4): the fp32 keys of each sequence's
  // partial last block, held from AddSequence (or Fork) to RemoveSequence, outside
  // the pool: num_layers x num_kv_heads x block_size x head_dim floats a sequence.
  int64_t residual_bytes = 0;
};

// Thrown when the pool has too few free blocks for a call; the cache is left exactly
// as it was.
class OutOfBlocksError : public Error {
 public:
  using Error::Error;
};

// Thread safety: calls on different sequences may run concurrently from several
// threads (the pool and block tables are guarded inside); calls involving the same
// sequence must not overlap (Fork reads its parent, so the parent counts). A
// sequence's AppendSlots must come before every layer's forward of that step.
class PagedKvCache {
 public:
  // Throws mha::Error for an invalid config or options.
  PagedKvCache(const AttentionConfig& config, const PagedKvCacheOptions& options);
  // A cache of multi-head latent attention layers (mha/latent_attention.hpp): per
  // token and layer the latent and the rotary key part only. No sliding window or
  // attention chunk.
  PagedKvCache(const LatentAttentionConfig& config, const PagedKvCacheOptions& options);
  ~PagedKvCache();
  PagedKvCache(PagedKvCache&&) noexcept;
  PagedKvCache& operator=(PagedKvCache&&) noexcept;

  const PagedKvCacheOptions& options() const;
  PagedKvCacheStats stats() const;
  bool contains(int64_t sequence) const;
  int64_t length(int64_t sequence) const;  // tokens of the sequence, in every layer

  void AddSequence(int64_t sequence);     // an empty sequence
  void RemoveSequence(int64_t sequence);  // its blocks return to the pool
  // `child` (new) shares all of `parent`'s blocks; a shared block is copied when one
  // of them writes into it (only a partial last block ever is). Prefix caching,
  // parallel sampling, beam search.
  void Fork(int64_t parent, int64_t child);
  // Keeps the first `length` tokens (speculative decoding: drop rejected ones).
  void Truncate(int64_t sequence, int64_t length);
  // Speculative decoding's accepted path after a token-tree step
  // (PackedBatch::tree_parents): of the tokens from `first` on (which the last
  // AppendSlots made room for), keeps those at first + kept[k] for k < count
  // (increasing offsets: the path, root first), moved to first + k in every layer,
  // and truncates the sequence to first + count. Their keys were rotated at position
  // first + depth, which is first + k on a path. All or nothing.
  void KeepTokens(int64_t sequence, int64_t first, const int64_t* kept, int64_t count);
  // Makes room for counts[i] more tokens in sequences[i] (distinct ids), in every
  // layer: blocks are allocated and shared partial blocks copied. All or nothing:
  // throws OutOfBlocksError (or mha::Error for bad ids) leaving the cache as it was.
  // Each layer's ForwardPacked then writes those tokens' keys and values, and only
  // those: the next AppendSlots replaces the room made, a Fork takes it back from
  // parent and child, a Truncate keeps what lies below the new length.
  void AppendSlots(const int64_t* sequences, const int64_t* counts,
                   int64_t num_sequences);

  struct Impl;  // opaque: defined inside the library

 private:
  friend class MultiheadAttention;
  friend class MultiheadLatentAttention;
  friend class PackedStep;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mha
